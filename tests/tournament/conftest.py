"""Fixtures for the tournament tests: a real PostgreSQL server, started here on 127.0.0.1.

Also two checks shared by the tournament tests that kill and resume tournaments (as fixtures, since test
modules do not import each other): the leaderboard a tournament's history implies, and exact step totals.

The server binaries come from Debian's ``postgresql`` package, which ``make test`` installs when it is
missing (``scripts/ensure-postgres.sh``). The server lives in a temporary directory, listens on
127.0.0.1 only, trusts local connections and is stopped at the end of the session. Set
``PODIUM_SKIP_POSTGRES=1`` to skip the PostgreSQL variants where no server can be installed.
"""

from __future__ import annotations

import csv
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL server on 127.0.0.1 (session-wide; tests use distinct tournament names)."""
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("PODIUM_SKIP_POSTGRES") == "1":
            pytest.skip("PostgreSQL is not installed and PODIUM_SKIP_POSTGRES=1")
        pytest.fail(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: run 'make test', which installs Debian's "
            "postgresql package, or install it yourself; PODIUM_SKIP_POSTGRES=1 skips these tests"
        )
    root = Path(tempfile.mkdtemp(prefix="podium-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: use the package's postgres user
        user = pwd.getpwnam("postgres")
        for path in (root, sock):
            os.chown(path, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run(
        [*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "podium", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off"
    subprocess.run(
        [*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://podium@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each leaderboard test runs against SQLite (a file) and against the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'board.db'}"
    from podium.tournament.leaderboard import database_url

    return database_url(request.getfixturevalue("postgres_url"), tmp_path)


def _board_from_history(history: list[dict], size: int) -> list[tuple[str, float]]:
    """The leaderboard a tournament's history implies: each pod's best result that entered it (higher mean, then
    lower std, then earlier), the top ``size`` of them, best first, as (pod id, mean). A rejected result never
    entered: with the default margin a slightly higher mean does not displace an entry (it is within the noise),
    and an entry leaves only when a better result enters."""
    best: dict[str, tuple[float, float, int]] = {}
    for h in history:
        if h["outcome"] in ("entered", "kept"):
            key = (-h["score_mean"], h["score_std"], h["id"])
            if h["pod_id"] not in best or key[:2] < best[h["pod_id"]][:2]:
                best[h["pod_id"]] = key
    return [(pod_id, -key[0]) for pod_id, key in sorted(best.items(), key=lambda kv: kv[1])[:size]]


def _assert_steps_counted_once(board, total_steps: int) -> None:
    """Every finished pod's steps are what its ``report.json`` says, it was collected once, and the tournament's
    total is the sum of what its pods report (finished: ``report.json``; the others: their last curve row)."""
    from podium.tournament.backends import read_report

    finished = {p.id: p for p in board.pods("finished")}
    reported = {pod_id: read_report(Path(p.run_dir)).steps for pod_id, p in finished.items()}
    assert {pod_id: p.steps for pod_id, p in finished.items()} == reported
    results = ("entered", "rejected", "kept")  # not "failed", nor "lost" (the pod's node died; it resumed)
    collected = sorted((h["pod_id"], h["steps"]) for h in board.history() if h["outcome"] in results)
    assert collected == sorted(reported.items())  # one result per pod: none collected twice
    unfinished = 0
    for p in board.pods():
        curve = Path(p.run_dir) / "curve.csv"
        if p.status != "finished" and curve.exists():
            rows = list(csv.DictReader(curve.open()))
            unfinished += int(float(rows[-1]["step"])) if rows else 0
    assert total_steps == sum(reported.values()) + unfinished


@pytest.fixture
def board_from_history() -> Callable[[list[dict], int], list[tuple[str, float]]]:
    """``board_from_history(history, size)``: the leaderboard the history implies (see above)."""
    return _board_from_history


@pytest.fixture
def assert_steps_counted_once() -> Callable[..., None]:
    """``assert_steps_counted_once(board, total_steps)``: exact step totals, each pod collected once."""
    return _assert_steps_counted_once
