"""Running normalisers for observations and rewards, kept as module buffers (saved, moved, pooled by fusion)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RewardScaler", "RunningMeanStd", "statistics_dtype"]


def statistics_dtype(device: torch.device | str) -> torch.dtype:
    """float64 for running statistics, except on Apple's ``mps``, which has no float64 (float32 there)."""
    return torch.float32 if torch.device(device).type == "mps" else torch.float64


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of ``[B, *shape]`` batches (parallel Welford update).

    ``normalize(x)`` returns ``clip((x - mean) / sqrt(var + eps), -clip, clip)``.
    """

    def __init__(
        self, shape: tuple[int, ...] = (), clip: float = 10.0, eps: float = 1e-8, dtype: torch.dtype = torch.float64
    ) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=dtype))
        self.register_buffer("var", torch.ones(shape, dtype=dtype))
        self.register_buffer("count", torch.tensor(eps, dtype=dtype))
        # the statistics every learner of a pod shares (at its start, a load, or the last fusion): fusion adds
        # each learner's data since then (see :meth:`to_fusable`); transient, so not saved
        for name in ("mean", "var", "count"):
            self.register_buffer(f"shared_{name}", getattr(self, name).clone(), persistent=False)
        self.register_load_state_dict_post_hook(_mark_shared)  # a named function: a policy stays picklable
        self.clip, self.eps = clip, eps

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the batch ``x`` (``[B, *shape]`` or any shape that flattens to it) into the statistics.

        With ``w = n / (count + n)`` the batch's weight and ``d`` its mean minus the running mean, the merged
        mean is ``mean + w d`` and the merged variance ``(1 - w) var + w (batch_var + (1 - w) d^2)`` (the
        parallel Welford formula), written as two ``lerp`` on tensors only: a few sub-envs stepped through the
        gymnasium adapter call this once per env step, where each op's fixed cost is the whole cost."""
        mean, var, count = self.mean, self.var, self.count
        x = x.reshape(-1, *mean.shape).to(mean.dtype)
        batch_var, batch_mean = torch.var_mean(x, 0, correction=0)
        n = _count_tensor(x.shape[0], count)
        total = count + n
        w = n / total
        delta = batch_mean - mean
        mean.lerp_(batch_mean, w)
        var.lerp_(delta.square_().mul_(count / total).add_(batch_var), w)  # count / total = 1 - w
        count.copy_(total)

    @torch.no_grad()
    def mark_shared(self) -> None:
        """Note the current statistics as those every learner shares (the base of the next fusion)."""
        self.shared_mean.copy_(self.mean)
        self.shared_var.copy_(self.var)
        self.shared_count.copy_(self.count)

    @torch.no_grad()
    def to_fusable(self, learners: int) -> None:
        """Turn the buffers, in place, into moments whose element-wise mean over ``learners`` learners is the
        pooled statistics of all their data; :meth:`from_fusable` turns the fused moments back.

        Each learner's statistics are the shared base (``n0`` samples, mean ``m0``, variance ``v0``) plus its
        own data since. With the moments about ``m0`` (count ``n``, first ``n (mean - m0)``, second
        ``n (var + (mean - m0)^2)``), learner k writes ``base + K (moments_k - base)``; the mean over the K
        learners is then ``base + sum_k (moments_k - base)``: the base once and every learner's data once.
        (Averaging mean, variance and count directly would drop the spread between learners' means and
        weigh new data K times too little.)
        """
        n0, m0, v0 = self.shared_count, self.shared_mean, self.shared_var
        centred = self.mean - m0
        first = self.count * centred
        second = self.count * (self.var + centred.square())
        self.count.copy_(n0 + learners * (self.count - n0))
        self.mean.copy_(learners * first)
        self.var.copy_(n0 * v0 + learners * (second - n0 * v0))

    @torch.no_grad()
    def from_fusable(self) -> None:
        """Back from fused moments (see :meth:`to_fusable`) to mean and variance; they become the shared base."""
        centred = self.mean / self.count
        self.var.copy_((self.var / self.count - centred.square()).clamp_min(0.0))
        self.mean.copy_(self.shared_mean + centred)
        self.mark_shared()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + self.eps).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)


class RewardScaler(nn.Module):
    """Scales rewards by the running std of the discounted return (as in PPO's reward normalisation).

    Keeps one discounted return per sub-env; ``scale(reward, done)`` updates the statistics and
    returns ``reward / std(return)``.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.stats = RunningMeanStd((), dtype=dtype)
        # the running discounted return of each sub-env is transient: not saved (checkpoints stay num_envs-free)
        self.register_buffer("ret", torch.zeros(num_envs, dtype=dtype), persistent=False)
        self.gamma, self.clip = gamma, clip

    @torch.no_grad()
    def scale(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        self.ret.mul_(self.gamma).add_(reward)
        self.stats.update(self.ret)
        self.ret.masked_fill_(done, 0.0)
        inverse_std = torch.rsqrt(self.stats.var + self.stats.eps).to(reward.dtype)
        return (reward * inverse_std).clamp_(-self.clip, self.clip)


def _count_tensor(n: int, like: torch.Tensor) -> torch.Tensor:
    """``n`` as a 0-d tensor like ``like`` (an op with a Python number costs a conversion each time)."""
    return torch.full((), n, dtype=like.dtype, device=like.device)


def _mark_shared(module: RunningMeanStd, incompatible: object) -> None:
    """After a load, the loaded statistics are what every learner shares."""
    module.mark_shared()
