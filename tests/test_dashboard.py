"""The live tournament page (podium.deploy.dashboard) on a real tournament: its JSON, its refusals, that it never
writes, and the page itself in a real browser that updates as the database changes, without a reload.

The tournament is real (three tiny CartPole PPO pods on the inline backend, about 3 s); changes during the browser
test are written through :class:`Leaderboard` the way the orchestrator writes them. The browser is Debian's
Chromium driven by Playwright's Python package (``bash scripts/ensure-chromium.sh`` installs it); that test skips
only when no Chromium is installed.
"""

from __future__ import annotations

import csv
import hashlib
import re
import shutil
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from podium.deploy.dashboard import make_app, serve_dashboard
from podium.deploy.dashboard.state import read_only_url
from podium.deploy.http import bind
from podium.logging import CurveWriter
from podium.rundir import PodDir, TournamentDir
from podium.tournament import leaderboard, tournament
from podium.tournament.leaderboard import DatabaseError, Entry, Leaderboard
from podium.tournament.orchestrator import open_leaderboard
from podium.tournament.states import PodStatus

with warnings.catch_warnings():  # Starlette asks for httpx2 instead of httpx, which its TestClient still uses
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

POD = {"steps": 1024, "eval_every": 512, "eval_episodes": 4, "tensorboard": False, "num_envs": 16}
"""Tiny CartPole pods: 1,024 steps, evaluated twice."""
CHROMIUM = shutil.which("chromium") or next((p for p in ("/usr/bin/chromium",) if Path(p).is_file()), None)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def run_dir(small_tournament) -> Path:
    """A finished tournament of three pods (its best entry may be a child of its first pod)."""
    return small_tournament("dashboard", {"ppo": 1}, pods=3, eval_every=POD["eval_every"])


@pytest.fixture
def client(run_dir: Path) -> Iterator[TestClient]:
    with TestClient(make_app(run_dir)) as c:
        yield c


def test_the_state_holds_the_status_leaderboard_pool_and_history_of_a_real_tournament(client, run_dir):
    state = client.get("/api/state").json()
    board = open_leaderboard(run_dir)
    entries, history, pods = leaderboard(run_dir), board.history(), board.pods()
    board.close()
    t = state["tournament"]
    assert t["status"] == "finished" and t["stop_reason"] == "steps" and not t["stale"]
    assert t["env"] == "CartPole-v1" and t["algos"] == {"ppo": 1.0} and t["backend"] == "inline"
    assert t["target"] == 500.0 and t["reached"] is False and t["time_to_target"] is None
    assert t["budget"] == {"seconds": None, "steps": 3 * 1024} and t["leaderboard_size"] == 3
    assert t["steps"] == sum(p.steps for p in pods) >= 3 * 1024
    assert t["pods"] == {"finished": len(pods)} and t["owner"] is None
    assert t["database"] == f"sqlite:///{TournamentDir(run_dir).database}" and t["elapsed"] > 0
    # the leaderboard in rank order, with the scores the database holds
    board_rows = state["leaderboard"]
    assert [e["pod_id"] for e in board_rows] == [e.pod_id for e in entries] and len(entries) == 3
    assert [e["rank"] for e in board_rows] == [1, 2, 3]
    means = [e["score_mean"] for e in board_rows]
    assert means == sorted(means, reverse=True) == [e.score_mean for e in entries]
    first = board_rows[0]
    assert (first["score_std"], first["score_episodes"], first["steps"], first["total_steps"], first["parent_id"]) == (
        entries[0].score_std,
        entries[0].score_episodes,
        entries[0].steps,
        entries[0].total_steps,
        entries[0].parent_id,
    )
    assert state["champion"] == entries[0].pod_id
    assert state["pool"] == []  # a finished tournament has no pod left in the pool
    # every result, newest first, and the leaderboard's best over time
    assert [h["pod_id"] for h in state["history"]] == [h["pod_id"] for h in history[::-1]]
    assert {h["outcome"] for h in state["history"]} <= {"entered", "rejected", "kept"}
    assert state["history"][-1]["parent_id"] is None  # the first pod starts fresh
    best, expected = [b for _, b in state["progress"]["best"]], []
    for h in history:  # each result that entered above every earlier one
        if h["outcome"] == "entered" and (not expected or h["score_mean"] > expected[-1]):
            expected.append(h["score_mean"])
    assert best == expected and best[-1] == entries[0].score_mean
    assert len(state["progress"]["results"]) == len(history)


