"""The tournament: a training pool of pods, a leaderboard that keeps the best, a generator that seeds
new pods from it, an updater that decides who enters, and an orchestrator that runs it all.

>>> from podium.tournament import tournament, leaderboard
>>> report = tournament("examples/pendulum.yaml")         # or tournament(env=..., algos=..., ...)
>>> for entry in leaderboard(report.run_dir): print(entry.rank, entry.algo, entry.score_mean)

Files, one per service of the paper: :mod:`~podium.tournament.leaderboard`,
:mod:`~podium.tournament.generator`, :mod:`~podium.tournament.updater`, the orchestrator as decisions
(:mod:`~podium.tournament.scheduler`, a pure function) and a runner (:mod:`~podium.tournament.orchestrator`),
the pod states and their transitions (:mod:`~podium.tournament.states`), and
:mod:`~podium.tournament.backends` (inline, process, ray).

The names below are imported on first use, so that a pod process (which runs
:mod:`podium.tournament.backends.process`, inside this package) does not load the orchestrator and the
leaderboard's database layer (about 0.2 s of its start-up), and so that the config loads without torch
(:func:`start_ahead` starts the first pods before the orchestrator imports it).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podium._pod_entry import start_ahead
    from podium.tournament.api import leaderboard, resume_tournament, tournament
    from podium.tournament.backends import BackendError
    from podium.tournament.config import GeneratorConfig, PoolConfig, TournamentConfig, load_tournament_config
    from podium.tournament.leaderboard import DatabaseError, Entry, Leaderboard
    from podium.tournament.orchestrator import Orchestrator, TournamentReport

__all__ = [
    "BackendError",
    "DatabaseError",
    "Entry",
    "GeneratorConfig",
    "Leaderboard",
    "Orchestrator",
    "PoolConfig",
    "TournamentConfig",
    "TournamentReport",
    "leaderboard",
    "load_tournament_config",
    "resume_tournament",
    "start_ahead",
    "tournament",
]

_LAZY = {
    **dict.fromkeys(("resume_tournament", "tournament"), "podium.tournament.api"),
    "BackendError": "podium.tournament.backends",
    "start_ahead": "podium._pod_entry",
    **dict.fromkeys(
        ("GeneratorConfig", "PoolConfig", "TournamentConfig", "load_tournament_config"), "podium.tournament.config"
    ),
    **dict.fromkeys(("DatabaseError", "Entry", "Leaderboard"), "podium.tournament.leaderboard"),
    **dict.fromkeys(("Orchestrator", "TournamentReport"), "podium.tournament.orchestrator"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'podium.tournament' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module object. ``podium.tournament.leaderboard`` is the function (``api.leaderboard``),
    as it has always been, although a submodule has that name too: importing a submodule makes it an
    attribute of its package, which would hide the function once ``podium.tournament.leaderboard`` (the module)
    is imported before the function is first asked for. The module stays ``sys.modules[...]``'s."""

    @property
    def leaderboard(self) -> Any:
        return importlib.import_module("podium.tournament.api").leaderboard

    @leaderboard.setter
    def leaderboard(self, value: Any) -> None:
        pass  # the import system binding the submodule of that name: the function stays


sys.modules[__name__].__class__ = _Package
