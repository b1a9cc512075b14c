"""What the live tournament page shows, read from a tournament's run directory and its database, read-only.

:class:`TournamentWatch` checks the directory once (a missing directory, or one that holds something other
than a tournament, is refused with the fix), then answers :meth:`~TournamentWatch.state` and
:meth:`~TournamentWatch.curve` as plain JSON-ready dicts. It never writes: a SQLite leaderboard is opened
with SQLite's read-only mode (``mode=ro``), a PostgreSQL one with read-only transactions
(``default_transaction_read_only``), and it never claims the tournament, so it runs beside the orchestrator
(SQLite in WAL mode: readers never wait for the writer, nor it for them). This module needs no web framework.
"""

from __future__ import annotations

import csv
import math
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa

from podium.config import ConfigError
from podium.logging import read_curve
from podium.rundir import PodDir, TournamentDir
from podium.tournament.leaderboard import (
    STALE_AFTER,
    DatabaseError,
    Entry,
    Leaderboard,
    PodRecord,
    redact,
)
from podium.tournament.leaderboard import database_url as resolve_database_url
from podium.tournament.orchestrator import read_meta
from podium.tournament.scheduler import steps_done
from podium.tournament.states import ACTIVE, PodStatus

__all__ = [
    "CURVE_POINTS",
    "HISTORY_ROWS",
    "LINEAGE_PODS",
    "POD_ID",
    "PROGRESS_POINTS",
    "TournamentWatch",
    "read_only_url",
]

HISTORY_ROWS = 30
"""Results of the updater that :meth:`TournamentWatch.state` lists (the newest)."""
PROGRESS_POINTS = 500
"""Scored results (the newest) in the progress chart's data."""
CURVE_POINTS = 1000
"""Most rows :meth:`TournamentWatch.curve` returns (a longer curve is thinned evenly; its last row stays)."""
LINEAGE_PODS = 100
"""Most ancestors whose curves :meth:`TournamentWatch.curve` adds to a pod's (the newest)."""
POD_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
"""Pod ids the page accepts (the database's pod id column holds 40 characters; no dots or slashes)."""


def read_only_url(url: str) -> str:
    """``url`` (a SQLAlchemy URL) opened so that nothing can be written through it: SQLite files with
    ``mode=ro`` (SQLite's URI form), PostgreSQL with read-only transactions; other URLs as they are."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            return url
        if not database.startswith("file:"):
            database = "file:" + quote(str(Path(database).resolve()))
        parsed = parsed.set(database=database).update_query_dict({"mode": "ro", "uri": "true"})
    elif parsed.get_backend_name() == "postgresql":
        options = " ".join(filter(None, [parsed.query.get("options"), "-c default_transaction_read_only=on"]))
        parsed = parsed.update_query_dict({"options": options})
    return parsed.render_as_string(hide_password=False)


def _number(value: Any) -> float | None:
    """A float for JSON: None for a missing value, NaN or an infinity (JSON has none of them)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _curve_rows(pod: PodRecord, layout: TournamentDir) -> list[dict[str, Any]]:
    """A pod's learning curve (``curve.csv``, in the tournament directory ``layout`` even if the tournament was
    moved since it ran), oldest first; [] before its first evaluation. A row cut short by a pod writing it
    right now is left out."""
    return read_curve(PodDir(layout.local(pod.run_dir, pod.id)).curve)


def _last_eval(pod: PodRecord, layout: TournamentDir) -> dict[str, Any] | None:
    try:
        rows = _curve_rows(pod, layout)
    except (OSError, UnicodeDecodeError, csv.Error):  # one unreadable file shows as no evaluation, not a broken page
        return None
    if not rows:
        return None
    last = rows[-1]
    return {"step": last["step"], "mean": _number(last["eval_mean"]), "std": _number(last["eval_std"])}


def _entry(e: Entry) -> dict[str, Any]:
    return {
        "rank": e.rank,
        "pod_id": e.pod_id,
        "parent_id": e.parent_id,
        "algo": e.algo,
        "score_mean": _number(e.score_mean),
        "score_std": _number(e.score_std),
        "score_episodes": e.score_episodes,
        "steps": e.steps,
        "total_steps": e.total_steps,
        "wall_time": _number(e.wall_time),
        "created": e.created,
        "hparams": e.hparams,
    }