def test_a_pods_curve_is_its_curve_csv_with_its_lineage_and_unknown_or_unsafe_ids_are_404(client, run_dir):
    board = open_leaderboard(run_dir)
    pods = board.pods()
    board_lineage = {p.id: board.lineage(p.id) for p in pods}
    board.close()
    for pod in pods:
        body = client.get(f"/api/curve/{pod.id}").json()
        with PodDir(pod.run_dir).curve.open() as f:
            rows = list(csv.DictReader(f))
        assert body["pod_id"] == pod.id and body["algo"] == "ppo" and body["status"] == "finished"
        assert [r["step"] for r in body["rows"]] == [int(r["step"]) for r in rows] and rows
        assert body["rows"][-1]["step"] == pod.steps == 1024
        assert [r["eval_mean"] for r in body["rows"]] == [float(r["eval_mean"]) for r in rows]
    child = next(p for p in pods if p.parent_id is not None)
    body = client.get(f"/api/curve/{child.id}", params={"lineage": "true"}).json()
    chain = board_lineage[child.id]
    assert [a["pod_id"] for a in body["ancestors"]] == [p.id for p in chain[:0:-1]]  # oldest first
    assert body["offset"] == child.total_steps - child.steps == sum(p.steps for p in chain[1:])
    assert body["ancestors"][0]["offset"] == 0 and body["ancestors"][-1]["points"][-1][0] == body["offset"]
    for bad in ("p9999", "..", "...", ".hidden", "..%2F..%2Fetc%2Fpasswd", "%2e%2e", "p0001%2F..", "x" * 41):
        response = client.get(f"/api/curve/{bad}")
        assert response.status_code == 404, bad
        assert "no pod" in response.json()["detail"] or response.json()["detail"] == "Not Found"
    assert client.get("/api/curve/p0001/../../leaderboard.db").status_code == 404
    watch = client.app.state.watch  # the id check itself, behind the router and the database lookup
    for bad in ("../p0001", "p0001/..", "p0001\n", ".p0001"):
        with pytest.raises(KeyError, match="no pod"):
            watch.curve(bad)
    # the page and its files, nothing from elsewhere (the only URL in them is the SVG namespace)
    page = client.get("/")
    assert page.status_code == 200 and 'id="leaderboard"' in page.text and "://" not in page.text
    for name in ("dashboard.js", "dashboard.css"):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200
        assert set(re.findall(r"\w+://[^\s\"'`]+", response.text)) <= {"http://www.w3.org/2000/svg"}


def test_the_dashboard_never_writes_to_the_database(run_dir):
    database = TournamentDir(run_dir).database
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    files = set(run_dir.iterdir())
    with TestClient(make_app(run_dir)) as c:
        for _ in range(3):
            assert c.get("/api/state").status_code == 200
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before
    wal = {database.with_name(database.name + suffix) for suffix in ("-wal", "-shm")}  # SQLite's own readers' files
    assert set(run_dir.iterdir()) - files <= wal
    board = open_leaderboard(run_dir)
    reader = Leaderboard(read_only_url(board.url), board.name)  # what the dashboard opens
    with pytest.raises(sa.exc.OperationalError, match="readonly"):
        reader.update_info(elapsed=0.0)
    assert reader.info() == board.info() and reader.entries() == board.entries()
    reader.close()
    board.close()


