"""The leaderboard database, against SQLite and a real PostgreSQL server (see conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import time
import uuid
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings

from podium.pod import PodReport
from podium.rundir import PodDir
from podium.store import save_checkpoint
from podium.tournament.leaderboard import DatabaseError, Entry, Leaderboard, database_url, redact
from podium.tournament.updater import Updater, checkpoint_holds


def _entry(pod_id: str, mean: float, std: float = 1.0, parent: str | None = None, algo: str = "sac") -> Entry:
    return Entry(
        pod_id=pod_id,
        parent_id=parent,
        algo=algo,
        env="Pendulum-v1",
        hparams={"actor_lr": 1e-3},
        score_mean=mean,
        score_std=std,
        steps=1000,
        total_steps=1000,
        wall_time=1.0,
        checkpoint=f"/ckpt/{pod_id}.pt",
        created=time.time(),
    )


def _board(url: str) -> Leaderboard:
    board = Leaderboard(url, f"t-{uuid.uuid4().hex[:8]}")
    board.create({"env": "Pendulum-v1"})
    return board


def test_top_k_ranking_ties_and_entries_that_fall_off(db_url):
    board = _board(db_url)
    assert board.offer(_entry("a", -300.0), size=3) == (1, [])
    assert board.offer(_entry("b", -200.0), size=3) == (1, [])
    assert board.offer(_entry("c", -200.0, std=0.5), size=3)[0] == 1  # same mean, lower std ranks higher
    rank, dropped = board.offer(_entry("d", -250.0), size=3)
    assert rank == 3 and [e.pod_id for e in dropped] == ["a"]
    rank, dropped = board.offer(_entry("e", -900.0), size=3)
    assert rank is None and dropped == []
    entries = board.entries()
    assert [(e.rank, e.pod_id) for e in entries] == [(1, "c"), (2, "b"), (3, "d")]
    assert entries[0].hparams == {"actor_lr": 1e-3} and entries[0].checkpoint == "/ckpt/c.pt"


def test_history_pods_and_lineage(db_url):
    board = _board(db_url)
    for number, (pod_id, parent) in enumerate([("p1", None), ("p2", "p1"), ("p3", "p2")], start=1):
        board.add_pod(
            id=pod_id,
            number=number,
            parent_id=parent,
            algo="td3",
            env="Pendulum-v1",
            hparams={"tau": 0.05},
            seed=number,
            spec={},
            status="running",
            run_dir=f"/runs/{pod_id}",
        )
    board.update_pod("p2", status="finished", score_mean=-180.0)
    assert [p.id for p in board.lineage("p3")] == ["p3", "p2", "p1"]
    assert [p.id for p in board.pods("finished")] == ["p2"]
    board.record(pod_id="p2", elapsed=3.5, outcome="entered", rank=1, algo="td3", score_mean=-180.0, score_std=2.0)
    board.record(pod_id="p1", elapsed=4.0, outcome="failed", algo="td3", error="killed by SIGKILL")
    history = board.history()
    assert [(h["pod_id"], h["outcome"]) for h in history] == [("p2", "entered"), ("p1", "failed")]
    assert history[1]["error"] == "killed by SIGKILL"
    assert [board.take_pod_number() for _ in range(3)] == [1, 2, 3]


def test_a_worse_reoffer_keeps_the_better_entry(db_url):
    """A pod id is one entry holding the pod's best result: a worse (or equal) report leaves it as it is."""
    board = _board(db_url)
    board.offer(_entry("a", -150.0), size=3)
    board.offer(_entry("b", -200.0), size=3)
    assert board.offer(_entry("a", -300.0), size=3) == (None, [])
    assert board.offer(_entry("a", -150.0), size=3) == (None, [])  # the same result collected twice
    assert board.offer(_entry("a", -150.0, std=2.0), size=3) == (None, [])  # same mean, wider spread
    assert [(e.pod_id, e.score_mean, e.score_std) for e in board.entries()] == [("a", -150.0, 1.0), ("b", -200.0, 1.0)]


