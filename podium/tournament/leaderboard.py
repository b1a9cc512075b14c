"""Leaderboard: the tournament's memory, in a real database through SQLAlchemy.

A SQLite file in the run directory by default (WAL mode, so several processes can read while one
writes, and a killed process never leaves it half-written), or PostgreSQL by URL for a cluster. One
database can hold many tournaments; every row carries its tournament's name. Four tables:

``tournaments``  one row per tournament: its config, elapsed time, status and current owner (the
                 orchestrator process that runs it — two orchestrators never run one tournament).
``pods``         every pod ever started: parent, algorithm, hyperparameters, seed, status (a
                 :class:`~podium.tournament.states.PodStatus`; changes are checked against its allowed
                 transitions), steps so far, result, checkpoint.
``leaderboard``  the top-K entries, at most one per pod (its best result; see :meth:`Leaderboard.offer`):
                 pod id, parent id, algorithm, hyperparameters, env, score mean/std, steps (this pod /
                 along its lineage), wall time, checkpoint, created time.
``history``      everything the updater received, in order, and what it decided (entered, rejected,
                 kept: the pod's earlier, better entry stays; failed; lost: its node died, it resumes).

Writes that must not interleave (offering an entry, claiming a tournament) run in one transaction that
holds the database's write lock (``BEGIN IMMEDIATE`` on SQLite, a row lock on PostgreSQL); reads take no
lock, so a dashboard or ``podium leaderboard`` never waits for the orchestrator, nor it for them. Several
writes that must land together (a pod's result, its status and its history row) share one transaction:
:meth:`Leaderboard.transaction`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from podium.rundir import TournamentDir
from podium.tournament.states import ACTIVE, IllegalTransition, PodStatus, check_transition

__all__ = [
    "ACTIVE",
    "DatabaseError",
    "Entry",
    "IllegalTransition",
    "Leaderboard",
    "OwnershipLost",
    "PodRecord",
    "PodStatus",
    "database_url",
    "redact",
]

STALE_AFTER = 60.0
"""Seconds without a heartbeat after which another host may take over a tournament."""

_meta = sa.MetaData()
_tournaments = sa.Table(
    "tournaments",
    _meta,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("elapsed", sa.Float, nullable=False, default=0.0),
    sa.Column("status", sa.String(20), nullable=False, default="running"),
    sa.Column("stop_reason", sa.Text),
    sa.Column("time_to_target", sa.Float),
    sa.Column("target_tries", sa.Integer),
    sa.Column("next_pod", sa.Integer, nullable=False, default=1),
    sa.Column("owner", sa.String(300)),
    sa.Column("heartbeat", sa.Float),
)
_pods = sa.Table(
    "pods",
    _meta,
    sa.Column("tournament", sa.String(200), primary_key=True),
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("parent_id", sa.String(40)),
    sa.Column("algo", sa.String(40), nullable=False),
    sa.Column("env", sa.String(200), nullable=False),
    sa.Column("hparams", sa.JSON, nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("run_dir", sa.Text, nullable=False),
    sa.Column("init_checkpoint", sa.Text),
    sa.Column("handle", sa.String(200)),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("started", sa.Float),
    sa.Column("ended", sa.Float),
    sa.Column("error", sa.Text),
    sa.Column("score_mean", sa.Float),
    sa.Column("score_std", sa.Float),
    sa.Column("steps", sa.BigInteger),
    sa.Column("total_steps", sa.BigInteger),
    sa.Column("wall_time", sa.Float),
    sa.Column("checkpoint", sa.Text),
    sa.Column("pruned", sa.Boolean, nullable=False, default=False),
    sa.Column("lineage", sa.String(40)),
)
_board = sa.Table(
    "leaderboard",
    _meta,
    sa.Column("tournament", sa.String(200), primary_key=True),
    sa.Column("pod_id", sa.String(40), primary_key=True),
    sa.Column("parent_id", sa.String(40)),
    sa.Column("algo", sa.String(40), nullable=False),
    sa.Column("env", sa.String(200), nullable=False),
    sa.Column("hparams", sa.JSON, nullable=False),
    sa.Column("score_mean", sa.Float, nullable=False),
    sa.Column("score_std", sa.Float, nullable=False),
    sa.Column("steps", sa.BigInteger, nullable=False),
    sa.Column("total_steps", sa.BigInteger, nullable=False),
    sa.Column("wall_time", sa.Float, nullable=False),
    sa.Column("checkpoint", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("score_episodes", sa.Integer),
)
_history = sa.Table(
    "history",
    _meta,
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("tournament", sa.String(200), nullable=False, index=True),
    sa.Column("pod_id", sa.String(40), nullable=False),
    sa.Column("received", sa.Float, nullable=False),
    sa.Column("elapsed", sa.Float, nullable=False),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("rank", sa.Integer),
    sa.Column("algo", sa.String(40), nullable=False),
    sa.Column("score_mean", sa.Float),
    sa.Column("score_std", sa.Float),
    sa.Column("steps", sa.BigInteger),
    sa.Column("wall_time", sa.Float),
    sa.Column("error", sa.Text),
    sa.Column("report", sa.JSON),
)


class DatabaseError(RuntimeError):
    """The leaderboard database cannot be reached or used; the message says what to check."""


class OwnershipLost(DatabaseError):
    """Another orchestrator took the tournament over from this one (whose heartbeat had gone stale, or by
    ``--force``): nothing this one writes afterwards is kept, and its pods are the new owner's."""


