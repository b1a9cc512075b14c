"""SAC: soft actor-critic with twin Q-networks, a tanh-squashed Gaussian actor and automatic entropy tuning.

Box actions only. The actor samples ``u ~ N(mean, std)`` and acts with ``a = tanh(u)`` in ``[-1, 1]``,
mapped to the env's bounds by :meth:`~podium.algos.base.Agent.scale_action`; the replay buffer and
the critics use the ``[-1, 1]`` units. The entropy coefficient ``alpha`` is learned so that the
policy's entropy tracks ``target_entropy`` (``-|A|`` by default). Both critics are one
:class:`~podium.algos.networks.EnsembleMLP` (one batched matmul per layer), with a Polyak-averaged
copy as target. Truncated episodes are bootstrapped (``terminated`` alone stops the bootstrap).

Reading order: ``SACConfig`` (hyperparameters) -> ``SAC.__init__`` (networks) -> policy
(``_sample``, ``act``) -> worker side (``explore``/``record``) -> learner side (``learn`` then
``update``, which holds the three losses).
"""

from __future__ import annotations

import copy
import math
from typing import ClassVar

import gymnasium as gym
import torch
from pydantic import Field
from torch import nn

from podium.algos.base import AgentConfig, register_algo
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

    tau: float = Field(default=0.02, gt=0, le=1)
    """Polyak coefficient of the target critics: ``target <- (1 - tau) target + tau online``."""
    actor_lr: float = 3e-3
    """Adam step size of the actor."""
    critic_lr: float = 3e-3
    """Adam step size of the twin critics."""
    alpha_lr: float = 3e-3
    """Adam step size of ``log(alpha)``."""
    init_alpha: float = 1.0
    """Initial entropy coefficient."""
    autotune_alpha: bool = True
    """Learn ``alpha`` towards ``target_entropy``; False keeps ``init_alpha`` fixed."""
    target_entropy: float | None = None
    """Entropy the policy should keep (nats); None means ``-|A|``."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layer widths of actor and critics."""
    activation: str = "relu"
    """Hidden activation (tanh, relu, elu, silu)."""
    log_std_min: float = -5.0
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper clamp of the actor's log standard deviation."""


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
        self.actor = mlp(self.obs_dim, c.hidden_sizes, 2 * self.action_dim, c.activation, orthogonal=False).to(device)
        self.critic = EnsembleMLP(2, self.obs_dim + self.action_dim, c.hidden_sizes, 1, c.activation).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha_holder = nn.ParameterDict(
            {"log_alpha": torch.tensor(math.log(c.init_alpha), dtype=torch.float32, device=device)}
        )
        self.log_alpha = self.log_alpha_holder["log_alpha"]
        self.target_entropy = -float(self.action_dim) if c.target_entropy is None else c.target_entropy
        self.critic_optimizer = adam(self.critic.parameters(), c.critic_lr, device)
        # one optimiser steps the actor and log(alpha): their losses share one backward pass
        groups = [{"params": list(self.actor.parameters()), "lr": c.actor_lr}]
        if c.autotune_alpha:
            groups.append({"params": [self.log_alpha], "lr": c.alpha_lr})
        self.actor_optimizer = adam(groups, c.actor_lr, device)
        self.actor_side_params = [p for g in groups for p in g["params"]]

    # ----------------------------------------------------------------- policy
    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed-Gaussian actions in ``[-1, 1]`` ``[B, A]`` and their log-probabilities ``[B]``."""
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(self.config.log_std_min, self.config.log_std_max)
        noise = torch.randn(mean.shape, device=mean.device, generator=self.generator)
        return squashed_gaussian(mean, log_std, noise)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if deterministic:
            mean = self.actor(obs)[:, : self.action_dim]
            return self.scale_action(torch.tanh(mean))
        return self.scale_action(self._sample(obs)[0])

    # ----------------------------------------------------------------- worker side
    def exploration_actions(self, obs: torch.Tensor) -> torch.Tensor:
        return self._sample(obs)[0]

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
        actor_loss = (alpha * logp - q_new).mean()
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
        }

    # ----------------------------------------------------------------- persistence
    def modules(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "log_alpha": self.log_alpha_holder,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