def test_a_better_reoffer_replaces_the_pods_entry(db_url):
    board = _board(db_url)
    board.offer(_entry("a", -300.0), size=2)
    board.offer(_entry("b", -200.0), size=2)
    assert board.offer(_entry("a", -100.0), size=2) == (1, [])
    assert board.offer(_entry("b", -200.0, std=0.5), size=2) == (2, [])  # same mean, lower std is better
    assert [(e.pod_id, e.score_mean, e.score_std) for e in board.entries()] == [("a", -100.0, 1.0), ("b", -200.0, 0.5)]
    assert _rows(board) == [("a", -100.0), ("b", -200.0)]  # one row per pod


def test_a_worse_reoffer_replaces_an_entry_whose_checkpoint_no_longer_holds_it(db_url):
    """If the earlier result's checkpoint was overwritten, the new result competes on its own merit."""
    board = _board(db_url)
    for pod_id, mean in [("a", -100.0), ("b", -200.0), ("c", -300.0)]:
        board.offer(_entry(pod_id, mean), size=3)
    asked = []

    def overwritten(earlier: Entry) -> bool:
        asked.append((earlier.pod_id, earlier.score_mean))
        return False

    assert board.offer(_entry("a", -250.0), size=3, still_holds=overwritten) == (2, [])
    assert asked == [("a", -100.0)]
    assert _rows(board) == [("a", -250.0), ("b", -200.0), ("c", -300.0)]
    # a result that does not make the cut takes the pod's stale entry off the board with it
    rank, dropped = board.offer(_entry("a", -900.0), size=2, still_holds=overwritten)
    assert rank is None and [(e.pod_id, e.score_mean) for e in dropped] == [("a", -250.0)]
    assert _rows(board) == [("b", -200.0), ("c", -300.0)]
    assert board.offer(_entry("b", -50.0), size=3, still_holds=overwritten) == (1, [])  # better: not asked
    assert asked == [("a", -100.0), ("a", -250.0)]


def _pod(board: Leaderboard, root: Path):
    """A running pod ``p0001`` with its run directory at ``root``."""
    fields = {"algo": "sac", "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "status": "running"}
    return board.add_pod(id="p0001", number=1, parent_id=None, run_dir=str(root), **fields)


def _report(run: PodDir, mean: float) -> PodReport:
    return PodReport(
        **{"score_mean": mean, "score_std": 5.0, "last_mean": mean, "last_std": 5.0, "steps": 1000},
        **{"wall_time": 1.0, "reached_target": False, "time_to_target": None, "steps_to_target": None},
        **{"train_time_to_target": None, "stop_reason": "steps", "eval_time": 0.1, "run_dir": str(run.root)},
        checkpoint=str(run.best),
    )


def _save_best(run: PodDir, mean: float) -> None:
    """What a pod writes when a snapshot beats its best: the policy, with the score it earned."""
    save_checkpoint(run.best, {"counters": {"best_mean": mean, "best_std": 5.0}})


def test_a_resumed_pod_keeps_its_best_entry_until_its_checkpoint_is_overwritten(db_url, tmp_path):
    """Through the updater, with real checkpoint files: a pod that reports a worse result again keeps its entry
    while its best.pt still holds the better policy, and gets the worse result once best.pt was overwritten."""
    board = _board(db_url)
    updater = Updater(board, size=3)
    run = PodDir(tmp_path / "p0001")
    pod = _pod(board, run.root)
    _save_best(run, -150.0)
    assert updater.offer(pod, _report(run, -150.0), elapsed=1.0) == 1
    # resumed from a last.pt older than its best snapshot: it reports a worse best, best.pt is untouched
    assert updater.offer(pod, _report(run, -300.0), elapsed=2.0) == 1
    assert [(e.pod_id, e.score_mean) for e in board.entries()] == [("p0001", -150.0)] and run.best.is_file()
    # restarted from scratch: best.pt now holds the weaker policy, so the entry must say so
    _save_best(run, -300.0)
    assert updater.offer(pod, _report(run, -300.0), elapsed=3.0) == 1
    assert [(e.pod_id, e.score_mean) for e in board.entries()] == [("p0001", -300.0)]
    assert [(h["outcome"], h["rank"], h["score_mean"]) for h in board.history()] == [
        ("entered", 1, -150.0),
        ("kept", 1, -300.0),
        ("entered", 1, -300.0),
    ]
    assert not checkpoint_holds(dataclasses.replace(board.entries()[0], checkpoint=str(tmp_path / "gone.pt")))


def test_an_orchestrator_killed_while_offering_leaves_the_pod_to_be_collected_again(db_url, tmp_path, monkeypatch):
    """The pod is marked finished only after its offer: killed in the offer, it stays "running" (the next
    orchestrator reads its report again), and a result collected twice changes nothing."""
    board = _board(db_url)
    updater = Updater(board, size=3)
    run = PodDir(tmp_path / "p0001")
    pod = _pod(board, run.root)
    _save_best(run, -150.0)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the orchestrator dies inside the offer

    with monkeypatch.context() as patch:
        patch.setattr(board, "offer", killed)
        with pytest.raises(KeyboardInterrupt):
            updater.offer(pod, _report(run, -150.0), elapsed=1.0)
    assert board.pod(pod.id).status == "running" and board.entries() == []
    assert updater.offer(pod, _report(run, -150.0), elapsed=2.0) == 1
    assert updater.offer(pod, _report(run, -150.0), elapsed=3.0) == 1  # collected twice
    assert board.pod(pod.id).status == "finished"
    assert [(e.pod_id, e.score_mean) for e in board.entries()] == [("p0001", -150.0)]
    assert [h["outcome"] for h in board.history()] == ["entered", "kept"]


def _rows(board: Leaderboard) -> list[tuple[str, float]]:
    """The leaderboard table as stored (not through the sorted accessor), by pod id."""
    with board.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT pod_id, score_mean FROM leaderboard WHERE tournament = :t ORDER BY pod_id"),
            {"t": board.name},
        )
        return [(r.pod_id, r.score_mean) for r in rows]