@dataclass(frozen=True)
class Entry:
    """One leaderboard entry. ``steps`` are this pod's env steps; ``total_steps`` include its ancestors'
    (the training the checkpoint embodies). Scores are evaluation returns (mean and std over episodes)."""

    pod_id: str
    parent_id: str | None
    algo: str
    env: str
    hparams: dict[str, Any]
    score_mean: float
    score_std: float
    steps: int
    total_steps: int
    wall_time: float
    checkpoint: str
    created: float
    rank: int = 0
    score_episodes: int | None = None
    """Episodes behind ``score_mean``/``score_std`` (None: recorded by an older podium)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PodRecord:
    """One pod of a tournament as the database knows it."""

    id: str
    number: int
    parent_id: str | None
    algo: str
    env: str
    hparams: dict[str, Any]
    seed: int
    spec: dict[str, Any]
    status: PodStatus
    run_dir: str
    init_checkpoint: str | None
    handle: str | None
    attempts: int
    created: float
    started: float | None
    ended: float | None
    error: str | None
    score_mean: float | None
    score_std: float | None
    steps: int | None
    total_steps: int | None
    wall_time: float | None
    checkpoint: str | None
    pruned: bool
    """``steps``: env steps of the pod's report once it finished; for a pod that failed or was preempted, those
    of its last evaluation when it stopped (recorded once then, so nobody re-reads its curve)."""
    lineage: str | None = None
    """The member of the pool this pod is a round of (its first pod's id); None in databases older than it."""


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def database_url(url: str | None, run_dir: str | Path) -> str:
    """The SQLAlchemy URL to use: ``url`` (``postgresql://`` gets the installed psycopg driver) or the
    default SQLite file ``RUN_DIR/leaderboard.db``."""
    if url is None:
        return f"sqlite:///{TournamentDir(Path(run_dir).resolve()).database}"
    if url.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise DatabaseError(
                "a PostgreSQL leaderboard needs the psycopg driver: pip install 'podium[postgres]'"
            ) from None
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _this_host() -> str:
    return socket.gethostname()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Leaderboard:
    """The database of one tournament (``name``) at ``url``.

    Args:
        url: SQLAlchemy URL (see :func:`database_url`).
        name: the tournament's name; one database may hold several tournaments.
        read_only: only read (the live page): the tables are neither created nor brought up to date, and a
            database that lacks them, or a column this version reads, is refused with the fix. The URL itself
            must also forbid writes (SQLite's ``mode=ro``, PostgreSQL's read-only transactions).

    Raises:
        DatabaseError: the database cannot be reached (checked at once, before anything else happens).
    """

    def __init__(self, url: str, name: str, read_only: bool = False) -> None:
        self.url, self.name = url, name
        self.sqlite = url.startswith("sqlite")
        self.owner: str | None = None  # set by claim(): every transaction then checks that it still owns it
        self._open = threading.local()  # this thread's open transaction (see transaction())
        try:
            if self.sqlite:
                self.engine: Engine = sa.create_engine(url, connect_args={"timeout": 60})
                sa.event.listen(self.engine, "connect", _sqlite_read if read_only else _sqlite_connect)
                sa.event.listen(self.engine, "begin", _sqlite_begin)
            else:
                args = {"connect_timeout": 10} if url.startswith("postgresql") else {}
                self.engine = sa.create_engine(url, connect_args=args, pool_pre_ping=True)
            if read_only:
                _check_schema(self.engine, url)
            else:
                _meta.create_all(self.engine)
                _add_missing_columns(self.engine)
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            rights = "" if read_only else " and the user may create tables"
            raise DatabaseError(
                f"cannot use the leaderboard database {redact(url)}: {reason}. Check that the server runs"
                f"{',' if rights else ' and'} the URL (--db) is right{rights}."
            ) from None

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def transaction(self, fenced: bool = True) -> Iterator[Connection]:
        """One transaction that holds the write lock for this tournament; every read and write of this
        leaderboard inside it (in this thread) is part of it, and all of them commit together or not at all.
        Nested uses join the outer one.

        Raises:
            OwnershipLost: this process claimed the tournament and another has taken it over since (checked
                under the lock, before anything is written: a fencing check; ``fenced=False``: not checked).
        """
        conn = getattr(self._open, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.engine.connect() as conn:
            conn.info[_WRITE] = True  # the SQLite "begin" hook takes the write lock at once
            try:
                with conn.begin():
                    owner = sa.select(_tournaments.c.owner).where(_tournaments.c.name == self.name)
                    row = conn.execute(owner if self.sqlite else owner.with_for_update()).first()
                    if fenced and self.owner is not None and row is not None and row.owner != self.owner:
                        raise OwnershipLost(
                            f"tournament {self.name!r} was taken over by {row.owner or 'nobody'} while this process "
                            f"({self.owner}) ran it (its heartbeat had gone {STALE_AFTER:.0f} s without a beat: was "
                            "it suspended?, or --force); this process stops and leaves the tournament to the new owner "
                            "(the process backend's pods run on for it; Ray's stop and resume from their checkpoints)"
                        )
                    self._open.conn = conn
                    try:
                        yield conn
                    finally:
                        self._open.conn = None
            finally:
                conn.info.pop(_WRITE, None)

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection for reading: the open transaction's, else a fresh one (no lock)."""
        conn = getattr(self._open, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.engine.connect() as conn:
            yield conn

    # ----------------------------------------------------------------- the tournament row
    def create(self, config: dict[str, Any]) -> None:
        """Register this tournament. Raises :class:`DatabaseError` if the name is taken."""
        with self.transaction() as conn:
            if conn.execute(sa.select(_tournaments.c.name).where(_tournaments.c.name == self.name)).first():
                raise DatabaseError(
                    f"the database {redact(self.url)} already holds a tournament named {self.name!r}; "
                    "use 'podium tournament resume RUN_DIR' to continue it, or another --run-dir"
                )
            conn.execute(sa.insert(_tournaments).values(name=self.name, config=config, created=time.time()))

    def info(self) -> dict[str, Any]:
        """The tournament row as a dict. Raises :class:`DatabaseError` if it does not exist."""
        with self._read() as conn:
            row = conn.execute(sa.select(_tournaments).where(_tournaments.c.name == self.name)).mappings().first()
        if row is None:
            raise DatabaseError(f"no tournament named {self.name!r} in {redact(self.url)}")
        return dict(row)

    def update_info(self, **values: Any) -> None:
        with self.transaction() as conn:
            conn.execute(sa.update(_tournaments).where(_tournaments.c.name == self.name).values(**values))

    def claim(self, force: bool = False) -> str:
        """Make this process the tournament's owner; returns the owner string ``host:pid``.

        Raises:
            DatabaseError: another live orchestrator owns it (same host: its pid is alive; another host:
                its heartbeat is younger than :data:`STALE_AFTER` seconds), unless ``force``.
        """
        me = f"{_this_host()}:{os.getpid()}"
        with self.transaction(fenced=False) as conn:
            row = conn.execute(sa.select(_tournaments).where(_tournaments.c.name == self.name)).mappings().one()
            owner, beat = row["owner"], row["heartbeat"] or 0.0
            if owner and owner != me and not force:
                host, _, pid = owner.rpartition(":")
                alive = _pid_alive(int(pid)) if host == _this_host() else time.time() - beat < STALE_AFTER
                if alive:
                    raise DatabaseError(
                        f"tournament {self.name!r} is already being run by process {owner}; stop it first "
                        f"(or, if that process is gone, wait {STALE_AFTER:.0f} s or use --force)"
                    )
            conn.execute(
                sa.update(_tournaments)
                .where(_tournaments.c.name == self.name)
                .values(owner=me, heartbeat=time.time(), status="running")
            )
        self.owner = me
        return me

    def heartbeat(self, elapsed: float) -> None:
        """Record that the owner is alive and the tournament's elapsed seconds so far."""
        self.update_info(heartbeat=time.time(), elapsed=elapsed)

    def release(self, status: str, **values: Any) -> None:
        """Give up ownership and set the final (or interrupted) status."""
        self.update_info(owner=None, status=status, **values)
        self.owner = None

    def take_pod_number(self) -> int:
        """The next pod number (1, 2, ...), reserved atomically."""
        with self.transaction() as conn:
            number = conn.execute(
                sa.select(_tournaments.c.next_pod).where(_tournaments.c.name == self.name)
            ).scalar_one()
            conn.execute(sa.update(_tournaments).where(_tournaments.c.name == self.name).values(next_pod=number + 1))
        return int(number)

    # ----------------------------------------------------------------- pods
    def add_pod(self, **values: Any) -> PodRecord:
        values = {"attempts": 0, "pruned": False, "created": time.time(), **values}
        try:
            values["status"] = str(PodStatus(values["status"]))
        except ValueError:
            raise IllegalTransition(f"pod {values.get('id')}: {values['status']!r} is not a pod status") from None
        with self.transaction() as conn:
            conn.execute(sa.insert(_pods).values(tournament=self.name, **values))
        return self.pod(values["id"])

    def update_pod(self, pod_id: str, **values: Any) -> None:
        """Change a pod's fields. A new ``status`` must be one the pod may move to from its current one
        (:data:`~podium.tournament.states.TRANSITIONS`), checked in the same transaction as the write.

        Raises:
            IllegalTransition: the status change is not allowed (nothing is written).
            KeyError: no such pod.
        """
        where = (_pods.c.tournament == self.name, _pods.c.id == pod_id)
        with self.transaction() as conn:
            if "status" in values:
                old = conn.execute(sa.select(_pods.c.status).where(*where)).scalar_one_or_none()
                if old is None:
                    raise KeyError(f"no pod {pod_id!r} in tournament {self.name!r}")
                if values["status"] != old:
                    values["status"] = str(check_transition(pod_id, old, values["status"]))
                else:
                    values.pop("status")
            if values:
                conn.execute(sa.update(_pods).where(*where).values(**values))

    def pod(self, pod_id: str) -> PodRecord:
        with self._read() as conn:
            row = (
                conn.execute(sa.select(_pods).where(_pods.c.tournament == self.name, _pods.c.id == pod_id))
                .mappings()
                .first()
            )
        if row is None:
            raise KeyError(f"no pod {pod_id!r} in tournament {self.name!r}")
        return _pod_record(row)

    def pods(self, *status: str) -> list[PodRecord]:
        """All pods (or those in the given states), in the order they were created."""
        query = sa.select(_pods).where(_pods.c.tournament == self.name)
        if status:
            query = query.where(_pods.c.status.in_([str(s) for s in status]))
        with self._read() as conn:
            rows = conn.execute(query.order_by(_pods.c.number)).mappings().all()
        return [_pod_record(r) for r in rows]

    def lineage(self, pod_id: str) -> list[PodRecord]:
        """``pod_id`` and its ancestors, newest first (the champion's family tree, one branch)."""
        chain, seen = [], set()
        current: str | None = pod_id
        while current is not None and current not in seen:
            seen.add(current)
            record = self.pod(current)
            chain.append(record)
            current = record.parent_id
        return chain

    # ----------------------------------------------------------------- the leaderboard
    def entries(self) -> list[Entry]:
        """The leaderboard, best first: by evaluation mean, then lower std, then earlier."""
        with self._read() as conn:
            rows = conn.execute(sa.select(_board).where(_board.c.tournament == self.name)).mappings().all()
        ranked = sorted(rows, key=_rank_key)
        return [_entry(r, rank) for rank, r in enumerate(ranked, start=1)]

    def offer(
        self,
        entry: Entry,
        size: int,
        still_holds: Callable[[Entry], bool] | None = None,
        displaces: Callable[[Entry, Entry], bool] | None = None,
    ) -> tuple[int | None, list[Entry]]:
        """Insert ``entry`` if it makes the top ``size``; returns (its rank or None, entries that fell off).

        A pod id is one entry, and it holds the pod's best result. A pod that reports again (resumed after
        preemption, or collected twice) replaces its entry when the new result ranks better (higher mean, or
        the same mean with a lower std). A result that does not rank better leaves the earlier entry as it
        is (rank None) — unless ``still_holds(earlier)`` is False: a resumed pod writes to the same
        checkpoint files, and one that overwrote the earlier result's checkpoint with a weaker policy (a
        pod restarted from scratch does) leaves an entry whose checkpoint cannot deliver its score. The
        better policy then exists nowhere any more, so the earlier entry leaves the board and the new result
        competes for a place like any other offer.

        On a full board, an entry that would push another off enters only if ``displaces(entry, pushed)``
        (default: always): e.g. only when its score is higher by more than the noise of the two scores.

        One transaction under the write lock: concurrent offers never lose or duplicate entries, and the
        board never holds more than ``size`` of them.
        """
        values = {k: v for k, v in entry.to_dict().items() if k != "rank"}
        new = {**values, "tournament": self.name}
        with self.transaction() as conn:
            rows = [dict(r) for r in conn.execute(sa.select(_board).where(_board.c.tournament == self.name)).mappings()]
            earlier = next((r for r in rows if r["pod_id"] == entry.pod_id), None)
            at_least_as_good = earlier is not None and _score_key(earlier) <= _score_key(new)
            if at_least_as_good and (still_holds is None or still_holds(_entry(earlier, 0))):
                return None, []  # the pod's earlier, better result stays
            others = [r for r in rows if r["pod_id"] != entry.pod_id]
            ranked = sorted([*others, new], key=_rank_key)
            rank = next((i for i, r in enumerate(ranked[:size], start=1) if r is new), None)
            gone = [r for r in ranked[size:] if r is not new]
            if rank is not None and gone and displaces is not None and not displaces(entry, _entry(gone[0], 0)):
                rank, gone = None, []  # not better than the entry it would push off by more than the noise
            if earlier is not None:
                conn.execute(sa.delete(_board).where(_board.c.tournament == self.name, _board.c.pod_id == entry.pod_id))
                if rank is None:  # neither of the pod's results stays on the board
                    gone.append(earlier)
            if rank is not None:
                conn.execute(sa.insert(_board).values(tournament=self.name, **values))
            for r in gone:
                if r is not earlier:
                    conn.execute(
                        sa.delete(_board).where(_board.c.tournament == self.name, _board.c.pod_id == r["pod_id"])
                    )
        return rank, [_entry(r, 0) for r in gone]

    # ----------------------------------------------------------------- history
    def record(self, **values: Any) -> None:
        """Append one row to the history (everything the updater received, and its decision)."""
        with self.transaction() as conn:
            conn.execute(sa.insert(_history).values(tournament=self.name, received=time.time(), **values))

    def history(self) -> list[dict[str, Any]]:
        """The history, oldest first (without the full reports)."""
        cols = [c for c in _history.c if c.name not in ("report", "tournament")]
        with self._read() as conn:
            rows = conn.execute(
                sa.select(*cols).where(_history.c.tournament == self.name).order_by(_history.c.id)
            ).mappings()
            return [dict(r) for r in rows]


def _score_key(row: Any) -> tuple[float, float]:
    """Smaller is better: higher evaluation mean, then lower std."""
    return (-row["score_mean"], row["score_std"])


def _rank_key(row: Any) -> tuple[float, float, float]:
    return (*_score_key(row), row["created"])


def _entry(row: Any, rank: int) -> Entry:
    names = {f.name for f in fields(Entry)} - {"rank"}
    return Entry(**{k: row[k] for k in names}, rank=rank)


def _pod_record(row: Any) -> PodRecord:
    values = {f.name: row[f.name] for f in fields(PodRecord)}
    return PodRecord(**{**values, "status": PodStatus(values["status"])})


def _check_schema(engine: Engine, url: str) -> None:
    """Refuse, with the fix, a database a read-only reader cannot use: no leaderboard tables, or tables made by
    an older podium that lack columns this version reads."""
    inspector = sa.inspect(engine)
    missing = [t.name for t in _meta.sorted_tables if not inspector.has_table(t.name)]
    if missing:
        raise DatabaseError(
            f"{redact(url)} holds no podium leaderboard (no {', '.join(missing)} table): is the URL (--db) right?"
        )
    for table in _meta.sorted_tables:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        lacking = [c.name for c in table.columns if c.name not in have]
        if lacking:
            raise DatabaseError(
                f"the leaderboard database {redact(url)} was written by an older podium (its {table.name} table "
                f"lacks {', '.join(lacking)}); open it once with 'podium leaderboard RUN_DIR', which brings it up "
                "to date, then again here"
            )


def _add_missing_columns(engine: Engine) -> None:
    """Bring a database made by an older podium up to date: add the nullable columns it lacks."""
    inspector = sa.inspect(engine)
    for table in _meta.sorted_tables:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have and column.nullable:
                kind = column.type.compile(dialect=engine.dialect)
                with engine.begin() as conn:
                    conn.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let SQLAlchemy's "begin" event below open transactions
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()


def _sqlite_read(dbapi_conn: Any, _record: Any) -> None:
    """A read-only connection: the journal mode is the writer's to set (setting it is a write)."""
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()


_WRITE = "podium_write"
"""Set in a connection's ``info`` while it runs a :meth:`Leaderboard.transaction`."""


def _sqlite_begin(conn: Connection) -> None:
    # a write takes the lock up front (no lost updates between processes); a read takes none (WAL)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get(_WRITE) else "BEGIN")
