"""podium: massively parallel deep RL in PyTorch — pods race in a tournament, a leaderboard keeps the best.

Quick start::

    import podium
    report = podium.train("CartPole-v1", "ppo", target=475, seconds=120)
    policy = podium.load(report.run_dir)
    action = policy.act(obs)            # numpy in, numpy out: works on a gymnasium env

The names below are imported on first use (``podium.train`` imports torch; ``import podium`` and the
``podium`` command's help do not).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podium.api import Ensemble, Policy, load, load_ensemble, make_spec, train

__version__ = "0.1.0"
__all__ = ["Ensemble", "Policy", "__version__", "load", "load_ensemble", "make_spec", "train"]

_LAZY = {name: "podium.api" for name in ("Ensemble", "Policy", "load", "load_ensemble", "make_spec", "train")}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'podium' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
