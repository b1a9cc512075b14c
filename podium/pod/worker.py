"""Worker: collects transitions from a batched environment into the agent's buffer.

The paper's worker: it steps ``N`` sub-environments together with the agent's exploration policy
for ``agent.rollout_steps`` steps and records every batched transition. It loops over time only;
each step handles all sub-envs at once, and episode statistics come from the env's ``info``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from podium.algos.base import Agent
from podium.envs.base import VecEnv

__all__ = ["RolloutStats", "Worker"]


@dataclass
class RolloutStats:
    """What one collection phase saw: env steps taken and the episodes that finished."""

    steps: int = 0
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)


class Worker:
    """Steps ``env`` with ``agent.explore`` and writes transitions with ``agent.record``.

    Args:
        env: the batched training environment (``agent.num_envs`` sub-envs).
        agent: the agent whose exploration policy acts and whose buffer is filled.
        seed: seed of the first ``env.reset``.
    """

    def __init__(self, env: VecEnv, agent: Agent, seed: int | None = None) -> None:
        if env.num_envs != agent.num_envs:
            raise ValueError(f"env has {env.num_envs} sub-envs but the agent was built for {agent.num_envs}")
        self.env, self.agent = env, agent
        self.obs, _ = env.reset(seed=seed)

    def collect(self, buffer: object, steps: int | None = None) -> RolloutStats:
        """Collect ``steps`` (default ``agent.rollout_steps``) batched steps into ``buffer``."""
        env, agent = self.env, self.agent
        steps = agent.rollout_steps if steps is None else steps
        returns, lengths, masks = [], [], []
        obs = self.obs
        for _ in range(steps):
            actions, extras = agent.explore(obs)
            next_obs, reward, terminated, truncated, info = env.step(actions)
            agent.record(buffer, obs, actions, extras, reward, next_obs, terminated, truncated, info["final_obs"])
            returns.append(info["episode_return"])
            lengths.append(info["episode_length"])
            masks.append(info["_episode_return"])
            obs = next_obs
        self.obs = obs
        done = torch.stack(masks)  # [T, N]: select the finished episodes once per rollout, not once per step
        finished_returns = torch.stack(returns)[done].tolist()
        return RolloutStats(steps * env.num_envs, finished_returns, torch.stack(lengths)[done].tolist())
