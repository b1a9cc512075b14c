"""The leaderboard database, against SQLite and a real PostgreSQL server (see conftest.py)."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid

import pytest

from podium.tournament.leaderboard import DatabaseError, Entry, Leaderboard, database_url, redact


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


def _offer_many(url: str, name: str, worker: int, count: int) -> None:
    board = Leaderboard(url, name)
    for i in range(count):
        board.offer(_entry(f"w{worker}-{i}", float(worker * 1000 + i)), size=1000)
    board.close()


def test_concurrent_offers_from_several_processes_lose_nothing(db_url):
    board = _board(db_url)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_offer_many, args=(db_url, board.name, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    entries = board.entries()
    assert len(entries) == 100 and len({e.pod_id for e in entries}) == 100
    assert [e.score_mean for e in entries] == sorted((e.score_mean for e in entries), reverse=True)


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
