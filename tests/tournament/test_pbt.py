"""Population-based training with truncation selection (``generator.scheme: truncation``): which member
continues, which copies a top member, when a member is ready, and a small tournament run that way."""

from __future__ import annotations

import math

import pytest

from podium.rundir import PodDir
from podium.tournament import TournamentConfig
from podium.tournament.generator import Generator, effective_hparams, since_change, waiting_members
from podium.tournament.leaderboard import Entry, PodRecord
from podium.tournament.states import PodStatus

BASE = {"env": "Pendulum-v1", "seconds": 10, "pod": {"seconds": 2}, "algos": {"sac": 1}}


def _config(**generator) -> TournamentConfig:
    return TournamentConfig(**{**BASE, "generator": {"scheme": "truncation", **generator}})


def _pod(number: int, score: float | None, *, lineage: str | None = None, parent: str | None = None,
         status: PodStatus = PodStatus.FINISHED, hparams: dict | None = None, steps: int = 1_000,
         ended: float | None = None) -> PodRecord:  # fmt: skip
    pod_id = f"p{number:04d}"
    return PodRecord(
        id=pod_id, number=number, parent_id=parent, algo="sac", env="Pendulum-v1", hparams=hparams or {"tau": 0.02},
        seed=number, spec={}, status=status, run_dir=f"/runs/t/pods/{pod_id}", init_checkpoint=None, handle=None,
        attempts=1, created=float(number), started=float(number), ended=ended if ended is not None else 100.0 + number,
        error=None, score_mean=score, score_std=10.0, steps=steps, total_steps=steps, wall_time=2.0,
        checkpoint=f"/runs/t/pods/{pod_id}/checkpoints/best.pt" if score is not None else None, pruned=False,
        lineage=lineage or pod_id,
    )  # fmt: skip


def _population(bottom_status: PodStatus = PodStatus.FINISHED, bottom_score: float | None = -400.0) -> list[PodRecord]:
    """Four sac members p1..p4 (scores -100..-400); p4, the worst, ended first and waits for its next round;
    the others are running their second round."""
    pods = [_pod(1, -100.0), _pod(2, -200.0), _pod(3, -300.0)]
    pods.append(_pod(4, bottom_score, status=bottom_status, ended=50.0))
    for n, member in ((5, 1), (6, 2), (7, 3)):
        pods.append(_pod(n, None, lineage=f"p{member:04d}", parent=f"p{member:04d}", status=PodStatus.RUNNING))
    return pods


def test_the_bottom_member_copies_the_top_member_and_mutates_by_the_usual_factors():
    config = _config(mutation_prob=1.0)
    pods = _population()
    top = pods[0]
    for number in range(8, 40):
        plan = Generator(config).next(number, [], ["sac"] * 3, ["sac"] * 7, pods)
        assert plan.lineage == "p0004" and plan.source == top and plan.parent_id == "p0001"
        assert plan.spec.init_checkpoint == top.checkpoint and plan.spec.preset is False
        assert plan.mutated, "a copy explores"
        for name, (old, new) in plan.mutated.items():
            low, high = config.mutable("sac")[name]
            assert new in (pytest.approx(old * 0.8), pytest.approx(old * 1.2), low, high)


def test_a_member_outside_the_bottom_continues_its_own_training_unchanged():
    pods = _population()
    pods[3] = _pod(4, -150.0, ended=50.0)  # now second of four: not in the bottom quarter
    plan = Generator(_config()).next(8, [], ["sac"] * 3, ["sac"] * 7, pods)
    assert plan.lineage == "p0004" and plan.source == pods[3] and plan.mutated == {}
    assert plan.spec.init_checkpoint == str(PodDir(pods[3].run_dir).last)  # its own full state: last.pt + replay
    assert plan.spec.hparams == pods[3].hparams


