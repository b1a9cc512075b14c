"""TD3: twin delayed deep deterministic policy gradient.

Box actions only. A deterministic actor ``mu(s) = tanh(net(s))`` acts in ``[-1, 1]`` (mapped to the
env's bounds by :meth:`~podium.algos.base.Agent.scale_action`) with Gaussian exploration noise; the
replay buffer and the critics use the ``[-1, 1]`` units. TD3's three fixes over DDPG:

* **twin critics** — the Bellman target takes the smaller of two target Q-values (both critics are one
  :class:`~podium.algos.networks.EnsembleMLP`, so they cost one batched matmul per layer);
* **target policy smoothing** — clipped Gaussian noise on the target action;
* **delayed updates** — the actor and the target networks move once every ``policy_delay`` critic steps.

:class:`~podium.algos.ddpg.DDPG` is this class with one critic, no smoothing and no delay.
Truncated episodes are bootstrapped (``terminated`` alone stops the bootstrap).

Reading order: ``TD3Config`` (hyperparameters) -> ``TD3.__init__`` (networks) -> worker side
(``explore``/``record``) -> learner side (``learn`` then ``update``, which holds both losses).
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar, Literal

import gymnasium as gym
import torch
from pydantic import Field
from torch import nn

from podium.algos.base import AgentConfig, HiddenSizes, register_algo
from podium.algos.networks import EnsembleMLP, adam, mlp, polyak_update
from podium.algos.offpolicy import OffPolicyAgent, OffPolicyConfig

__all__ = ["TD3", "TD3Config"]


class TD3Config(OffPolicyConfig):
    """TD3 hyperparameters. Defaults reach Pendulum-v1's -200 in about a thousand gradient steps (seconds on a CPU)."""

    mutable: ClassVar[dict[str, tuple[float, float]]] = {
        "actor_lr": (1e-5, 1e-2),
        "critic_lr": (1e-5, 1e-2),
        "tau": (1e-3, 0.1),
        "exploration_noise": (0.0, 1.0),  # exploration is part of what a population searches
        "ou_theta": (0.01, 1.0),
    }
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {"noise_type": ("gaussian", "ou")}

    tau: float = Field(default=0.05, gt=0, le=1)
    """Polyak coefficient of the target networks, ``target <- (1 - tau) target + tau online``, applied
    at each actor step (every ``policy_delay`` critic steps)."""
    actor_lr: float = Field(default=3e-3, gt=0)
    """Adam step size of the actor."""
    critic_lr: float = Field(default=3e-3, gt=0)
    """Adam step size of the critic(s)."""
    policy_delay: int = Field(default=2, gt=0)
    """Critic steps per actor (and target) step."""
    exploration_noise: float = Field(default=0.1, ge=0)
    """Scale of the exploration noise added to the actor's action, in ``[-1, 1]`` action units (0 = none):
    the std of the Gaussian noise, or the OU process's ``sigma``."""
    noise_type: Literal["gaussian", "ou"] = "gaussian"
    """``gaussian``: independent noise at every step. ``ou``: an Ornstein-Uhlenbeck process per sub-env,
    ``x <- x - ou_theta * x * ou_dt + exploration_noise * sqrt(ou_dt) * N(0, 1)``, reset to 0 when an
    episode ends: noise that keeps its direction for about ``1 / (ou_theta * ou_dt)`` steps, which explores
    deceptive tasks (MountainCarContinuous) that independent noise does not."""
    ou_theta: float = Field(default=0.15, gt=0)
    """Mean-reversion rate of the OU noise (its stationary std is ``exploration_noise / sqrt(2 ou_theta)``)."""
    ou_dt: float = Field(default=1e-2, gt=0)
    """Time step of the OU noise."""
    target_noise: float = Field(default=0.2, ge=0)
    """Std of the target policy smoothing noise, in ``[-1, 1]`` action units (0 = no smoothing)."""
    target_noise_clip: float = Field(default=0.5, ge=0)
    """The smoothing noise is clipped to ``[-target_noise_clip, target_noise_clip]``."""
    hidden_sizes: HiddenSizes = (128, 128)
    """Hidden layer widths of actor and critics."""
    activation: str = "relu"
    """Hidden activation (tanh, relu, elu, silu)."""