class TournamentWatch:
    """A read-only view of the tournament in ``tournament_dir``, for the live page.

    Args:
        tournament_dir: a tournament's run directory (``podium tournament`` prints it), or an empty directory
            a tournament will start in (the page then says it waits for one).
        database_url: the leaderboard database's URL when it differs from the one the tournament recorded
            (e.g. a PostgreSQL server reached through a port-forward); default: the recorded one (for SQLite,
            the file in the run directory).
        history: how many of the newest results of the updater :meth:`state` lists.

    Raises:
        FileNotFoundError: ``tournament_dir`` does not exist.
        ValueError: it is not a tournament's directory (a file, a pod's run, a directory of tournaments, other
            files) or its ``tournament.yaml`` is damaged.
        DatabaseError: its database cannot be opened, or does not hold the tournament.
    """

    def __init__(self, tournament_dir: str | Path, *, database_url: str | None = None, history: int = HISTORY_ROWS):
        root = Path(tournament_dir).expanduser()
        self.layout = TournamentDir(root.resolve())
        self.database_url = database_url
        self.history_rows = history
        self._board: Leaderboard | None = None
        self._database = ""  # the database's URL as shown (password hidden)
        self._lock = threading.Lock()
        _check_directory(root, self.layout)
        if self.layout.holds_tournament():
            self._leaderboard()  # a database that cannot be opened is refused now, not at the first poll

    @property
    def root(self) -> Path:
        return self.layout.root

    def close(self) -> None:
        """Close the database connections (the watch opens them again if asked for more)."""
        with self._lock:
            board, self._board = self._board, None
        if board is not None:
            board.close()

    def _leaderboard(self) -> Leaderboard | None:
        """The tournament's database, opened read-only on first use; None while the directory holds none."""
        with self._lock:
            if self._board is None and self.layout.holds_tournament():
                try:
                    meta = read_meta(self.root)
                except ConfigError as exc:
                    raise ValueError(str(exc)) from None
                url = resolve_database_url(self.database_url or meta.get("db"), self.root)
                reader = read_only_url(url)
                try:
                    board = Leaderboard(reader, meta["name"], read_only=True)
                except DatabaseError as exc:  # name the URL as the user gave it
                    raise DatabaseError(str(exc).replace(redact(reader), redact(url))) from None
                try:
                    board.info()
                except DatabaseError:
                    board.close()
                    raise
                self._board, self._database = board, redact(url)
            return self._board

    # ----------------------------------------------------------------- what the page polls
    def state(self) -> dict[str, Any]:
        """Everything the page shows, as of now (all times in seconds, scores are evaluation returns):

        ``tournament``: None while the directory holds no tournament (then ``message`` says how to start one);
        else name, env, algos, status (``running``/``finished``/``interrupted``), ``stale`` (running, but the
        owner's heartbeat is older than the leaderboard's takeover limit), stop reason, elapsed (live while
        running), target and ``reached``/``time_to_target``, budgets, owner and heartbeat age, pod counts
        per status, env steps so far, the database (password hidden).
        ``leaderboard``: the entries, best first (rank, pod, parent, algo, score mean/std and the episodes
        behind it, steps own/with ancestors, training seconds, hyperparameters).
        ``pool``: the pods that still need the pool (queued, running, preempted) with their latest evaluation.
        ``history``: the newest results of the updater, newest first. ``progress``: the scored results
        (``[elapsed, score, algo, pod]``, the newest) and the leaderboard's best over time (``[elapsed, best]``
        at each improvement). ``champion``: the best entry's pod id.

        Raises:
            DatabaseError, sqlalchemy.exc.SQLAlchemyError: the database cannot be read right now.
            ValueError: the tournament's ``tournament.yaml`` is damaged.
        """
        now = time.time()
        state: dict[str, Any] = {"tournament_dir": str(self.root), "now": now}
        board = self._leaderboard()
        if board is None:
            return {
                **state,
                "tournament": None,
                "message": f"{self.root} holds no tournament yet; start one there with "
                f"'podium tournament CONFIG.yaml --run-dir {self.root}'. This page shows it once it starts.",
                "leaderboard": [],
                "pool": [],
                "history": [],
                "progress": {"results": [], "best": []},
                "champion": None,
            }
        info = board.info()
        entries = board.entries()
        pods = board.pods()
        history = board.history()
        by_id = {p.id: p for p in pods}
        config = info.get("config") or {}
        pool = []
        running_steps = 0
        for p in pods:
            if p.status not in ACTIVE:
                continue
            latest = _last_eval(p, self.layout)
            if p.status == PodStatus.RUNNING and latest is not None:
                running_steps += int(latest["step"] or 0)
            pool.append(
                {
                    "pod_id": p.id,
                    "algo": p.algo,
                    "status": str(p.status),
                    "parent_id": p.parent_id,
                    "attempts": p.attempts,
                    "running_s": now - p.started if p.started and p.status == PodStatus.RUNNING else None,
                    "steps": latest["step"] if latest else p.steps,
                    "latest_eval": latest,
                }
            )
        beat = info.get("heartbeat")
        beat_age = now - beat if beat else None
        running = info["status"] == "running"
        elapsed = float(info.get("elapsed") or 0.0)
        if running and beat_age is not None and beat_age < STALE_AFTER:
            elapsed += beat_age  # the orchestrator records elapsed with each heartbeat
        target = config.get("target")
        tournament = {
            "name": info["name"],
            "env": config.get("env"),
            "algos": config.get("algos") or {},
            "backend": config.get("backend"),
            "status": info["status"],
            "stale": running and (beat_age is None or beat_age >= STALE_AFTER),
            "stale_after": STALE_AFTER,
            "stop_reason": info.get("stop_reason"),
            "created": info["created"],
            "elapsed": elapsed,
            "target": _number(target),
            "reached": info.get("time_to_target") is not None,
            "time_to_target": _number(info.get("time_to_target")),
            "budget": {"seconds": _number(config.get("seconds")), "steps": config.get("steps")},
            "leaderboard_size": config.get("leaderboard_size"),
            "owner": info.get("owner"),
            "heartbeat_age": _number(beat_age),
            "pods": dict(Counter(str(p.status) for p in pods)),
            "steps": steps_done(pods) + running_steps,
            "database": self._database,
        }
        recent = []
        for h in history[::-1][: self.history_rows]:
            parent = by_id[h["pod_id"]].parent_id if h["pod_id"] in by_id else None
            recent.append(
                {
                    "elapsed": _number(h["elapsed"]),
                    "pod_id": h["pod_id"],
                    "algo": h["algo"],
                    "parent_id": parent,
                    "outcome": h["outcome"],
                    "rank": h["rank"],
                    "score_mean": _number(h["score_mean"]),
                    "score_std": _number(h["score_std"]),
                    "steps": h["steps"],
                    "error": h["error"],
                }
            )
        scored = [h for h in history if _number(h["score_mean"]) is not None]
        best_line: list[list[float]] = []
        for h in scored:
            if h["outcome"] == "entered" and (not best_line or h["score_mean"] > best_line[-1][1]):
                best_line.append([h["elapsed"], h["score_mean"]])
        results = [[h["elapsed"], h["score_mean"], h["algo"], h["pod_id"]] for h in scored[-PROGRESS_POINTS:]]
        return {
            **state,
            "tournament": tournament,
            "message": None,
            "leaderboard": [_entry(e) for e in entries],
            "pool": pool,
            "history": recent,
            "progress": {"results": results, "best": best_line},
            "champion": entries[0].pod_id if entries else None,
        }

    def curve(self, pod_id: str, lineage: bool = False) -> dict[str, Any]:
        """The learning curve of pod ``pod_id`` of this tournament: its evaluations (``step`` env steps of this
        pod, ``wall_time`` seconds of training, ``eval_mean``, ``eval_std``, ``eval_episodes``, ``best_mean``),
        oldest first, at most :data:`CURVE_POINTS` of them (thinned evenly, the last kept); [] before its first
        evaluation. With ``lineage``, also its ancestors' curves (up to :data:`LINEAGE_PODS` of them, oldest
        first, each as ``[lineage_step, eval_mean]`` pairs) and ``offset``: the env steps its ancestors took, so
        that ``offset + step`` places its own curve on the same axis (as ``champion.png`` does).

        Raises:
            KeyError: the tournament has no pod ``pod_id`` (the directory holds no tournament yet, or the id is
                not one a pod may have: the file read is always the one the database records for the pod).
        """
        board = self._leaderboard()
        if board is None or not re.fullmatch(POD_ID, pod_id):
            raise KeyError(f"no pod {pod_id!r} in this tournament")
        pod = board.pod(pod_id)
        rows = _thin(_curve_rows(pod, self.layout), CURVE_POINTS)
        body: dict[str, Any] = {
            "pod_id": pod.id,
            "algo": pod.algo,
            "status": str(pod.status),
            "parent_id": pod.parent_id,
            "rows": [
                {
                    "step": r["step"],
                    "wall_time": _number(r["wall_time"]),
                    "eval_mean": _number(r["eval_mean"]),
                    "eval_std": _number(r["eval_std"]),
                    "eval_episodes": r["eval_episodes"],
                    "best_mean": _number(r["best_mean"]),
                }
                for r in rows
            ],
        }
        if lineage:
            chain: list[PodRecord] = []  # the ancestors, newest first
            parent = pod.parent_id
            while parent is not None and len(chain) < LINEAGE_PODS and parent not in {p.id for p in chain}:
                chain.append(board.pod(parent))
                parent = chain[-1].parent_id
            ancestors, offset = [], 0
            for p in reversed(chain):
                if p.total_steps is not None and p.steps is not None:
                    offset = p.total_steps - p.steps  # its own ancestors' steps, also those beyond the limit
                points = _thin(_curve_rows(p, self.layout), max(10, CURVE_POINTS // (len(chain) + 1)))
                ancestors.append(
                    {
                        "pod_id": p.id,
                        "algo": p.algo,
                        "offset": offset,
                        "points": [[offset + r["step"], _number(r["eval_mean"])] for r in points],
                    }
                )
                offset += p.steps or 0
            body["offset"], body["ancestors"] = offset, ancestors
        return body


def _thin(rows: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """At most ``most`` of ``rows``, evenly spaced, the last one kept."""
    if len(rows) <= most:
        return rows
    every = math.ceil((len(rows) - 1) / (most - 1))
    return [*rows[:-1:every], rows[-1]]


def _check_directory(root: Path, layout: TournamentDir) -> None:
    """Refuse, with the fix, a ``root`` that is neither a tournament's directory nor an empty one."""
    start = f"'podium tournament CONFIG.yaml --run-dir {root}'"
    if not root.exists():
        raise FileNotFoundError(
            f"{root} does not exist. Give the run directory of a tournament (the one 'podium tournament' printed, "
            f"e.g. runs/NAME), or create the directory and start a tournament there with {start}"
        )
    if not root.is_dir():
        raise ValueError(f"{root} is a file, not a directory: give the run directory of a tournament")
    if layout.holds_tournament():
        return
    if PodDir(root).holds_run():
        raise ValueError(
            f"{root} holds a single pod's run (podium train), not a tournament: its learning curve is "
            f"{PodDir(root).curve}. Give the run directory of a tournament"
        )
    inside = [d for d in sorted(root.iterdir()) if d.is_dir() and TournamentDir(d).holds_tournament()]
    if inside:
        names = ", ".join(str(d) for d in inside[:5]) + (f" and {len(inside) - 5} more" if len(inside) > 5 else "")
        raise ValueError(f"{root} holds tournaments, but is none itself: give one of them ({names})")
    if any(root.iterdir()):
        raise ValueError(
            f"{root} is not a tournament's run directory (it has no {layout.meta.name}, and other files). Give the "
            f"directory 'podium tournament' printed, or an empty one to wait in for a tournament started with {start}"
        )
