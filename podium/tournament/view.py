"""What a running tournament shows: a live rich view of the pool and the leaderboard on a terminal, one
line per event otherwise (logs, CI). Also the leaderboard table of ``podium leaderboard``."""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from podium.rundir import PodDir
from podium.tournament.config import TournamentConfig
from podium.tournament.leaderboard import Entry, Leaderboard

__all__ = ["PoolView", "leaderboard_table"]


def leaderboard_table(entries: list[Entry], title: str = "leaderboard", limit: int | None = None) -> Table:
    """A table of ``entries``: rank, pod, algo, score (mean ± std), steps (own / with ancestors), parent."""
    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("rank", "right"),
        ("pod", "left"),
        ("algo", "left"),
        ("score", "right"),
        ("steps", "right"),
        ("lineage steps", "right"),
        ("train s", "right"),
        ("parent", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name in ("score", "pod", "parent"))  # type: ignore[arg-type]
    for e in entries[:limit]:
        table.add_row(
            str(e.rank),
            e.pod_id,
            e.algo,
            f"{e.score_mean:.1f} ± {e.score_std:.1f}",
            f"{e.steps:,}",
            f"{e.total_steps:,}",
            f"{e.wall_time:.0f}",
            e.parent_id or "-",
        )
    return table


def _last_eval(run_dir: str) -> str:
    path = PodDir(run_dir).curve
    try:
        rows = list(csv.DictReader(path.open()))
    except (FileNotFoundError, csv.Error):
        return "-"
    if not rows:
        return "-"
    last = rows[-1]
    return f"{float(last['eval_mean']):.1f} (step {int(float(last['step'])):,})"


class PoolView:
    """Live view of a tournament (``live=None``: when stdout is a terminal)."""

    def __init__(self, config: TournamentConfig, live: bool | None = None) -> None:
        self.config = config
        self.console = Console()
        self.live_on = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._last = 0.0

    def start(self, run_dir: Path) -> None:
        c = self.config
        budget = ", ".join(
            f"{k} {v:g}" for k, v in (("target", c.target), ("seconds", c.seconds), ("steps", c.steps)) if v is not None
        )
        ratio = ":".join(f"{v:g}" for v in c.algos.values())
        self.event(
            f"tournament on {c.env}: {'/'.join(c.algos)} = {ratio}, {c.backend} backend, "
            f"pool {c.pool.min}-{c.pool.max}, stop at {budget}; run dir {run_dir}"
        )
        if self.live_on:
            self._live = Live(console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def event(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        if self.live_on:
            self.console.print(f"[dim]{stamp}[/dim] {text}")
        else:
            print(f"{stamp} {text}", file=sys.stdout, flush=True)

    def update(self, board: Leaderboard, elapsed: float, capacity: int) -> None:
        if self._live is None or time.monotonic() - self._last < 0.5:
            return
        self._last = time.monotonic()
        pods = board.pods("running", "preempted")
        pool = Table(title=f"pool ({capacity} slots) — {elapsed:.0f} s", title_justify="left")
        for name in ("pod", "algo", "status", "parent", "running s", "latest eval"):
            pool.add_column(name)
        now = time.time()
        for p in pods:
            pool.add_row(
                p.id,
                p.algo,
                p.status,
                p.parent_id or "-",
                f"{now - p.started:.0f}" if p.started and p.status == "running" else "-",
                _last_eval(p.run_dir),
            )
        parts: list[Any] = [pool, leaderboard_table(board.entries(), "leaderboard (top 5)", limit=5)]
        self._live.update(Group(*parts))

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
