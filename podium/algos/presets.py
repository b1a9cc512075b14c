"""Tuned starting points per (algorithm, environment): podium's counterpart of rl-zoo's tables.

When a pod trains a listed pair, these values fill in whatever the user did not set (``hparams`` and
``num_envs`` from the spec always win; ``preset: false`` in a pod spec turns them off). Every entry
was chosen by time to threshold on a 2-core CPU over several seeds (``benchmarks/vs_sb3.py``
reproduces the numbers in BENCHMARKS.md); pairs not listed use the algorithm's documented defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PRESETS", "Preset", "preset_for"]


@dataclass(frozen=True)
class Preset:
    """Hyperparameters and number of training sub-envs for one (algorithm, env) pair."""

    num_envs: int | None = None
    hparams: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[tuple[str, str], Preset] = {
    # rollouts of 1,024 transitions (32 envs x 32 steps), two short epochs at a high step size:
    # ~13k steps to 475 on most seeds
    ("ppo", "CartPole-v1"): Preset(
        num_envs=32, hparams={"rollout_size": 1024, "update_epochs": 2, "learning_rate": 1e-3}
    ),
    # a shorter horizon (gamma 0.95) and scaled rewards make swing-up credit assignment easy
    ("ppo", "Pendulum-v1"): Preset(
        num_envs=64,
        hparams={
            "rollout_size": 2048,
            "gamma": 0.95,
            "learning_rate": 1e-3,
            "update_epochs": 10,
            "num_minibatches": 8,
            "normalize_reward": True,
        },
    ),
}


def preset_for(algo: str, env: str) -> Preset:
    """The preset for ``(algo, env)``, or an empty one."""
    return PRESETS.get((algo.lower(), env), Preset())
