"""Running normalisers for observations and rewards, kept as module buffers (saved, moved, averaged)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RewardScaler", "RunningMeanStd"]


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of ``[B, *shape]`` batches (parallel Welford update).

    ``normalize(x)`` returns ``clip((x - mean) / sqrt(var + eps), -clip, clip)``.
    """

    def __init__(self, shape: tuple[int, ...] = (), clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(eps, dtype=torch.float64))
        self.clip, self.eps = clip, eps

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + batch_var * n + delta.square() * self.count * n / total) / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + self.eps).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)


class RewardScaler(nn.Module):
    """Scales rewards by the running std of the discounted return (as in PPO's reward normalisation).

    Keeps one discounted return per sub-env; ``scale(reward, done)`` updates the statistics and
    returns ``reward / std(return)``.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0) -> None:
        super().__init__()
        self.stats = RunningMeanStd(())
        # the running discounted return of each sub-env is transient: not saved (checkpoints stay num_envs-free)
        self.register_buffer("ret", torch.zeros(num_envs, dtype=torch.float64), persistent=False)
        self.gamma, self.clip = gamma, clip

    @torch.no_grad()
    def scale(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        self.ret.mul_(self.gamma).add_(reward.to(torch.float64))
        self.stats.update(self.ret)
        self.ret.masked_fill_(done, 0.0)
        std = torch.sqrt(self.stats.var + self.stats.eps).to(reward.dtype)
        return (reward / std).clamp(-self.clip, self.clip)