def test_bad_directories_are_refused_before_the_server_starts_with_the_fix(run_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*podium tournament"):
        make_app(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        serve_dashboard(tmp_path / "missing", port=0)  # refused before it binds or serves
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        make_app(tmp_path / "file.txt")
    with pytest.raises(ValueError, match=r"single pod's run \(podium train\)"):
        make_app(TournamentDir(run_dir).pod("p0001").root)
    with pytest.raises(ValueError, match=rf"holds tournaments, but is none itself: give one of them \({run_dir}\)"):
        make_app(run_dir.parent)
    with pytest.raises(ValueError, match="is not a tournament's run directory"):
        make_app(tmp_path)  # file.txt and nothing of a tournament
    elsewhere = f"sqlite:///{tmp_path / 'nowhere' / 'board.db'}"
    with pytest.raises(DatabaseError, match=f"cannot use the leaderboard database {re.escape(elsewhere)}: "):
        make_app(run_dir, database_url=elsewhere)
    taken = bind("127.0.0.1", 0)
    try:
        with pytest.raises(OSError, match="pass another --port"):
            bind("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    with pytest.raises(OSError, match="check --host"):
        bind("192.0.2.1", 0)  # TEST-NET-1: no machine's own address
    bind("[::1]", 0).close() if socket.has_ipv6 and _has_ipv6_loopback() else None


def _has_ipv6_loopback() -> bool:
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
        return True
    except OSError:
        return False


def test_a_database_of_an_older_podium_is_refused_with_the_fix(run_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    with sa.create_engine(f"sqlite:///{TournamentDir(old).database}").begin() as conn:
        conn.execute(sa.text("ALTER TABLE leaderboard DROP COLUMN score_episodes"))
    with pytest.raises(DatabaseError, match=r"older podium.*lacks score_episodes.*podium leaderboard RUN_DIR"):
        make_app(old)
    open_leaderboard(old).close()  # what the message says: a writable open brings it up to date
    with TestClient(make_app(old)) as c:
        assert c.get("/api/state").json()["leaderboard"]
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    sa.create_engine(empty).connect().close()
    with pytest.raises(DatabaseError, match="holds no podium leaderboard"):
        make_app(run_dir, database_url=empty)


def test_on_loopback_only_loopback_names_are_answered(run_dir):
    from podium.deploy.http import guard

    with TestClient(guard(make_app(run_dir), "127.0.0.1"), base_url="http://127.0.0.1:8050") as c:
        assert c.get("/api/state").status_code == 200
        assert c.get("/api/state", headers={"host": "localhost:8050"}).status_code == 200
        assert c.get("/api/state", headers={"host": "evil.example"}).status_code == 400


def test_a_curve_line_cut_short_is_left_out(tmp_path):
    from podium.logging import read_curve

    writer = CurveWriter(tmp_path / "curve.csv")
    writer.truncate_after(0)  # the header, as a pod starts its curve
    writer.append({"step": 1024, "wall_time": 2.0, "eval_mean": 10.0, "eval_std": 1.0, "eval_episodes": 8})
    with (tmp_path / "curve.csv").open("a") as f:
        f.write("2048,4.0,12")  # a write going on right now
    assert [r["step"] for r in read_curve(tmp_path / "curve.csv")] == [1024]


def test_an_empty_directory_waits_for_a_tournament_and_shows_it_once_it_starts(tmp_path):
    with TestClient(make_app(tmp_path)) as c:
        state = c.get("/api/state").json()
        assert state["tournament"] is None and state["leaderboard"] == [] and state["pool"] == []
        assert "holds no tournament yet" in state["message"] and f"--run-dir {tmp_path}" in state["message"]
        assert c.get("/api/curve/p0001").status_code == 404
        assert not any(tmp_path.iterdir())  # waiting leaves the directory empty, as a new tournament needs it
        tournament(
            run_dir=tmp_path, progress=False, env="CartPole-v1", algos={"ppo": 1}, pod={**POD, "steps": 512},
            backend="inline", steps=512,
        )  # fmt: skip
        state = c.get("/api/state").json()
        assert state["tournament"]["status"] == "finished" and state["champion"] == "p0001"
        assert [e["pod_id"] for e in state["leaderboard"]] == ["p0001"]
        assert c.get("/api/curve/p0001").json()["rows"][-1]["step"] == state["leaderboard"][0]["steps"] > 0


class _Server:
    """The dashboard served by uvicorn in a thread, on 127.0.0.1 and a free port."""

    def __init__(self, run_dir: Path) -> None:
        import uvicorn

        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        config = uvicorn.Config(make_app(run_dir), log_level="warning", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the dashboard server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
        assert not self.thread.is_alive(), "the dashboard server did not stop"


def _start_pod(board: Leaderboard, run_dir: Path, pod_id: str, parent: str, curve: list[tuple[int, float]]) -> None:
    """Record ``pod_id`` as running (a child of ``parent``) with the evaluations ``curve`` (step, mean) so far."""
    parent_pod = board.pod(parent)
    pod_dir = TournamentDir(run_dir).pod(pod_id)
    board.add_pod(
        id=pod_id, number=board.take_pod_number(), parent_id=parent, lineage=parent_pod.lineage, algo="ppo",
        env="CartPole-v1", hparams=parent_pod.hparams, seed=99, spec=parent_pod.spec, status=PodStatus.QUEUED,
        run_dir=str(pod_dir.root), init_checkpoint=parent_pod.checkpoint,
    )  # fmt: skip
    board.update_pod(pod_id, status=PodStatus.RUNNING, started=time.time(), handle="inline")
    pod_dir.root.mkdir(parents=True)
    writer = CurveWriter(pod_dir.curve)
    writer.truncate_after(0)
    for step, mean in curve:
        writer.append({"step": step, "wall_time": step / 1e4, "eval_mean": mean, "eval_std": 3.0, "eval_episodes": 4})


def _finish_pod(board: Leaderboard, run_dir: Path, pod_id: str, mean: float, steps: int) -> None:
    """Hand in ``pod_id``'s result as the updater does: entry, status and history row in one transaction."""
    pod = board.pod(pod_id)
    parent_total = board.pod(pod.parent_id).total_steps or 0
    entry = Entry(
        pod_id=pod_id, parent_id=pod.parent_id, algo="ppo", env="CartPole-v1", hparams=pod.hparams, score_mean=mean,
        score_std=2.0, steps=steps, total_steps=parent_total + steps, wall_time=1.0,
        checkpoint=str(TournamentDir(run_dir).pod(pod_id).best), created=time.time(), score_episodes=100,
    )  # fmt: skip
    with board.transaction():
        rank, _ = board.offer(entry, size=3)
        board.update_pod(
            pod_id, status=PodStatus.FINISHED, ended=time.time(), score_mean=mean, score_std=2.0, steps=steps,
            total_steps=entry.total_steps, wall_time=1.0, checkpoint=entry.checkpoint,
        )  # fmt: skip
        board.record(
            pod_id=pod_id, elapsed=board.info()["elapsed"] + 1.0, outcome="entered", rank=rank, algo="ppo",
            score_mean=mean, score_std=2.0, steps=steps, wall_time=1.0,
        )  # fmt: skip
    assert rank == 1


def test_the_page_shows_the_tournament_and_updates_live_in_a_browser(run_dir):
    """Last in this file: it changes the tournament (claims it, so it runs again, and adds a better pod)."""
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (looked for 'chromium' on PATH and /usr/bin/chromium); install it with: "
                    "bash scripts/ensure-chromium.sh")  # fmt: skip
    from playwright.sync_api import expect, sync_playwright

    board = open_leaderboard(run_dir)
    entries = board.entries()
    board.claim()  # this test plays the orchestrator: the tournament runs again, with a heartbeat
    _start_pod(board, run_dir, "p0100", entries[0].pod_id, [(512, 150.0), (1024, 420.0)])
    server = _Server(run_dir)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.goto(server.url)
                rows = page.locator("#leaderboard tbody tr")
                expect(rows).to_have_count(3)
                for row, entry in zip(rows.all(), entries, strict=True):
                    expect(row).to_contain_text(entry.pod_id)
                    expect(row).to_contain_text(f"{entry.score_mean:.1f} ± {entry.score_std:.1f}")
                expect(page.locator("#status")).to_have_text("running")
                expect(page.locator("#pool tbody tr")).to_contain_text("p0100")
                expect(page.locator("#pool tbody tr")).to_contain_text("420.0 ± 3.0 @ 1,024")
                expect(page.locator("#progress-chart circle")).to_have_count(len(board.history()))
                expect(page.locator("#curve-chart path")).not_to_have_count(0)  # the champion's learning curve
                expect(page.locator("#curve-title")).to_contain_text(f"{entries[0].pod_id} (ppo, the champion)")

                # a better pod reports: the page shows it on top within a poll or two, without a reload
                _finish_pod(board, run_dir, "p0100", mean=entries[0].score_mean + 300.0, steps=1024)
                expect(rows.first).to_contain_text("p0100", timeout=8000)
                expect(rows).to_have_count(3)
                expect(page.locator("#history tbody tr").first).to_contain_text("entered")
                expect(page.locator("#pool tbody tr")).to_have_text("the pool is empty")
                expect(page.locator("#curve-title")).to_contain_text("p0100 (ppo, the champion)")
                # pushed off the board of three (its id may still show in another row's parent column)
                expect(page.locator(f'#leaderboard tr[data-pod="{entries[-1].pod_id}"]')).to_have_count(0)
                page.locator(f'#leaderboard tr[data-pod="{entries[1].pod_id}"]').click()  # another pod's curve
                expect(page.locator("#curve-title")).to_contain_text(f"{entries[1].pod_id} (ppo, finished)")

                # the server goes away: the page keeps the last state and says so
                server.stop()
                expect(page.locator("#banner")).to_contain_text("The last update failed", timeout=8000)
                expect(rows.first).to_contain_text("p0100")
            finally:
                browser.close()
    finally:
        server.stop()
        board.release("finished", stop_reason="steps")
        board.close()