@register_algo
class TD3(OffPolicyAgent):
    """Twin delayed DDPG (Fujimoto et al. 2018) for Box action spaces."""

    name: ClassVar[str] = "td3"
    Config: ClassVar[type[AgentConfig]] = TD3Config
    discrete_actions: ClassVar[tuple[bool, ...]] = (False,)
    default_num_envs: ClassVar[int] = 8
    n_critics: ClassVar[int] = 2
    """Q-networks in the critic ensemble; the Bellman target uses their minimum."""
    config: TD3Config

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box,
        config: TD3Config,
        num_envs: int,
        device: torch.device,
    ) -> None:
        super().__init__(observation_space, action_space, config, num_envs, device)
        c = config
        net = mlp(self.obs_dim, c.hidden_sizes, self.action_dim, c.activation, orthogonal=False)
        self.actor = nn.Sequential(*net, nn.Tanh()).to(device)
        self.critic = EnsembleMLP(self.n_critics, self.obs_dim + self.action_dim, c.hidden_sizes, 1, c.activation)
        self.critic.to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), c.actor_lr, device)
        self.critic_optimizer = adam(self.critic.parameters(), c.critic_lr, device)
        self.critic_updates = 0  # the actor moves when this reaches a multiple of policy_delay
        self.last_actor_loss = torch.zeros((), device=device)
        self.last_h_term = torch.zeros((), device=device)
        self.ou_noise = torch.zeros(num_envs, self.action_dim, device=device)  # one OU process per sub-env

    # ----------------------------------------------------------------- policy
    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """The actor's actions for ``obs [B, obs_dim]`` (env units). ``deterministic=False`` adds independent
        Gaussian noise of std ``exploration_noise`` also with ``noise_type="ou"``: ``act`` serves any batch
        and keeps no state, while the OU process is per sub-env and lives on the worker's side."""
        unit = self.actor(obs)
        if not deterministic:
            unit = self._add_noise(unit, self.config.exploration_noise)
        return self.scale_action(unit)

    def _add_noise(self, unit: torch.Tensor, std: float, clip: float | None = None) -> torch.Tensor:
        """``unit + N(0, std^2)`` (noise clipped to ``[-clip, clip]`` if given), kept inside ``[-1, 1]``."""
        noise = torch.randn(unit.shape, device=unit.device, generator=self.generator) * std
        if clip is not None:
            noise = noise.clamp(-clip, clip)
        return (unit + noise).clamp(-1.0, 1.0)

    def action_log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log N(actions; mu(s), sigma^2)`` ``[B]``, with ``sigma`` the exploration noise's scale (0.1 if it
        is 0): the likelihood of ``[-1, 1]`` actions ``[B, A]`` under the exploring policy, so the H-term is a
        return-weighted regression of the actor towards good actions."""
        sigma = self.config.exploration_noise or 0.1
        return torch.distributions.Normal(self.actor(obs), sigma).log_prob(actions).sum(-1)

    # ----------------------------------------------------------------- worker side
    def exploration_actions(self, obs: torch.Tensor) -> torch.Tensor:
        c = self.config
        if c.noise_type == "gaussian":
            return self._add_noise(self.actor(obs), c.exploration_noise)
        step = torch.randn(self.ou_noise.shape, device=self.device, generator=self.generator)
        self.ou_noise.mul_(1.0 - c.ou_theta * c.ou_dt).add_(step, alpha=c.exploration_noise * math.sqrt(c.ou_dt))
        return (self.actor(obs) + self.ou_noise).clamp(-1.0, 1.0)

    def episodes_ended(self, done: torch.Tensor) -> None:
        self.ou_noise.mul_((~done).unsqueeze(-1))  # a new episode starts its noise from 0

    # ----------------------------------------------------------------- learner side
    @torch.no_grad()
    def td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Bellman target ``r + gamma * (1 - terminated) * min_i Q'_i(s', mu'(s') + clipped noise)`` ``[B]``."""
        c = self.config
        next_actions = self.actor_target(batch["next_obs"])
        if c.target_noise > 0:
            next_actions = self._add_noise(next_actions, c.target_noise, c.target_noise_clip)
        next_q = self.critic_target(torch.cat((batch["next_obs"], next_actions), -1)).squeeze(-1).amin(0)
        return batch["rewards"] + c.gamma * (1.0 - batch["terminated"]) * next_q

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        obs = batch["obs"]
        # critics: regress onto the Bellman target from the smallest target-Q of the smoothed target action
        target_q = self.td_target(batch)
        q = self.critic(torch.cat((obs, batch["actions"]), -1)).squeeze(-1)  # [n_critics, B]
        critic_loss = (q - target_q).square().mean(1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        self.critic_updates += 1
        # actor (delayed): ascend the first critic's Q of the actor's action; then move the targets
        if self.critic_updates % c.policy_delay == 0:
            h_term = self.h_term(batch)  # 0 unless h_term_lambda > 0 (OffPolicyAgent.h_term)
            actor_loss = -self.critic(torch.cat((obs, self.actor(obs)), -1))[0].mean() - c.h_term_lambda * h_term
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward(inputs=list(self.actor.parameters()))  # no gradient into the critics
            self.actor_optimizer.step()
            self.last_actor_loss, self.last_h_term = actor_loss.detach(), h_term.detach()
            polyak_update(self.critic_target, self.critic, c.tau)
            polyak_update(self.actor_target, self.actor, c.tau)
        stats = {"loss/critic": critic_loss.detach(), "loss/actor": self.last_actor_loss, "q": q.detach().mean()}
        return {**stats, "loss/h_term": self.last_h_term} if c.h_term_lambda > 0 else stats

    # ----------------------------------------------------------------- persistence
    def modules(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "actor_target": self.actor_target,
            "critic_target": self.critic_target,
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}

    def extra_state(self) -> dict[str, int]:
        return {**super().extra_state(), "critic_updates": self.critic_updates}

    def load_extra_state(self, state: dict[str, int]) -> None:
        super().load_extra_state(state)
        self.critic_updates = int(state.get("critic_updates", 0))
