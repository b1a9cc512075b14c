"""Python API of the tournament, with the CLI's names: ``tournament``, ``resume_tournament``, ``leaderboard``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podium._pod_entry import release_ahead, start_ahead
from podium.config import ConfigError
from podium.rundir import TournamentDir, pod_not_tournament
from podium.tournament.config import TournamentConfig, load_tournament_config

if TYPE_CHECKING:
    from podium.tournament.backends import Backend
    from podium.tournament.leaderboard import Entry
    from podium.tournament.orchestrator import TournamentReport

# (the orchestrator, and torch with it, is imported inside the functions: ``tournament`` starts its first pod
# processes before, so that they import torch beside it)

__all__ = ["leaderboard", "resume_tournament", "run_tournament", "tournament"]


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
        backend: ``"process"`` (default), ``"ray"`` (with ``address="HOST:PORT"`` for a running cluster),
            ``"inline"`` or a :class:`~podium.tournament.backends.Backend`.
        progress: live view (default: when the output is a terminal).
        **fields: config fields that override the file: ``env``, ``algos``, ``target``, ``seconds``,
            ``pool={"max": 4}``, ``db="postgresql://..."``, ...

    Raises:
        ConfigError: bad config (checked before any pod starts); DatabaseError: unreachable database;
        BackendError: the backend cannot run it (e.g. a Ray cluster that does not answer).
    """
    cfg = load_tournament_config(config, **fields)
    report = run_tournament(cfg, run_dir=run_dir, backend=backend, progress=progress)
    backtest_after(report, cfg)
    return report


def run_tournament(
    config: TournamentConfig,
    *,
    run_dir: str | Path | None = None,
    backend: Backend | str | None = None,
    progress: bool | None = None,
) -> TournamentReport:
    """Run a new tournament of a loaded ``config`` (what :func:`tournament`, ``podium tournament`` and
    ``podium demo`` do after reading theirs): on the process backend its first pod processes start before this
    process imports torch and the orchestrator (:func:`~podium._pod_entry.start_ahead`), so that they import it
    beside it instead of after it. Those its backend does not take (the tournament is refused before it starts
    one) are released (:func:`~podium._pod_entry.release_ahead`)."""
    if backend is None or backend == "process":
        start_ahead(config)
    try:
        from podium.tournament.orchestrator import Orchestrator

        orchestrator = Orchestrator.start(config, run_dir=run_dir, backend=backend, progress=progress)
    finally:
        release_ahead()
    return orchestrator.run()


def backtest_after(report: TournamentReport, config: TournamentConfig) -> None:
    """Run the config's ``backtest`` section on the finished tournament (nothing if it has none or no
    entries): the champion, and with ``top_k > 1`` also the ensemble of the best ``top_k`` beside it. The
    results land in ``RUN_DIR/backtest_START_END/`` (champion), ``RUN_DIR/backtest_START_END_topK/``
    (ensemble) and ``report.extra["backtest"]`` / ``report.extra["backtest_ensemble"]``."""
    if config.backtest is None or not report.entries:
        return
    from podium.finance.backtest import backtest_command, generalisation_curve

    b = config.backtest
    checkpoints = [e.checkpoint for e in report.entries]
    result = backtest_command(report.run_dir, b.start, b.end, 1, checkpoints=checkpoints)
    report.extra["backtest"] = {"out_dir": str(result.out_dir), "metrics": result.metrics.to_dict()}
    k = min(b.top_k, len(checkpoints))
    if k > 1:
        ensemble = backtest_command(report.run_dir, b.start, b.end, k, checkpoints=checkpoints)
        report.extra["backtest_ensemble"] = {"out_dir": str(ensemble.out_dir), "metrics": ensemble.metrics.to_dict()}
    if b.generalisation:
        frame = generalisation_curve(report.run_dir, b.start, b.end, out_dir=result.out_dir)
        report.extra["generalisation"] = str(result.out_dir / "generalisation.csv")
        print(f"generalisation curve: {len(frame)} snapshots -> {result.out_dir / 'generalisation.png'}")


def resume_tournament(
    run_dir: str | Path,
    *,
    backend: Backend | str | None = None,
    progress: bool | None = None,
    force: bool = False,
    **budget: Any,
) -> TournamentReport:
    """Continue the tournament in ``run_dir`` (``podium tournament resume RUN_DIR``), on its backend or on
    ``backend``; ``budget`` may raise ``seconds``, ``steps``, ``target`` or ``max_failures``, or give the Ray
    cluster's ``address``."""
    from podium.tournament.orchestrator import Orchestrator, read_config

    orchestrator = Orchestrator.resume(_tournament_dir(run_dir), backend=backend, progress=progress, **budget)
    report = orchestrator.run(force=force)
    backtest_after(report, read_config(run_dir))
    return report


def leaderboard(run_dir: str | Path) -> list[Entry]:
    """The leaderboard of the tournament in ``run_dir``, best first (``podium leaderboard RUN_DIR``); each
    entry's checkpoint is the one in ``run_dir``, also when the tournament was moved or copied since it ran."""
    from podium.tournament.orchestrator import open_leaderboard

    board = open_leaderboard(_tournament_dir(run_dir))
    try:
        entries = board.entries()
    finally:
        board.close()
    layout = TournamentDir(run_dir)
    return [dataclasses.replace(e, checkpoint=str(layout.local(e.checkpoint, e.pod_id))) for e in entries]


def _tournament_dir(run_dir: str | Path) -> str | Path:
    """``run_dir``, refused when it is a pod's run directory (the message names the commands for a pod)."""
    mistake = pod_not_tournament(run_dir)
    if mistake is not None:
        raise ConfigError(mistake)
    return run_dir
