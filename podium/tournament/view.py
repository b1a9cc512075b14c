"""What a running tournament shows: a live rich view of the pool and the leaderboard on a terminal, one
line per event otherwise (logs, CI) plus a status line every half minute, so a tournament is never
silent. Also the tables of ``podium leaderboard``: the leaderboard, the history, a lineage."""

from __future__ import annotations

import csv
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from podium.rundir import PodDir
from podium.tournament.config import TournamentConfig
from podium.tournament.leaderboard import Entry, Leaderboard

__all__ = ["PoolView", "history_table", "leaderboard_table", "lineage_table"]

STATUS_EVERY = 30.0
"""Seconds between two status lines when there is no live view (output to a file or a pipe)."""


def leaderboard_table(entries: list[Entry], title: str | None = "leaderboard", limit: int | None = None) -> Table:
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


def history_table(history: Sequence[Mapping[str, Any]], parents: Mapping[str, str | None]) -> Table:
    """Every result the updater received, oldest first: when, pod, algo, parent, outcome, rank, score, steps."""
    table = Table(title="history", title_justify="left")
    errors = any(h["error"] for h in history)  # the error column only when a pod failed
    columns = ["elapsed s", "pod", "algo", "parent", "outcome", "rank", "score", "steps"]
    for name in [*columns, "error"] if errors else columns:
        justify = "right" if name in ("elapsed s", "rank", "steps", "score") else "left"
        table.add_column(name, justify=justify, no_wrap=name in ("pod", "parent", "outcome", "score"))  # type: ignore[arg-type]
    for h in history:
        score = f"{h['score_mean']:.1f} ± {h['score_std']:.1f}" if h["score_mean"] is not None else "-"
        table.add_row(
            f"{h['elapsed']:.0f}",
            h["pod_id"],
            h["algo"],
            parents.get(h["pod_id"]) or "-",
            h["outcome"],
            str(h["rank"] or "-"),
            score,
            f"{h['steps']:,}" if h["steps"] else "-",
            *([h["error"] or ""] if errors else []),
        )
    return table


def _value(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def lineage_table(chain: Sequence[Any], title: str | None = "lineage") -> Table:
    """A pod and its ancestors (``PodRecord`` objects or their dicts, newest first): pod, algo, status,
    score, steps (own / with ancestors), parent, and the hyperparameters that changed from the parent
    (``name old->new``; the oldest ancestor: ``start``)."""
    table = Table(title=title, title_justify="left")
    for name in ("pod", "algo", "status", "score", "steps", "lineage steps", "parent", "changed from parent"):
        justify = "right" if "steps" in name or name == "score" else "left"
        table.add_column(name, justify=justify, no_wrap=name in ("pod", "parent", "score"))  # type: ignore[arg-type]
    records = [r if isinstance(r, Mapping) else dataclasses.asdict(r) for r in chain]
    for p, parent in zip(records, [*records[1:], None], strict=True):
        score = f"{p['score_mean']:.1f} ± {p['score_std']:.1f}" if p.get("score_mean") is not None else "-"
        if parent is None:
            changes = "start"
        else:
            old, new = parent.get("hparams") or {}, p.get("hparams") or {}
            diff = [f"{k} {_value(old.get(k))}->{_value(v)}" for k, v in sorted(new.items()) if old.get(k) != v]
            changes = ", ".join(diff) or "none"
        table.add_row(
            p["id"],
            p["algo"],
            p.get("status") or "-",
            score,
            f"{p['steps']:,}" if p.get("steps") else "-",
            f"{p['total_steps']:,}" if p.get("total_steps") else "-",
            p.get("parent_id") or "-",
            changes,
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
    """What a running tournament prints: a line per event (start, pod started/finished/failed/preempted/
    resumed, lost), and either a live view of the pool and the leaderboard (``live``; None: when stdout is a
    terminal) or, without one, a status line every ``status_every`` seconds."""

    def __init__(
        self,
        config: TournamentConfig,
        live: bool | None = None,
        status_every: float = STATUS_EVERY,
        backend: str | None = None,
    ) -> None:
        self.config = config
        self.backend = backend or f"{config.backend} backend"
        self.console = Console()
        self.live_on = self.console.is_terminal if live is None else live
        self.status_every = status_every
        self._live: Live | None = None
        self._last = 0.0
        self._last_status = time.monotonic()

    def start(self, run_dir: Path) -> None:
        c = self.config
        budget = ", ".join(
            f"{k} {v:g}" for k, v in (("target", c.target), ("seconds", c.seconds), ("steps", c.steps)) if v is not None
        )
        ratio = ":".join(f"{v:g}" for v in c.algos.values())
        self.event(
            f"tournament on {c.env}: {'/'.join(c.algos)} = {ratio}, {self.backend}, "
            f"pool {c.pool.min}-{c.pool.max}, stop at {budget}; run dir {run_dir}"
        )
        if self.live_on:
            self._live = Live(console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def event(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        if self.live_on:
            self.console.print(f"[dim]{stamp}[/dim] {escape(text)}", soft_wrap=True)  # paths stay whole
        else:
            print(f"{stamp} {text}", file=sys.stdout, flush=True)

    def status(self, board: Leaderboard, elapsed: float) -> str:
        """One line: the running pods with their latest evaluation, and the leaderboard's best."""
        running = board.pods("running")
        pods = ", ".join(f"{p.id} {p.algo} {_last_eval(p.run_dir)}" for p in running) or "none"
        entries = board.entries()
        best = f"{entries[0].score_mean:.1f} ({entries[0].pod_id})" if entries else "-"
        return f"{elapsed:.0f} s: {len(running)} running ({pods}); best on the leaderboard {best}"

    def update(self, board: Leaderboard, elapsed: float, capacity: int) -> None:
        if self._live is None:
            if time.monotonic() - self._last_status >= self.status_every:
                self._last_status = time.monotonic()
                self.event(self.status(board, elapsed))
            return
        if time.monotonic() - self._last < 0.5:
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
