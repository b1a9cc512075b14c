"""What every replay-based algorithm shares: hyperparameters, replay buffer, warm-up, recording, learning phase.

An :class:`OffPolicyAgent` explores with uniformly random actions until ``learning_starts`` env
steps, then with its own exploration policy (:meth:`OffPolicyAgent.exploration_actions`); it stores
transitions with the *true* next observation (``final_obs`` where an episode just ended) and flags
only real terminations, so truncated episodes are bootstrapped; a learning phase is
``gradient_steps`` calls of :meth:`~podium.algos.base.Agent.update` on uniform replay batches.
Subclasses (SAC, TD3/DDPG, DQN) write the networks and the loss.

Optional **H-term** (``h_term_lambda > 0``; SAC, TD3, DDPG), the replay-based counterpart of PPO's: the
buffer also keeps the transitions of the recent episodes whose return is above the ``h_term_drop``
quantile, each with its discounted return-to-go (:class:`~podium.algos.buffers.GoodEpisodes`), and every
update adds a batch of them to the replay batch (``h_obs``, ``h_actions``, ``h_weight``: the return-to-go
min-max-normalised to ``[0, 1]``). The actor's loss then subtracts
``h_term_lambda * mean(h_weight * clamp(log pi(h_action | h_obs), min=-20))``
(:meth:`OffPolicyAgent.h_term`): the policy is pulled towards the actions of its best recent episodes, the
better the step, the harder. ElegantRL computed the same kind of reward-weighted likelihood over stored
whole episodes; here the episodes are scored as they end, with no pass over the replay buffer.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import torch
from pydantic import Field, model_validator

from podium.algos.base import Agent, AgentConfig
from podium.algos.buffers import GoodEpisodes, ReplayBuffer

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
    h_term_lambda: float = Field(default=0.0, ge=0)
    """Weight of the H-term in the actor's loss (module docstring); 0 (default) turns it off."""
    h_term_drop: float = Field(default=0.25, ge=0, lt=1)
    """H-term: fraction of the last 100 episodes, the lowest by return, whose transitions it ignores."""
    h_term_segment: int = Field(default=256, gt=1)
    """H-term: longest stretch of one episode scored at once (steps; a longer episode is cut into pieces,
    each with its own return-to-go); memory is ``num_envs * h_term_segment`` staged transitions."""
    h_term_capacity: int = Field(default=50_000, gt=0)
    """H-term: transitions of good episodes kept (the oldest are overwritten)."""

    @model_validator(mode="after")
    def _learning_can_start(self) -> OffPolicyConfig:
        if self.learning_starts > self.buffer_size:
            raise ValueError(
                f"learning_starts ({self.learning_starts}) is larger than buffer_size ({self.buffer_size}): "
                "learning waits for that many stored transitions, which the buffer can never hold, so the agent "
                "would never learn; lower learning_starts or raise buffer_size"
            )
        return self


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

    def action_log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(actions | obs)`` ``[B]`` of policy-unit ``actions [B, A]`` (the H-term's likelihood)."""
        raise NotImplementedError(f"{self.name} has no action likelihood, so no H-term")

    def h_term(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The H-term's objective on ``batch``: ``mean(h_weight * clamp(log pi(h_actions | h_obs), min=-20))``,
        or 0 when the batch carries no good transitions (H-term off, or no good episode ended yet)."""
        if "h_obs" not in batch:
            return torch.zeros((), device=self.device)
        log_prob = self.action_log_prob(batch["h_obs"], batch["h_actions"]).clamp_min(-20.0)
        return (batch["h_weight"] * log_prob).mean()

    # ----------------------------------------------------------------- worker side
    @property
    def rollout_steps(self) -> int:
        return self.config.train_freq

    @property
    def gradient_batch(self) -> int:
        return self.config.batch_size

    def make_buffer(self) -> ReplayBuffer:
        c = self.config
        shape, dtype = ((), torch.long) if self.discrete else ((self.action_dim,), torch.float32)
        buffer = ReplayBuffer(c.buffer_size, self.obs_dim, shape, dtype, self.device)
        if c.h_term_lambda > 0:
            buffer.good = GoodEpisodes(
                self.num_envs, c.h_term_segment, c.h_term_capacity, self.obs_dim, shape, dtype, c.gamma,
                c.h_term_drop, self.device,
            )  # fmt: skip
        return buffer

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
        if buffer.good is not None:
            buffer.good.add(obs, extras["policy_actions"], reward, done)
        self.episodes_ended(done)

    # ----------------------------------------------------------------- learner side
    def learn(self, buffer: ReplayBuffer, next_obs: torch.Tensor) -> dict[str, float]:
        c = self.config
        if buffer.size < max(c.learning_starts, 1):
            return {}
        stats = [self.update(self._batch(buffer)) for _ in range(c.gradient_steps)]
        keys = stats[0].keys()
        means = torch.stack([torch.stack([s[k] for s in stats]).mean() for k in keys]).tolist()  # one host sync
        return {**dict(zip(keys, means, strict=True)), **self.learn_stats()}

    def _batch(self, buffer: ReplayBuffer) -> dict[str, torch.Tensor]:
        """A uniform replay batch and, with the H-term on, as many good transitions (``h_*`` keys)."""
        batch = buffer.sample(self.config.batch_size, self.generator)
        if buffer.good is not None and buffer.good.size > 0:
            good = buffer.good.sample(self.config.batch_size, self.generator)
            batch.update({f"h_{k}": v for k, v in good.items()})
        return batch

    # ----------------------------------------------------------------- persistence
    def extra_state(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.env_steps = int(state.get("env_steps", 0))
