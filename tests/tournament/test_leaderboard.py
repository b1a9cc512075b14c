"""The leaderboard database, against SQLite and a real PostgreSQL server (see conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing as mp
import os
import re
import socket
import subprocess
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
from podium.tournament.leaderboard import DatabaseError, Entry, Leaderboard, OwnershipLost, database_url, redact
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
    assert (board.pod("p1").attempts, board.pod("p1").pruned) == (0, False)  # not submitted yet
    board.update_pod("p2", status="finished", score_mean=-180.0)
    assert [p.id for p in board.lineage("p3")] == ["p3", "p2", "p1"]
    assert [p.id for p in board.pods("finished")] == ["p2"]
    board.record(pod_id="p2", elapsed=3.5, outcome="entered", rank=1, algo="td3", score_mean=-180.0, score_std=2.0)
    board.record(pod_id="p1", elapsed=4.0, outcome="failed", algo="td3", error="killed by SIGKILL")
    history = board.history()
    assert [(h["pod_id"], h["outcome"]) for h in history] == [("p2", "entered"), ("p1", "failed")]
    assert history[1]["error"] == "killed by SIGKILL"
    assert set(history[0]) == {"id", "pod_id", "received", "elapsed", "outcome", "rank", "algo", "score_mean"} | {
        "score_std",
        "steps",
        "wall_time",
        "error",
    }  # without the full report
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


@pytest.mark.parametrize("how", ["fail", "lose"])
def test_an_orchestrator_killed_while_recording_a_failure_leaves_the_pod_as_it_was(db_url, tmp_path, how):
    """A failed or lost pod's status and its history row were two transactions: killed between them, the pod
    stayed failed (final, never collected again) or preempted with no history row."""
    board = _board(db_url)
    updater = Updater(board, size=3)
    pod = _pod(board, PodDir(tmp_path / "p0001").root)

    def killed(**kwargs):
        raise KeyboardInterrupt  # the orchestrator dies between the status and the history row

    record, board.record = board.record, killed
    with pytest.raises(KeyboardInterrupt):
        updater.fail(pod, "boom", 1.0) if how == "fail" else updater.lose(pod, "node died", 1.0)
    board.record = record
    assert board.pod(pod.id).status == "running" and board.history() == []


def _stored_report(board: Leaderboard) -> list[dict]:
    """The full reports the history stores (``history()`` leaves them out), oldest first."""
    with board.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT report FROM history WHERE tournament = :t ORDER BY id"), {"t": board.name})
        return [r.report if isinstance(r.report, dict) else json.loads(r.report) for r in rows]


def test_the_updater_records_a_result_on_the_pod_its_entry_and_the_history(db_url, tmp_path):
    """What a finished pod leaves behind: its record (scores, its steps and its lineage's, when it ended, its
    checkpoint), its entry (parent, hyperparameters, steps), and a history row with the full report, where NaN
    and infinities (PostgreSQL's JSON refuses them) are stored as null."""
    board = _board(db_url)
    updater = Updater(board, size=3)
    fields = {"algo": "sac", "env": "Pendulum-v1", "seed": 0, "spec": {}, "status": "running"}
    first = board.add_pod(id="p0001", number=1, parent_id=None, hparams={}, run_dir=str(tmp_path / "p1"), **fields)
    child = board.add_pod(
        id="p0002", number=2, parent_id="p0001", hparams={"tau": 0.01}, run_dir=str(tmp_path / "p2"), **fields
    )
    assert updater.offer(first, dataclasses.replace(_report(PodDir(first.run_dir), -200.0), steps=5_000), 1.0) == 1
    assert board.pod("p0001").total_steps == 5_000  # no parent: its own steps
    run = PodDir(child.run_dir)
    curve = [{"step": 1_000, "eval_mean": -math.inf, "eval_std": 2.5, "eval_episodes": 10}]
    report = dataclasses.replace(
        _report(run, -150.0), wall_time=12.5, last_std=math.nan, time_to_target=math.inf, curve=curve
    )
    before = time.time()
    assert updater.offer(child, report, elapsed=7.0) == 1
    record = board.pod("p0002")
    assert before <= record.ended <= time.time()
    assert (record.status, record.score_mean, record.score_std, record.steps, record.total_steps) == (
        "finished",
        -150.0,
        5.0,
        1_000,
        6_000,  # its parent's 5,000 and its own 1,000
    )
    assert (record.wall_time, record.checkpoint, record.error) == (12.5, str(run.best), None)
    entry = board.entries()[0]
    assert (entry.pod_id, entry.parent_id, entry.hparams, entry.steps, entry.total_steps, entry.wall_time) == (
        "p0002",
        "p0001",
        {"tau": 0.01},
        1_000,
        6_000,
        12.5,
    )
    row = board.history()[-1]
    names = ("pod_id", "elapsed", "outcome", "rank", "algo", "error")
    assert tuple(row[k] for k in names) == ("p0002", 7.0, "entered", 1, "sac", None)
    assert (row["score_mean"], row["score_std"], row["steps"], row["wall_time"]) == (-150.0, 5.0, 1_000, 12.5)
    nulls = {"last_std": None, "time_to_target": None, "curve": [{**curve[0], "eval_mean": None}]}
    assert _stored_report(board)[-1] == {**report.to_dict(), **nulls}


def test_a_failed_pod_is_recorded_and_pruned_and_a_lost_one_keeps_its_checkpoints(db_url, tmp_path):
    """A failed pod is final: its error and steps are recorded and its checkpoints deleted. A lost pod (its
    machine went away) is preempted, to resume from its checkpoints, which stay."""
    board = _board(db_url)
    updater = Updater(board, size=3)
    fields = {"algo": "td3", "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "status": "running"}
    failed = board.add_pod(id="p0001", number=1, parent_id=None, run_dir=str(tmp_path / "p1"), **fields)
    lost = board.add_pod(id="p0002", number=2, parent_id=None, run_dir=str(tmp_path / "p2"), handle="ray:2", **fields)
    for pod in (failed, lost):
        _write_run_files(PodDir(pod.run_dir))
    before = time.time()
    updater.fail(failed, "exit code 1", elapsed=3.0, steps=2_048)
    updater.lose(lost, "node 10.0.0.7 died", elapsed=4.0, steps=1_024)
    record = board.pod("p0001")
    assert (record.status, record.error, record.steps, record.pruned) == ("failed", "exit code 1", 2_048, True)
    assert before <= record.ended <= time.time()
    assert not _checkpoints(PodDir(failed.run_dir)) and PodDir(failed.run_dir).curve.is_file()
    record = board.pod("p0002")
    assert (record.status, record.handle, record.steps, record.error, record.ended) == (
        "preempted",
        None,
        1_024,
        None,
        None,
    )
    assert _checkpoints(PodDir(lost.run_dir)) == ["best.pt", "last.pt", "replay.pt"] and not record.pruned
    assert [(h["pod_id"], h["elapsed"], h["outcome"], h["algo"], h["error"]) for h in board.history()] == [
        ("p0001", 3.0, "failed", "td3", "exit code 1"),
        ("p0002", 4.0, "lost", "td3", "node 10.0.0.7 died"),
    ]


def _write_run_files(run: PodDir) -> None:
    """Stand-ins for what a pod leaves in its run directory: its three checkpoints and its curve."""
    run.checkpoints.mkdir(parents=True, exist_ok=True)
    for path in (run.best, run.last, run.replay, run.curve):
        path.write_text("x")


def _checkpoints(run: PodDir) -> list[str]:
    """The checkpoint files left in ``run``."""
    return sorted(p.name for p in run.checkpoints.glob("*.pt"))


def test_pruning_deletes_the_checkpoints_nothing_needs_any_more(db_url, tmp_path):
    """Kept: an entry's checkpoint, and a checkpoint (best or last) an active pod starts from. Pruned once: the
    rest of the finished and failed pods (their curves stay)."""
    board = _board(db_url)
    updater = Updater(board, size=3)

    def pod(number: int, status: str, init: Path | None = None) -> PodDir:
        run = PodDir(tmp_path / f"p{number}")
        fields = {"algo": "sac", "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "parent_id": None}
        board.add_pod(
            id=f"p{number}",
            number=number,
            status=status,
            run_dir=str(run.root),
            init_checkpoint=init and str(init),
            **fields,
        )
        _write_run_files(run)
        return run

    on_board = pod(1, "finished")
    board.offer(dataclasses.replace(_entry("p1", -100.0), checkpoint=str(on_board.best)), size=3)
    parent = pod(2, "finished")
    pod(3, "running", init=parent.best)  # a child starts from p2's best checkpoint
    continued = pod(4, "finished")
    pod(5, "preempted", init=continued.last)  # the next round of p4's member continues from its last one
    done, failed = pod(6, "finished"), pod(7, "failed")
    assert updater.prune() == ["p6", "p7"]
    assert [p.id for p in board.pods() if p.pruned] == ["p6", "p7"]
    for run in (done, failed):
        assert _checkpoints(run) == [] and run.curve.is_file()
    for run in (on_board, parent, continued):
        assert _checkpoints(run) == ["best.pt", "last.pt", "replay.pt"]
    late = pod(8, "finished")
    assert updater.prune() == ["p8"]  # the pods pruned before are not counted again
    assert _checkpoints(late) == []


def test_with_members_pruning_keeps_each_members_latest_round(db_url, tmp_path):
    """``generator.scheme: truncation``: a member continues from its latest round (or another copies it), so
    that round's checkpoints stay; its earlier rounds go."""
    board = _board(db_url)
    updater = Updater(board, size=3, keep_members=True)
    runs = {}
    for number, lineage in ((1, "p1"), (2, "p2"), (3, "p1"), (4, None), (5, "p1")):
        runs[number] = PodDir(tmp_path / f"p{number}")
        fields = {"algo": "sac", "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "parent_id": None}
        status = "failed" if number == 5 else "finished"  # a failed round is not one to continue from
        board.add_pod(
            id=f"p{number}", number=number, status=status, run_dir=str(runs[number].root), lineage=lineage, **fields
        )
        _write_run_files(runs[number])
    assert updater.prune() == ["p1", "p5"]  # p3 is member p1's latest finished round; p4 (no lineage) its own member
    assert [n for n, run in runs.items() if _checkpoints(run)] == [2, 3, 4]


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


def test_an_owner_taken_over_writes_nothing_more(db_url):
    """An orchestrator whose heartbeat went stale (a suspended laptop, a paused container) and that wakes up after
    another took its tournament over must not write on: not a pod, not an entry, not a heartbeat, not its end."""
    board = _board(db_url)
    board.claim()
    pod = _pod(board, Path("/x"))
    Leaderboard(db_url, board.name).update_info(owner="another-host:1", heartbeat=time.time())  # the new owner
    writes = {
        "heartbeat": lambda: board.heartbeat(99.0),
        "update_pod": lambda: board.update_pod(pod.id, steps=1),
        "take_pod_number": board.take_pod_number,
        "release": lambda: board.release("finished"),
    }
    for name, write in writes.items():
        with pytest.raises(OwnershipLost, match="taken over by another-host:1"):
            write()
        info = board.info()
        assert (info["owner"], info["status"], info["elapsed"]) == ("another-host:1", "running", 0.0), name
    assert board.pod(pod.id).steps != 1
    assert board.claim(force=True)  # taking it back on purpose is a claim, not a write


def test_an_owner_on_this_host_is_judged_by_its_process_not_its_heartbeat(db_url):
    board = _board(db_url)
    me = board.claim()
    assert me == f"{socket.gethostname()}:{os.getpid()}"
    info = board.info()
    assert (info["owner"], info["status"]) == (me, "running") and time.time() - info["heartbeat"] < 60
    other = Leaderboard(db_url, board.name)
    gone = subprocess.Popen(["true"])
    gone.wait()
    other.update_info(owner=f"{socket.gethostname()}:{gone.pid}", heartbeat=time.time())  # fresh, but it died
    assert board.claim() == me
    running = subprocess.Popen(["sleep", "60"])
    try:
        alive = f"{socket.gethostname()}:{running.pid}"
        other.update_info(owner=alive, heartbeat=time.time() - 3600)  # an old heartbeat, but it still runs
        with pytest.raises(DatabaseError, match=f"already being run by process {alive}"):
            board.claim()
        with pytest.raises(subprocess.TimeoutExpired):  # asking whether it is alive sends it no signal
            running.wait(timeout=0.5)
    finally:
        running.kill()
        running.wait()


def test_the_tournament_row_holds_its_config_heartbeat_and_final_status(db_url):
    board = _board(db_url)
    assert board.info()["config"] == {"env": "Pendulum-v1"} and board.info()["owner"] is None
    board.claim()
    before = time.time()
    board.heartbeat(12.5)
    info = board.info()
    assert info["elapsed"] == 12.5 and before <= info["heartbeat"] <= time.time()
    board.release("finished", stop_reason="steps")
    info = board.info()
    assert (info["owner"], info["status"], info["stop_reason"]) == (None, "finished", "steps")
    board.release("interrupted")
    board.claim()  # resumed
    assert board.info()["status"] == "running"
    with pytest.raises(DatabaseError, match=f"no tournament named 'nope' in {re.escape(redact(db_url))}"):
        Leaderboard(db_url, "nope").info()


def test_tournaments_sharing_a_database_never_touch_each_other(db_url):
    """One database may hold several tournaments, with the same pod ids: each reads and writes only its own."""
    mine, theirs = _board(db_url), _board(db_url)
    for board, algo in ((mine, "sac"), (theirs, "td3")):
        fields = {"algo": algo, "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "status": "running"}
        board.add_pod(id="p0001", number=1, parent_id=None, run_dir=f"/runs/{algo}", **fields)
        board.offer(_entry("a", -100.0), size=1)
    theirs.update_info(owner="elsewhere:1", heartbeat=time.time())
    assert (mine.pod("p0001").algo, theirs.pod("p0001").algo) == ("sac", "td3")
    assert mine.offer(_entry("a", -50.0), size=1) == (1, [])  # replaces mine's entry for a
    rank, dropped = mine.offer(_entry("b", -10.0), size=1)  # pushes mine's a off
    assert rank == 1 and [e.pod_id for e in dropped] == ["a"]
    me = mine.claim()
    assert [(e.pod_id, e.score_mean) for e in theirs.entries()] == [("a", -100.0)]
    assert (mine.info()["owner"], theirs.info()["owner"]) == (me, "elsewhere:1")
    assert [(e.pod_id, e.score_mean) for e in mine.entries()] == [("b", -10.0)]


def test_a_database_from_an_older_podium_gets_the_columns_it_lacks(db_url):
    """The ``lineage`` column came with ``scheme: truncation``: opening an older database adds it, and its pods
    read back with no lineage."""
    board = _board(db_url)
    fields = {"algo": "sac", "env": "Pendulum-v1", "hparams": {}, "seed": 0, "spec": {}, "status": "running"}
    board.add_pod(id="p0001", number=1, parent_id=None, run_dir="/runs/p0001", **fields)
    with board.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE pods DROP COLUMN lineage"))
    board.close()
    again = Leaderboard(db_url, board.name)
    assert "lineage" in {c["name"] for c in sa.inspect(again.engine).get_columns("pods")}
    assert again.pod("p0001").lineage is None
    again.update_pod("p0001", lineage="p0001")
    assert again.pod("p0001").lineage == "p0001"


def test_a_taken_name_is_refused(db_url):
    board = _board(db_url)
    message = f"{re.escape(redact(db_url))} already holds a tournament named '{board.name}'; use 'podium tournament"
    with pytest.raises(DatabaseError, match=message + r" resume RUN_DIR' to continue it, or another --run-dir"):
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


def test_database_url_is_the_run_dirs_sqlite_file_or_the_given_url_with_the_psycopg_driver(tmp_path, monkeypatch):
    from podium.rundir import TournamentDir

    monkeypatch.chdir(tmp_path)
    expected = TournamentDir((tmp_path / "run").resolve()).database
    assert database_url(None, "run") == f"sqlite:///{expected}"  # a relative run dir becomes absolute
    assert expected.is_absolute() and expected.parent == tmp_path / "run"
    assert database_url("postgresql://me:pw@h:5433/db", ".") == "postgresql+psycopg://me:pw@h:5433/db"
    assert database_url("postgres://me@h/db", ".") == "postgresql+psycopg://me@h/db"
    assert database_url("postgresql://h/db?x=a://b", ".") == "postgresql+psycopg://h/db?x=a://b"  # split once
    for url in ("sqlite:///elsewhere.db", "postgresql+psycopg://h/db", "mysql://h/db"):
        assert database_url(url, "run") == url  # any other SQLAlchemy URL is used as given
    monkeypatch.setitem(__import__("sys").modules, "psycopg", None)  # the driver is not installed
    with pytest.raises(DatabaseError) as info:
        database_url("postgresql://h/db", ".")
    assert str(info.value) == "a PostgreSQL leaderboard needs the psycopg driver: pip install 'podium[postgres]'"
    assert database_url("sqlite:///x.db", ".") == "sqlite:///x.db"  # which SQLite needs no driver for


def test_engines_wait_for_sqlites_lock_give_up_on_an_unreachable_server_and_check_pooled_connections(
    tmp_path, monkeypatch
):
    made = []
    real = sa.create_engine

    def spy(url, **kwargs):
        made.append((str(url), kwargs))
        return real(url, **kwargs)

    monkeypatch.setattr(sa, "create_engine", spy)
    board = Leaderboard(database_url(None, tmp_path), "t")
    assert board.sqlite and made[-1][1] == {"connect_args": {"timeout": 60}}
    with pytest.raises(DatabaseError):
        Leaderboard(database_url("postgresql://me:secret@127.0.0.1:9/db", "."), "t")
    assert made[-1][1] == {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    with pytest.raises(DatabaseError):  # another server type gets no PostgreSQL-only argument
        Leaderboard("mysql+nodriver://127.0.0.1:9/db", "t")
    assert made[-1][1] == {"connect_args": {}, "pool_pre_ping": True}
    # every SQLite connection: autocommit in the driver (SQLAlchemy's BEGIN IMMEDIATE opens transactions),
    # write-ahead log, normal sync and a 60 s busy timeout
    raw = board.engine.raw_connection()
    try:
        assert raw.driver_connection.isolation_level is None
        cursor = raw.driver_connection.cursor()
        pragmas = [cursor.execute(f"PRAGMA {p}").fetchone()[0] for p in ("journal_mode", "synchronous", "busy_timeout")]
        assert pragmas == ["wal", 1, 60000]
    finally:
        raw.close()
    board.close()


def test_an_unusable_database_is_named_with_the_first_line_of_the_drivers_reason():
    with pytest.raises(DatabaseError) as info:
        Leaderboard("sqlite:////nonexistent/dir/board.db", "t")
    assert str(info.value) == (
        "cannot use the leaderboard database sqlite:////nonexistent/dir/board.db: unable to open database file. "
        "Check that the server runs, the URL (--db) is right and the user may create tables."
    )
    with pytest.raises(DatabaseError) as info:
        Leaderboard(database_url("postgresql://me:secret@127.0.0.1:9/db", "."), "t")
    message = str(info.value)
    head = "cannot use the leaderboard database postgresql+psycopg://me:***@127.0.0.1:9/db: "
    assert message.startswith(head) and "\n" not in message and "None" not in message
    reason = message[len(head) : message.index(". Check that the server runs")]
    assert "127.0.0.1" in reason and reason == reason.strip() and reason
