"""DQN: deep Q-learning with a replay buffer and a target network; double and dueling variants.

Discrete actions only. The worker acts epsilon-greedily (uniformly random before ``learning_starts``,
then epsilon decays linearly from ``initial_eps`` to ``final_eps``). Options:

* ``double`` (van Hasselt et al. 2016): the online network picks the next action, the target network
  scores it — instead of the target network's own maximum, which overestimates;
* ``dueling`` (Wang et al. 2016): the network outputs a state value ``V(s)`` and advantages
  ``A(s, a)`` and combines them as ``Q = V + A - mean_a A``.

Both on is D3QN, registered as ``"d3qn"`` (:class:`D3QN`). The target network follows the online one
every ``target_update_interval`` gradient steps, by a hard copy (``tau = 1``) or a Polyak step.
Truncated episodes are bootstrapped (``terminated`` alone stops the bootstrap).

Reading order: ``DQNConfig`` (hyperparameters) -> ``QNetwork`` -> ``DQN.__init__`` -> worker side
(``epsilon``, ``explore``/``record``) -> learner side (``learn`` then ``update``, which holds the loss).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import ClassVar, Literal

import gymnasium as gym
import torch
from pydantic import Field, model_validator
from torch import nn

from podium.algos.base import AgentConfig, HiddenSizes, register_algo
from podium.algos.networks import adam, mlp, polyak_update
from podium.algos.offpolicy import OffPolicyAgent, OffPolicyConfig

__all__ = ["D3QN", "DQN", "D3QNConfig", "DQNConfig", "QNetwork"]


class DQNConfig(OffPolicyConfig):
    """DQN hyperparameters. Defaults reach CartPole-v1's 475 in 15k-45k env steps (seconds on one CPU core)."""

    mutable: ClassVar[dict[str, tuple[float, float]]] = {
        "learning_rate": (1e-5, 1e-2),
        "final_eps": (0.0, 0.2),
    }

    buffer_size: int = Field(default=100_000, gt=0)
    """Replay capacity in transitions (all sub-envs together)."""
    learning_rate: float = Field(default=1e-3, gt=0)
    """Adam step size."""
    target_update_interval: int = Field(default=50, gt=0)
    """Gradient steps between two target-network updates."""
    tau: float = Field(default=1.0, gt=0, le=1)
    """Target update ``target <- (1 - tau) target + tau online``: 1 is a hard copy."""
    initial_eps: float = Field(default=1.0, ge=0, le=1)
    """Exploration probability when the decay starts (env step 0)."""
    final_eps: float = Field(default=0.05, ge=0, le=1)
    """Exploration probability after the decay."""
    exploration_steps: int = Field(default=5_000, ge=0)
    """Env steps (all sub-envs together) over which epsilon decays linearly."""
    exploration_fraction: float | None = Field(default=None, gt=0, le=1)
    """If set, the decay lasts this fraction of the pod's step budget instead (when the pod has one; with K
    learners, each learner's decay lasts this fraction of its share, so all end together). The budget is
    that of the run's start: a run resumed with a larger one, or a child of its checkpoint, continues the
    schedule where it was instead of raising epsilon again."""
    double: bool = False
    """Double DQN target: online argmax, target-network value."""
    dueling: bool = False
    """Dueling head: ``Q = V + A - mean(A)``."""
    loss: Literal["huber", "mse"] = "huber"
    """TD loss: Huber (smooth L1, delta 1) or mean squared error."""
    max_grad_norm: float | None = Field(default=10.0, gt=0)
    """Global gradient-norm clip (None: no clipping)."""
    hidden_sizes: HiddenSizes = (64, 64)
    """Hidden layer widths of the Q-network."""
    activation: str = "relu"
    """Hidden activation (tanh, relu, elu, silu)."""

    @model_validator(mode="after")
    def _no_h_term(self) -> DQNConfig:
        if self.h_term_lambda > 0:
            raise ValueError(
                "h_term_lambda: DQN has no action likelihood for the H-term to raise; it is an option of "
                "ppo, sac, td3 and ddpg (leave h_term_lambda at 0 for dqn and d3qn)"
            )
        return self


