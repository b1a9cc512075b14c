"""What every replay-based algorithm shares: hyperparameters, replay buffer, warm-up, recording, learning phase.

An :class:`OffPolicyAgent` explores with uniformly random actions until ``learning_starts`` env
steps, then with its own exploration policy (:meth:`OffPolicyAgent.exploration_actions`); it stores
transitions with the *true* next observation (``final_obs`` where an episode just ended) and flags
only real terminations, so truncated episodes are bootstrapped; a learning phase is
``gradient_steps`` calls of :meth:`~podium.algos.base.Agent.update` on uniform replay batches.
Subclasses (SAC, TD3/DDPG, DQN) write the networks and the loss.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import torch
from pydantic import Field

from podium.algos.base import Agent, AgentConfig
from podium.algos.buffers import ReplayBuffer

__all__ = ["OffPolicyAgent", "OffPolicyConfig"]


class OffPolicyConfig(AgentConfig):
    """Hyperparameters common to replay-based algorithms."""

    buffer_size: int = Field(default=1_000_000, gt=0)
    """Replay capacity in transitions (all sub-envs together)."""
    batch_size: int = Field(default=128, gt=0)
    """Transitions per gradient step."""
    learning_starts: int = Field(default=1_000, ge=0)
    """Env steps (all sub-envs together) of uniformly random actions before learning begins."""
    train_freq: int = Field(default=1, gt=0)
    """Env steps per sub-env collected between two learning phases."""
    gradient_steps: int = Field(default=1, gt=0)
    """Gradient steps per learning phase (update-to-data ratio ``gradient_steps / (train_freq * num_envs)``)."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""


class OffPolicyAgent(Agent):
    """Base of replay-based agents. Actions are stored in the buffer in *policy units*: ``[-1, 1]^d`` for
    Box spaces (mapped to the env's bounds by :meth:`~podium.algos.base.Agent.scale_action`), indices
    for Discrete ones."""

    on_policy: ClassVar[bool] = False
    config: OffPolicyConfig

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box | gym.spaces.Discrete,
        config: OffPolicyConfig,
        num_envs: int,
        device: torch.device,
    ) -> None:
        super().__init__(observation_space, action_space, config, num_envs, device)
        self.generator = torch.Generator(device=device)
        self.env_steps = 0  # env steps explored (all sub-envs together): random actions until learning_starts

    # ----------------------------------------------------------------- hooks
    def exploration_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """Exploration actions in policy units for ``obs [N, obs_dim]`` (after the warm-up)."""
        raise NotImplementedError

    def random_actions(self, n: int) -> torch.Tensor:
        """``n`` uniformly random actions in policy units (the warm-up)."""
        if self.discrete:
            return torch.randint(0, self.action_dim, (n,), device=self.device, generator=self.generator)
        return torch.rand(n, self.action_dim, device=self.device, generator=self.generator) * 2 - 1

    def learn_stats(self) -> dict[str, float]:
        """Extra scalars to log after a learning phase (e.g. epsilon)."""
        return {}

    # ----------------------------------------------------------------- worker side
    @property
    def rollout_steps(self) -> int:
        return self.config.train_freq

    def make_buffer(self) -> ReplayBuffer:
        shape, dtype = ((), torch.long) if self.discrete else ((self.action_dim,), torch.float32)
        return ReplayBuffer(self.config.buffer_size, self.obs_dim, shape, dtype, self.device)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        n = obs.shape[0]
        warm_up = self.env_steps < self.config.learning_starts
        policy_actions = self.random_actions(n) if warm_up else self.exploration_actions(obs)
        self.explored(obs)
        env_actions = policy_actions if self.discrete else self.scale_action(policy_actions)
        return env_actions, {"policy_actions": policy_actions}

    def explored(self, obs: torch.Tensor) -> None:
        self.env_steps += obs.shape[0]

    @torch.no_grad()
    def record(
        self,
        buffer: ReplayBuffer,
        obs: torch.Tensor,
        actions: torch.Tensor,
        extras: dict[str, torch.Tensor],
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor,
    ) -> None:
        done = terminated | truncated
        true_next = torch.where(done[:, None], final_obs, next_obs)
        buffer.add(obs, extras["policy_actions"], reward, true_next, terminated)
        self.episodes_ended(done)

    # ----------------------------------------------------------------- learner side
    def learn(self, buffer: ReplayBuffer, next_obs: torch.Tensor) -> dict[str, float]:
        c = self.config
        if buffer.size < max(c.learning_starts, 1):
            return {}
        stats = [self.update(buffer.sample(c.batch_size, self.generator)) for _ in range(c.gradient_steps)]
        keys = stats[0].keys()
        means = torch.stack([torch.stack([s[k] for s in stats]).mean() for k in keys]).tolist()  # one host sync
        return {**dict(zip(keys, means, strict=True)), **self.learn_stats()}

    # ----------------------------------------------------------------- persistence
    def extra_state(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.env_steps = int(state.get("env_steps", 0))