def _history_rows(board: Leaderboard) -> list[tuple[str, float]]:
    with board.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT pod_id, score_mean FROM history WHERE tournament = :t"), {"t": board.name})
        return sorted((r.pod_id, r.score_mean) for r in rows)


def _offer_many(start, url: str, name: str, offers: list[tuple[str, float]], size: int, out: str) -> None:
    """One process: offer each (pod id, score), record it in the history like the updater, log what happened."""
    board = Leaderboard(url, name)
    log = []
    start.wait()
    for pod_id, score in offers:
        rank, dropped = board.offer(_entry(pod_id, score), size=size)
        board.record(
            pod_id=pod_id, elapsed=0.0, outcome="entered" if rank else "rejected", algo="sac", score_mean=score
        )
        log.append({"pod": pod_id, "rank": rank, "dropped": [(e.pod_id, e.score_mean) for e in dropped]})
    board.close()
    Path(out).write_text(json.dumps(log))


def _run_processes(target, args: list[tuple]) -> None:
    """Run ``target(start, *a)`` for each ``a`` in its own process (forked: no second import of torch); they all
    pass ``start.wait()`` together."""
    ctx = mp.get_context("fork")
    start = ctx.Barrier(len(args))
    procs = [ctx.Process(target=target, args=(start, *a)) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def test_concurrent_offers_to_a_small_board_keep_exactly_the_best(db_url, tmp_path):
    """Four processes offer 120 results (some pods from several processes) to a board of 3: the stored rows
    are exactly the 3 best pods at their best scores, every eviction was of a worse entry, the history is
    complete."""
    board, size, workers = _board(db_url), 3, 4
    rng = np.random.default_rng(0)
    scores = rng.permutation(120).astype(float) - 500.0  # distinct
    offers = [
        [(f"s{i % 5}" if i % 4 == 0 else f"w{w}-{i}", float(scores[w * 30 + i])) for i in range(30)]
        for w in range(workers)
    ]
    logs = [tmp_path / f"log{w}.json" for w in range(workers)]
    _run_processes(_offer_many, [(db_url, board.name, offers[w], size, str(logs[w])) for w in range(workers)])
    best: dict[str, float] = {}
    for pod_id, score in (o for w in offers for o in w):
        best[pod_id] = max(score, best.get(pod_id, -math.inf))
    top = sorted(best.items(), key=lambda kv: -kv[1])[:size]
    assert _rows(board) == sorted(top)
    assert _history_rows(board) == sorted(o for w in offers for o in w)
    log = [r for path in logs for r in json.loads(path.read_text())]
    cut = min(score for _, score in top)
    dropped = [d for r in log for d in r["dropped"]]
    assert dropped and all(score < cut for _, score in dropped)  # nothing better than the final cut was evicted
    entered = {r["pod"] for r in log if r["rank"] is not None}
    assert entered - {pod for pod, _ in top} <= {pod for pod, _ in dropped}  # every eviction was reported


def _take_numbers(start, url: str, name: str, count: int, out: str) -> None:
    board = Leaderboard(url, name)
    start.wait()
    Path(out).write_text(json.dumps([board.take_pod_number() for _ in range(count)]))
    board.close()


def test_concurrent_processes_get_unique_pod_numbers(db_url, tmp_path):
    board = _board(db_url)
    logs = [tmp_path / f"numbers{w}.json" for w in range(4)]
    _run_processes(_take_numbers, [(db_url, board.name, 25, str(path)) for path in logs])
    numbers = [n for path in logs for n in json.loads(path.read_text())]
    assert sorted(numbers) == list(range(1, 101))
    assert board.take_pod_number() == 101


def _model_offer(model: dict[str, tuple], pod_id: str, key: tuple, size: int) -> tuple[int | None, set[str]]:
    """The rule in plain Python: ``model`` maps pod id -> (-mean, std, created); returns (rank, dropped pods)."""
    if pod_id in model and model[pod_id][:2] <= key[:2]:
        return None, set()
    ranked = sorted([(k, p) for p, k in model.items() if p != pod_id] + [(key, pod_id)])
    kept = ranked[:size]
    rank = next((i for i, (_, p) in enumerate(kept, start=1) if p == pod_id), None)
    dropped = {p for _, p in ranked[size:] if p != pod_id}
    if rank is None and pod_id in model:
        dropped.add(pod_id)
    model.clear()
    model.update({p: k for k, p in kept})
    return rank, dropped


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.integers(1, 4),
    offers=st.lists(
        st.tuples(st.sampled_from("abcdef"), st.integers(-5, 5), st.sampled_from([0.5, 1.0])), min_size=1, max_size=20
    ),
)
def test_the_board_is_the_top_k_of_one_entry_per_pod_for_any_offer_sequence(db_url, size, offers):
    """Random offers (ties and re-offers included) against the rule written out in plain Python."""
    board = Leaderboard(db_url, f"t-{uuid.uuid4().hex[:8]}")
    board.create({})
    model: dict[str, tuple] = {}
    try:
        for created, (pod_id, mean, std) in enumerate(offers):
            entry = _entry(pod_id, float(mean), std=std)
            entry = dataclasses.replace(entry, created=float(created))
            rank, dropped = board.offer(entry, size=size)
            want_rank, want_dropped = _model_offer(model, pod_id, (-float(mean), std, float(created)), size)
            assert (rank, {e.pod_id for e in dropped}) == (want_rank, want_dropped)
            stored = _rows(board)
            assert len(stored) <= size and len({p for p, _ in stored}) == len(stored)
            assert stored == sorted((p, -k[0]) for p, k in model.items())
        assert [e.pod_id for e in board.entries()] == [p for _, p in sorted((k, p) for p, k in model.items())]
    finally:
        board.close()