class QNetwork(nn.Module):
    """Q-values ``[B, n_actions]`` of observations ``[B, obs_dim]``, from an MLP.

    Dueling: the MLP's last layer has ``1 + n_actions`` outputs, a value ``V`` and advantages ``A``
    (sharing all hidden layers), combined as ``Q = V + A - mean(A)`` (identifiable: mean advantage 0).
    """

    def __init__(self, obs_dim: int, hidden: Sequence[int], n_actions: int, act: str, dueling: bool) -> None:
        super().__init__()
        self.dueling = dueling
        self.net = mlp(obs_dim, hidden, n_actions + 1 if dueling else n_actions, act, orthogonal=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(obs)
        if not self.dueling:
            return out
        value, advantage = out[:, :1], out[:, 1:]
        return value + advantage - advantage.mean(-1, keepdim=True)


@register_algo
class DQN(OffPolicyAgent):
    """Deep Q-network (Mnih et al. 2015), optionally double and/or dueling, for Discrete action spaces."""

    name: ClassVar[str] = "dqn"
    Config: ClassVar[type[AgentConfig]] = DQNConfig
    discrete_actions: ClassVar[tuple[bool, ...]] = (True,)
    default_num_envs: ClassVar[int] = 4
    config: DQNConfig

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Discrete,
        config: DQNConfig,
        num_envs: int,
        device: torch.device,
    ) -> None:
        super().__init__(observation_space, action_space, config, num_envs, device)
        c = config
        self.q_net = QNetwork(self.obs_dim, c.hidden_sizes, self.action_dim, c.activation, c.dueling).to(device)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), c.learning_rate, device)
        self.updates = 0  # gradient steps taken: drive the target-network updates

    # ----------------------------------------------------------------- policy
    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if deterministic:
            return self.q_net(obs).argmax(-1)
        return self._epsilon_greedy(obs, self.config.final_eps)

    def _epsilon_greedy(self, obs: torch.Tensor, eps: float) -> torch.Tensor:
        """Greedy actions ``[B]``, each replaced by a uniform one with probability ``eps``."""
        n = obs.shape[0]
        random_actions = torch.randint(0, self.action_dim, (n,), device=self.device, generator=self.generator)
        if eps >= 1.0:
            return random_actions
        explore = torch.rand(n, device=self.device, generator=self.generator) < eps
        return torch.where(explore, random_actions, self.q_net(obs).argmax(-1))

    # ----------------------------------------------------------------- worker side
    def epsilon(self) -> float:
        """Exploration probability now: 1 before ``learning_starts``, then the linear schedule."""
        c = self.config
        if self.env_steps < c.learning_starts:
            return 1.0
        horizon = c.exploration_steps
        if c.exploration_fraction is not None and self.budget_steps is not None:
            horizon = int(c.exploration_fraction * self.budget_steps)
        progress = min(1.0, self.env_steps / max(horizon, 1))
        return c.initial_eps + progress * (c.final_eps - c.initial_eps)

    def exploration_actions(self, obs: torch.Tensor) -> torch.Tensor:
        return self._epsilon_greedy(obs, self.epsilon())

    def learn_stats(self) -> dict[str, float]:
        return {"epsilon": self.epsilon()}

    # ----------------------------------------------------------------- learner side
    @torch.no_grad()
    def td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Bellman target ``r + gamma * (1 - terminated) * V'(s')`` ``[B]``, ``V'`` from the target network."""
        next_q = self.q_target(batch["next_obs"])  # [B, n_actions]
        if self.config.double:  # the online network chooses, the target network evaluates
            next_actions = self.q_net(batch["next_obs"]).argmax(-1, keepdim=True)
            next_value = next_q.gather(-1, next_actions).squeeze(-1)
        else:
            next_value = next_q.amax(-1)
        return batch["rewards"] + self.config.gamma * (1.0 - batch["terminated"]) * next_value

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        target_q = self.td_target(batch)
        q = self.q_net(batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
        td_loss = nn.functional.smooth_l1_loss if c.loss == "huber" else nn.functional.mse_loss
        loss = td_loss(q, target_q)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.q_net.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.updates % c.target_update_interval == 0:
            polyak_update(self.q_target, self.q_net, c.tau)
        return {"loss/td": loss.detach(), "q": q.detach().mean()}

    # ----------------------------------------------------------------- persistence
    def modules(self) -> dict[str, nn.Module]:
        return {"q_net": self.q_net, "q_target": self.q_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def extra_state(self) -> dict[str, int]:
        # the budget epsilon's schedule was laid out over: a resume with a larger budget continues it
        budget = {} if self.budget_steps is None else {"budget_steps": self.budget_steps}
        return {**super().extra_state(), "updates": self.updates, **budget}

    def load_extra_state(self, state: dict[str, int]) -> None:
        super().load_extra_state(state)
        self.updates = int(state.get("updates", 0))
        if state.get("budget_steps") is not None:
            self.budget_steps = int(state["budget_steps"])


class D3QNConfig(DQNConfig):
    """D3QN hyperparameters: :class:`DQNConfig` with the double target and the dueling head on."""

    double: bool = True
    """Double DQN target: online argmax, target-network value."""
    dueling: bool = True
    """Dueling head: ``Q = V + A - mean(A)``."""


@register_algo
class D3QN(DQN):
    """Dueling double DQN: :class:`DQN` with ``double`` and ``dueling`` on by default."""

    name: ClassVar[str] = "d3qn"
    Config: ClassVar[type[AgentConfig]] = D3QNConfig
    config: D3QNConfig
