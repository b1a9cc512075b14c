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
"""

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
    "tournament",
]
