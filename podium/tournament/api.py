"""Python API of the tournament, with the CLI's names: ``tournament``, ``resume_tournament``, ``leaderboard``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from podium.tournament.backends import Backend
from podium.tournament.config import load_tournament_config
from podium.tournament.leaderboard import Entry
from podium.tournament.orchestrator import Orchestrator, TournamentReport, open_leaderboard

__all__ = ["leaderboard", "resume_tournament", "tournament"]


def tournament(
    config: str | Path | None = None,
    *,
    run_dir: str | Path | None = None,
    backend: Backend | str | None = None,
    progress: bool | None = None,
    **fields: Any,
) -> TournamentReport:
    """Run a tournament and return its report (``podium tournament CONFIG.yaml``).

    Args:
        config: YAML file of :class:`~podium.tournament.config.TournamentConfig` fields (optional).
        run_dir: output directory (default ``runs/tournament-ENV-TIMESTAMP``).
        backend: ``"process"`` (default), ``"inline"`` or a :class:`~podium.tournament.backends.Backend`.
        progress: live view (default: when the output is a terminal).
        **fields: config fields that override the file: ``env``, ``algos``, ``target``, ``seconds``,
            ``pool={"max": 4}``, ``db="postgresql://..."``, ...

    Raises:
        ConfigError: bad config (checked before any pod starts); DatabaseError: unreachable database.
    """
    cfg = load_tournament_config(config, **fields)
    return Orchestrator.start(cfg, run_dir=run_dir, backend=backend, progress=progress).run()


def resume_tournament(
    run_dir: str | Path,
    *,
    backend: Backend | str | None = None,
    progress: bool | None = None,
    force: bool = False,
    **budget: Any,
) -> TournamentReport:
    """Continue the tournament in ``run_dir`` (``podium tournament resume RUN_DIR``); ``budget`` may raise
    ``seconds``, ``steps``, ``target`` or ``max_failures``."""
    return Orchestrator.resume(run_dir, backend=backend, progress=progress, **budget).run(force=force)


def leaderboard(run_dir: str | Path) -> list[Entry]:
    """The leaderboard of the tournament in ``run_dir``, best first (``podium leaderboard RUN_DIR``)."""
    board = open_leaderboard(run_dir)
    try:
        return board.entries()
    finally:
        board.close()
