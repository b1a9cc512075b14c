"""SAC: soft actor-critic with twin Q-networks, a tanh-squashed Gaussian actor and automatic entropy tuning.

Box actions only. The actor samples ``u ~ N(mean, std)`` and acts with ``a = tanh(u)`` in ``[-1, 1]``,
mapped to the env's bounds by :meth:`~podium.algos.base.Agent.scale_action`; the replay buffer and
the critics use the ``[-1, 1]`` units. The entropy coefficient ``alpha`` is learned so that the
policy's entropy tracks ``target_entropy`` (``-|A|`` by default). Both critics are one
:class:`~podium.algos.networks.EnsembleMLP` (one batched matmul per layer), with a Polyak-averaged
copy as target. Truncated episodes are bootstrapped (``terminated`` alone stops the bootstrap).

Optional **gSDE** (``use_sde``; Raffin, Kober & Stulp 2022): the actor outputs only the mean, and the
pre-tanh noise is ``latent(s) @ E``, the actor's last hidden features (detached) times a matrix
``E ~ N(0, sigma^2)`` with a learned ``sigma`` ``[L, A]``. Each sub-env explores with its own matrix, drawn
anew when its episode ends (and every ``sde_sample_freq`` steps if that is positive), so exploration is a
smooth function of the state along an episode; the learner's updates draw one matrix per batch
(reparameterised, so ``sigma`` is trained by the actor's loss). The log-density is that of the Gaussian over
``E`` (variance ``latent^2 @ sigma^2`` per action) with the usual tanh correction.

Reading order: ``SACConfig`` (hyperparameters) -> ``SAC.__init__`` (networks) -> policy
(``_sample``, ``act``) -> worker side (``explore``/``record``) -> learner side (``learn`` then
``update``, which holds the three losses).
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

import gymnasium as gym
import torch
from pydantic import Field, model_validator
from torch import nn

from podium.algos.base import AgentConfig, HiddenSizes, register_algo
from podium.algos.networks import EnsembleMLP, adam, mlp, polyak_update, squashed_gaussian
from podium.algos.offpolicy import OffPolicyAgent, OffPolicyConfig

__all__ = ["SAC", "SACConfig"]


class SACConfig(OffPolicyConfig):
    """SAC hyperparameters. Defaults reach Pendulum-v1's -200 in about a thousand gradient steps (seconds on a CPU)."""

    mutable: ClassVar[dict[str, tuple[float, float]]] = {
        "actor_lr": (1e-5, 1e-2),
        "critic_lr": (1e-5, 1e-2),
        "alpha_lr": (1e-5, 1e-2),
        "tau": (1e-3, 0.1),
    }
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {"use_sde": (False, True)}
    shape: ClassVar[frozenset[str]] = frozenset({"use_sde"})  # gSDE adds sde_log_std, the actor outputs less

    tau: float = Field(default=0.02, gt=0, le=1)
    """Polyak coefficient of the target critics: ``target <- (1 - tau) target + tau online``."""
    actor_lr: float = Field(default=3e-3, gt=0)
    """Adam step size of the actor."""
    critic_lr: float = Field(default=3e-3, gt=0)
    """Adam step size of the twin critics."""
    alpha_lr: float = Field(default=3e-3, gt=0)
    """Adam step size of ``log(alpha)``."""
    init_alpha: float = Field(default=1.0, gt=0)
    """Initial entropy coefficient."""
    autotune_alpha: bool = True
    """Learn ``alpha`` towards ``target_entropy``; False keeps ``init_alpha`` fixed."""
    target_entropy: float | None = None
    """Entropy the policy should keep (nats); None means ``-|A|``."""
    hidden_sizes: HiddenSizes = (128, 128)
    """Hidden layer widths of actor and critics."""
    activation: str = "relu"
    """Hidden activation (tanh, relu, elu, silu)."""
    log_std_min: float = -5.0
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper clamp of the actor's log standard deviation."""
    use_sde: bool = False
    """Generalised state-dependent exploration (module docstring) instead of a state-dependent std head."""
    sde_sample_freq: int = Field(default=-1, ge=-1)
    """With gSDE: env steps between two draws of every sub-env's noise matrix; -1 (default): only when
    its episode ends."""
    sde_log_std_init: float = -3.0
    """With gSDE: initial ``log(sigma)`` of every noise-matrix entry (Stable-Baselines3's default for SAC)."""

    @model_validator(mode="after")
    def _log_std_range(self) -> SACConfig:
        if self.log_std_min >= self.log_std_max:
            raise ValueError(
                f"log_std_min ({self.log_std_min:g}) must be below log_std_max ({self.log_std_max:g}): they clamp "
                "the actor's log standard deviation (defaults -5 and 2)"
            )
        return self