def test_a_member_that_is_not_ready_continues_even_at_the_bottom():
    pods = _population()
    plan = Generator(_config(ready_steps=5_000)).next(8, [], ["sac"] * 3, ["sac"] * 7, pods)
    assert plan.source == pods[3] and plan.mutated == {}
    # two rounds of 3,000 steps since it started: ready
    pods = [*_population()[:3], _pod(4, -350.0, steps=3_000, ended=10.0), *_population()[4:]]
    pods.append(_pod(8, -400.0, lineage="p0004", parent="p0004", steps=3_000, ended=50.0))
    assert since_change(waiting_members(pods)[0]) == (6_000, 4.0)
    plan = Generator(_config(ready_steps=5_000)).next(9, [], ["sac"] * 3, ["sac"] * 8, pods)
    assert plan.lineage == "p0004" and plan.source == pods[0]
    # ... and after that copy, the count starts again: the copy itself is not ready yet
    pods.append(_pod(9, -390.0, lineage="p0004", parent="p0001", steps=3_000, ended=60.0))
    assert since_change(waiting_members(pods)[0]) == (3_000, 2.0)


def test_a_failed_member_copies_a_top_member_and_a_new_slot_starts_a_new_member():
    pods = _population(bottom_status=PodStatus.FAILED, bottom_score=None)
    plan = Generator(_config()).next(8, [], ["sac"] * 3, ["sac"] * 7, pods)
    assert plan.lineage == "p0004" and plan.source in pods[:1]
    running = [p if p.status != PodStatus.FAILED else _pod(4, -400.0, status=PodStatus.RUNNING) for p in pods]
    fresh = Generator(_config()).next(8, [], ["sac"] * 4, ["sac"] * 7, running)
    assert fresh.lineage is None and fresh.source is None and fresh.spec.init_checkpoint is None


def test_the_usual_perturbation_also_drives_the_leaderboard_scheme():
    config = TournamentConfig(**{**BASE, "generator": {"explore": 0.0, "mutation_prob": 1.0}})
    base = effective_hparams(config.pod_spec("sac", 0))
    hparams = {**base, "actor_lr": 1e-3}
    parent = Entry("p0001", None, "sac", "Pendulum-v1", hparams, -150.0, 1.0, 100, 100, 1.0, "/c/p0001.pt", 0.0, 1)
    factors = {
        round(Generator(config).next(n, [parent], [], ["sac"]).spec.hparams["actor_lr"] / 1e-3, 6) for n in range(2, 30)
    }
    assert factors == {0.8, 1.2}


def test_a_truncation_tournament_continues_and_copies_members(tmp_path):
    from podium.tournament import tournament
    from podium.tournament.backends import Resources
    from podium.tournament.backends.inline import InlineBackend
    from podium.tournament.leaderboard import Leaderboard

    report = tournament(
        run_dir=tmp_path / "run",
        progress=False,
        backend=InlineBackend(Resources(cpus=2)),
        env="Pendulum-v1",
        algos={"sac": 1},
        steps=8 * 1_024,
        pod={"steps": 1_024, "eval_every": 512, "eval_episodes": 4, "tensorboard": False, "eval_mode": "inline"},
        selection={"episodes": 0},
        pool={"min": 2, "max": 2},
        generator={"scheme": "truncation", "mutation_prob": 1.0},
        seed=3,
    )
    board = Leaderboard(f"sqlite:///{tmp_path / 'run' / 'leaderboard.db'}", report.name)
    pods = board.pods()
    by_member: dict[str, list[PodRecord]] = {}
    for pod in pods:
        by_member.setdefault(pod.lineage, []).append(pod)
    assert len(pods) >= 8 and len(by_member) == 2  # two members, four rounds or more each
    rounds = [p for p in pods if p.lineage != p.id]
    assert all(p.init_checkpoint and p.parent_id for p in rounds)
    continued = [p for p in rounds if p.init_checkpoint.endswith("last.pt")]
    copied = [p for p in rounds if p.init_checkpoint.endswith("best.pt")]
    assert continued and copied  # the better member goes on, the worse one copies it
    assert all(board.pod(p.parent_id).lineage == p.lineage for p in continued)
    assert all(board.pod(p.parent_id).lineage != p.lineage for p in copied)
    assert all(p.status == PodStatus.FINISHED and math.isfinite(p.score_mean) for p in pods)
    board.close()