def test_a_second_orchestrator_cannot_claim_a_running_tournament(db_url):
    board = _board(db_url)
    owner = board.claim()
    other = Leaderboard(db_url, board.name)
    other.update_info(owner="another-host:1", heartbeat=time.time())
    with pytest.raises(DatabaseError, match="already being run by process another-host:1"):
        board.claim()
    assert board.claim(force=True) == owner
    other.update_info(owner="another-host:1", heartbeat=time.time() - 3600)  # stale heartbeat: may take over
    assert board.claim() == owner


def test_a_taken_name_is_refused(db_url):
    board = _board(db_url)
    with pytest.raises(DatabaseError, match="already holds a tournament"):
        Leaderboard(db_url, board.name).create({})


def test_an_unreachable_database_is_a_clear_error_naming_it_without_the_password():
    with pytest.raises(
        DatabaseError, match=r"cannot use the leaderboard database .*127\.0\.0\.1:9.*server runs"
    ) as info:
        Leaderboard(database_url("postgresql://me:secret@127.0.0.1:9/db", "."), "t")
    assert "secret" not in str(info.value)
    with pytest.raises(DatabaseError, match="cannot use the leaderboard database"):
        Leaderboard("sqlite:////nonexistent/dir/board.db", "t")
    assert redact("postgresql://me:secret@h/db") == "postgresql://me:***@h/db"