@register_algo
class SAC(OffPolicyAgent):
    """Soft actor-critic (Haarnoja et al. 2018, with learned temperature) for Box action spaces."""

    name: ClassVar[str] = "sac"
    Config: ClassVar[type[AgentConfig]] = SACConfig
    discrete_actions: ClassVar[tuple[bool, ...]] = (False,)
    default_num_envs: ClassVar[int] = 8
    config: SACConfig

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: SACConfig,
        num_envs: int,
        device: torch.device,
    ) -> None:
        super().__init__(observation_space, action_space, config, num_envs, device)
        c = config
        self.use_sde = c.use_sde
        heads = self.action_dim if c.use_sde else 2 * self.action_dim  # gSDE: the mean only
        self.actor = mlp(self.obs_dim, c.hidden_sizes, heads, c.activation, orthogonal=False).to(device)
        if c.use_sde:  # log sigma of each (latent feature, action) entry of the noise matrices
            latent = c.hidden_sizes[-1] if c.hidden_sizes else self.obs_dim
            sigma = torch.full((latent, self.action_dim), c.sde_log_std_init, device=device)
            self.sde_module = nn.ParameterDict({"log_std": sigma})
            self.noise_matrices = torch.zeros(num_envs, latent, self.action_dim, device=device)
            self.sde_steps = 0  # exploration steps taken: the first one draws every matrix
        self.critic = EnsembleMLP(2, self.obs_dim + self.action_dim, c.hidden_sizes, 1, c.activation).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha_holder = nn.ParameterDict(
            {"log_alpha": torch.tensor(math.log(c.init_alpha), dtype=torch.float32, device=device)}
        )
        self.log_alpha = self.log_alpha_holder["log_alpha"]
        self.target_entropy = -float(self.action_dim) if c.target_entropy is None else c.target_entropy
        self.critic_optimizer = adam(self.critic.parameters(), c.critic_lr, device)
        # one optimiser steps the actor and log(alpha): their losses share one backward pass
        actor_params = [*self.actor.parameters(), *([self.sde_module["log_std"]] if c.use_sde else [])]
        groups = [{"params": actor_params, "lr": c.actor_lr}]
        if c.autotune_alpha:
            groups.append({"params": [self.log_alpha], "lr": c.alpha_lr})
        self.actor_optimizer = adam(groups, c.actor_lr, device)
        self.actor_side_params = [p for g in groups for p in g["params"]]

    # ----------------------------------------------------------------- policy
    def _policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The actor's Gaussian before the tanh: ``mean``, ``log_std`` ``[B, A]`` and, with gSDE, the detached
        latent features ``[B, L]`` whose product with a noise matrix is the noise (std: ``latent^2 @ sigma^2``)."""
        if self.use_sde:
            hidden = self.actor[:-1](obs)
            latent = hidden.detach()
            variance = latent.square() @ self.sde_module["log_std"].exp().square() + 1e-6
            return self.actor[-1](hidden), 0.5 * variance.log(), latent
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(self.config.log_std_min, self.config.log_std_max), None

    def _sample(self, obs: torch.Tensor, matrices: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed-Gaussian actions in ``[-1, 1]`` ``[B, A]`` and their log-probabilities ``[B]``. With gSDE,
        ``matrices [B, L, A]`` are the sub-envs' noise matrices; None draws one for the whole batch."""
        mean, log_std, latent = self._policy(obs)
        if latent is None:
            return squashed_gaussian(
                mean, log_std, torch.randn(mean.shape, device=mean.device, generator=self.generator)
            )
        if matrices is None:  # reparameterised: the actor's loss trains sigma through it
            sigma = self.sde_module["log_std"].exp()
            noise = latent @ (sigma * torch.randn(sigma.shape, device=sigma.device, generator=self.generator))
        else:
            noise = (latent.unsqueeze(-1) * matrices).sum(1)  # latent @ E per row
        return squashed_gaussian(mean, log_std, noise / log_std.exp())

    def action_log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(actions | obs)`` ``[B]`` of given ``[-1, 1]`` actions ``[B, A]`` (the H-term's likelihood;
        with gSDE, that of the Gaussian over the noise matrix)."""
        mean, log_std, _ = self._policy(obs)
        u = torch.atanh(actions.clamp(-1.0 + 1e-6, 1.0 - 1e-6))
        return squashed_gaussian(mean, log_std, (u - mean) / log_std.exp())[1]

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if deterministic:
            mean = self.actor(obs)[:, : self.action_dim]
            return self.scale_action(torch.tanh(mean))
        return self.scale_action(self._sample(obs)[0])

    # ----------------------------------------------------------------- worker side
    def exploration_actions(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.use_sde:
            return self._sample(obs)[0]
        every = self.config.sde_sample_freq
        if self.sde_steps == 0 or (every > 0 and self.sde_steps % every == 0):
            self.noise_matrices = self._draw_noise_matrices(obs.shape[0])
        self.sde_steps += 1
        return self._sample(obs, self.noise_matrices)[0]

    def _draw_noise_matrices(self, rows: int) -> torch.Tensor:
        """``rows`` gSDE noise matrices ``E ~ N(0, sigma^2)`` ``[rows, L, A]``."""
        sigma = self.sde_module["log_std"].detach().exp()
        return sigma * torch.randn((rows, *sigma.shape), device=sigma.device, generator=self.generator)

    def episodes_ended(self, done: torch.Tensor) -> None:
        if self.use_sde and self.sde_steps > 0:  # a new episode explores with a new matrix
            fresh = self._draw_noise_matrices(done.shape[0])
            self.noise_matrices = torch.where(done[:, None, None], fresh, self.noise_matrices)

    # ----------------------------------------------------------------- learner side
    @torch.no_grad()
    def td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Soft Bellman target ``r + gamma * (1 - terminated) * (min_i Q'_i(s', a') - alpha log pi(a'|s'))``
        ``[B]``, with ``a' ~ pi(s')`` and the target critics ``Q'``."""
        next_actions, next_logp = self._sample(batch["next_obs"])
        next_q = self.critic_target(torch.cat((batch["next_obs"], next_actions), -1)).squeeze(-1).amin(0)
        soft_value = next_q - self.log_alpha.exp() * next_logp
        return batch["rewards"] + self.config.gamma * (1.0 - batch["terminated"]) * soft_value

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        obs = batch["obs"]
        alpha = self.log_alpha.detach().exp()
        # critics: regress both onto the soft Bellman target
        target_q = self.td_target(batch)
        q = self.critic(torch.cat((obs, batch["actions"]), -1)).squeeze(-1)  # [2, B]
        critic_loss = 0.5 * (q - target_q).square().mean(1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        # actor: maximise min-Q of its own (reparameterised) action plus alpha * entropy
        new_actions, logp = self._sample(obs)
        q_new = self.critic(torch.cat((obs, new_actions), -1)).squeeze(-1).amin(0)
        h_term = self.h_term(batch)  # 0 unless h_term_lambda > 0: the best recent episodes' actions, weighted
        actor_loss = (alpha * logp - q_new).mean() - self.config.h_term_lambda * h_term
        # temperature: raise alpha when the entropy is below target, lower it when above
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        (actor_loss + alpha_loss).backward(inputs=self.actor_side_params)  # no gradient into the critics
        self.actor_optimizer.step()
        polyak_update(self.critic_target, self.critic, self.config.tau)
        return {
            "loss/critic": critic_loss.detach(),
            "loss/actor": actor_loss.detach(),
            "loss/alpha": alpha_loss.detach(),
            "alpha": alpha,
            "entropy": -logp.detach().mean(),
            "q": q.detach().mean(),
            **({"loss/h_term": h_term.detach()} if self.config.h_term_lambda > 0 else {}),
        }

    # ----------------------------------------------------------------- persistence
    def modules(self) -> dict[str, nn.Module]:
        modules = {
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "log_alpha": self.log_alpha_holder,
        }
        if self.use_sde:
            modules["sde_log_std"] = self.sde_module
        return modules

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
