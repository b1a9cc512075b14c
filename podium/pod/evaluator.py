"""Evaluator: scores a policy snapshot by the mean and std of N episodic returns, run in parallel.

It owns its own batched env with one sub-env per evaluation episode, runs every sub-env until its
first episode ends (deterministic policy by default) and records mean, std, steps and wall time.
It remembers the best score seen so the pod can keep the best snapshot.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from podium.algos.base import Agent
from podium.envs.base import VecEnv

__all__ = ["EvalResult", "Evaluator"]


@dataclass(frozen=True)
class EvalResult:
    """Scores of one evaluation: ``mean`` and ``std`` of ``episodes`` returns, ``seconds`` of wall time."""

    mean: float
    std: float
    episodes: int
    seconds: float
    returns: tuple[float, ...]


class Evaluator:
    """Runs ``env.num_envs`` evaluation episodes in parallel.

    Args:
        env: evaluation env; its ``num_envs`` is the number of episodes per evaluation.
        deterministic: use the deterministic policy (``agent.act(obs, deterministic=True)``).
        max_steps: safety cap on steps per evaluation (default: the env's time limit, else 10,000).
        seed: evaluations use seeds ``seed, seed + 1, ...`` so they are reproducible.
    """

    def __init__(self, env: VecEnv, deterministic: bool = True, max_steps: int | None = None, seed: int = 0) -> None:
        self.env, self.deterministic = env, deterministic
        self.max_steps = max_steps or env.max_episode_steps or 10_000
        self.seed = seed
        self.best: EvalResult | None = None
        self.evaluations = 0

    @torch.inference_mode()  # nothing here enters autograd: skip its per-op bookkeeping
    def evaluate(self, agent: Agent) -> EvalResult:
        start = time.perf_counter()
        env = self.env
        obs, _ = env.reset(seed=self.seed + self.evaluations)
        self.evaluations += 1
        returns = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
        finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        check_every = 1 if env.device.type == "cpu" else 16  # a host sync per check on accelerators
        for t in range(self.max_steps):  # episodes longer than the cap count with their partial return
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs, deterministic=self.deterministic))
            returns += reward.double() * ~finished
            finished |= terminated | truncated
            if t % check_every == 0 and bool(finished.all()):
                break
        values = returns.double()
        std = float(values.std(unbiased=False)) if values.numel() > 1 else 0.0
        result = EvalResult(
            float(values.mean()), std, env.num_envs, time.perf_counter() - start, tuple(values.tolist())
        )
        if self.best is None or (result.mean, -result.std) > (self.best.mean, -self.best.std):
            self.best = result
        if math.isnan(result.mean):
            raise FloatingPointError("evaluation returned NaN scores; the policy produces invalid actions")
        return result
