"""Population-based training with truncation selection (``generator.scheme: truncation``): which member
continues, which copies a top member, when a member is ready, and a small tournament run that way."""

from __future__ import annotations

import dataclasses
import math

import pytest

from podium.rundir import PodDir
from podium.tournament import TournamentConfig
from podium.tournament.generator import (
    Generator,
    effective_hparams,
    member_ranking,
    since_change,
    waiting_members,
)
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


def _inline_tournament(tmp_path, cpus: int, **fields) -> list[PodRecord]:
    """Run a small Pendulum tournament on the inline backend; its pods, oldest first."""
    from podium.tournament import tournament
    from podium.tournament.backends import Resources
    from podium.tournament.backends.inline import InlineBackend
    from podium.tournament.leaderboard import Leaderboard

    fields.setdefault("selection", {"episodes": 0})
    report = tournament(
        run_dir=tmp_path / "run",
        progress=False,
        backend=InlineBackend(Resources(cpus=cpus)),
        env="Pendulum-v1",
        **fields,
    )
    board = Leaderboard(f"sqlite:///{tmp_path / 'run' / 'leaderboard.db'}", report.name)
    try:
        return board.pods()
    finally:
        board.close()


def test_the_bottom_member_copies_the_top_member_and_mutates_by_the_usual_factors():
    config = _config(mutation_prob=1.0)
    pods = _population()
    top = pods[0]
    seeds = set()
    for number in range(8, 40):
        plan = Generator(config).next(number, [], ["sac"] * 3, ["sac"] * 7, pods)
        assert plan.lineage == "p0004" and plan.source == top and plan.parent_id == "p0001"
        assert plan.spec.init_checkpoint == top.checkpoint and plan.spec.preset is False
        assert plan.mutated, "a copy explores"
        assert plan.spec.hparams == {**top.hparams, **{name: new for name, (_, new) in plan.mutated.items()}}
        seeds.add(plan.spec.seed)
        for name, (old, new) in plan.mutated.items():
            low, high = config.mutable("sac")[name]
            assert new in (pytest.approx(old * 0.8), pytest.approx(old * 1.2), low, high)
    assert len(seeds) == 32  # a fresh seed for every round


def test_a_member_outside_the_bottom_continues_its_own_training_unchanged():
    pods = _population()
    pods[3] = _pod(4, -150.0, ended=50.0)  # now second of four: not in the bottom quarter
    plan = Generator(_config()).next(8, [], ["sac"] * 3, ["sac"] * 7, pods)
    assert plan.lineage == "p0004" and plan.source == pods[3] and plan.mutated == {}
    assert plan.spec.init_checkpoint == str(PodDir(pods[3].run_dir).last)  # its own full state: last.pt + replay
    assert plan.spec.hparams == pods[3].hparams and plan.spec.preset is False


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
    # a failed round records no training time (and maybe no steps): it adds nothing
    pods.append(_pod(10, None, lineage="p0004", parent="p0009", status=PodStatus.FAILED, ended=70.0))
    pods[-1] = dataclasses.replace(pods[-1], steps=None, wall_time=None)
    assert since_change(waiting_members(pods)[0]) == (3_000, 2.0)


def test_a_member_is_ready_once_it_has_trained_exactly_ready_steps_and_ready_seconds():
    pods = _population()  # p4 trained 1,000 steps in 2 s
    at = Generator(_config(ready_steps=1_000, ready_seconds=2.0)).next(8, [], ["sac"] * 3, ["sac"] * 7, pods)
    assert at.source == pods[0] and at.mutated  # ready: it copies the top member
    for late in ({"ready_steps": 1_001}, {"ready_seconds": 2.5}):
        assert Generator(_config(**late)).next(8, [], ["sac"] * 3, ["sac"] * 7, pods).source == pods[3]


def test_the_bottom_and_top_fractions_hold_at_least_one_member_of_two_or_more():
    """``truncation: 0.25``: of 8 members the bottom 2 copy, of 2 members the worse one copies, and a lone
    member has no one to copy: it continues."""
    eight = [_pod(n, -100.0 * n, ended=10.0 if n == 7 else 50.0 + n) for n in range(1, 9)]
    plan = Generator(_config()).next(9, [], [], ["sac"] * 8, eight)  # p7, second worst, ended first
    assert plan.lineage == "p0007" and plan.source in eight[:2]
    two = [_pod(2, -200.0, ended=10.0), _pod(1, -100.0, ended=20.0)]
    plan = Generator(_config()).next(3, [], [], ["sac"] * 2, two)
    assert plan.lineage == "p0002" and plan.source == two[1]
    alone = Generator(_config()).next(2, [], [], ["sac"], [_pod(1, -100.0)])
    assert alone.lineage == "p0001" and alone.source.id == "p0001" and alone.mutated == {}
    assert alone.spec.init_checkpoint.endswith("last.pt")


def test_a_lone_member_that_failed_starts_again_fresh():
    config = _config()
    plan = Generator(config).next(2, [], [], ["sac"], [_pod(1, None, status=PodStatus.FAILED)])
    assert (plan.lineage, plan.source, plan.parent, plan.mutated) == ("p0001", None, None, {})
    assert plan.spec.algo == "sac" and plan.spec.init_checkpoint is None and plan.spec.hparams == {}
    assert plan.spec == config.pod_spec("sac", plan.spec.seed)  # a fresh pod, with a seed of its own


def test_members_wait_in_the_order_their_rounds_ended_and_rank_by_their_latest_score():
    first, second = _pod(1, -100.0, ended=30.0), _pod(2, 0.0, ended=40.0)
    pods = [first, second, _pod(3, 0.5, lineage="p0001", parent="p0001", ended=200.0)]
    pods.append(_pod(4, -50.0, lineage="p0002", parent="p0002", ended=100.0))
    assert [m[-1].id for m in waiting_members(pods)] == ["p0004", "p0003"]  # p4 ended first
    assert [m[-1].id for m in member_ranking(pods, "sac")] == ["p0003", "p0004"]
    zero = [_pod(1, 0.0), _pod(2, 0.5), _pod(3, -1.0)]
    assert [m[-1].id for m in member_ranking(zero, "sac")] == ["p0002", "p0001", "p0003"]  # a score of 0 is 0


def test_a_failed_member_copies_a_top_member_and_a_new_slot_starts_a_new_member():
    pods = _population(bottom_status=PodStatus.FAILED, bottom_score=None)
    plan = Generator(_config()).next(8, [], ["sac"] * 3, ["sac"] * 7, pods)
    assert plan.lineage == "p0004" and plan.source in pods[:1]
    running = [p if p.status != PodStatus.FAILED else _pod(4, -400.0, status=PodStatus.RUNNING) for p in pods]
    entry = Entry("p0001", None, "sac", "Pendulum-v1", {"tau": 0.02}, -100.0, 10.0, 1, 1, 1.0, "/c.pt", 0.0, 1)
    fresh = Generator(_config()).next(8, [entry], ["sac"] * 4, ["sac"] * 7, running)  # a new member: fresh
    assert fresh.lineage is None and fresh.source is None and fresh.spec.init_checkpoint is None
    assert fresh.parent is None


def test_the_usual_perturbation_also_drives_the_leaderboard_scheme():
    config = TournamentConfig(**{**BASE, "generator": {"scheme": "leaderboard", "explore": 0.0, "mutation_prob": 1.0}})
    base = effective_hparams(config.pod_spec("sac", 0))
    hparams = {**base, "actor_lr": 1e-3}
    parent = Entry("p0001", None, "sac", "Pendulum-v1", hparams, -150.0, 1.0, 100, 100, 1.0, "/c/p0001.pt", 0.0, 1)
    factors = {
        round(Generator(config).next(n, [parent], [], ["sac"]).spec.hparams["actor_lr"] / 1e-3, 6) for n in range(2, 30)
    }
    assert factors == {0.8, 1.2}


def test_a_mutable_hyperparameter_at_zero_is_resampled_from_its_range():
    """PPO declares ``ent_coef`` mutable in (0, 0.05) with a default of 0: a factor of 0.8 or 1.2 left it at 0
    in every child, so the generator never explored it."""
    config = TournamentConfig(env="CartPole-v1", seconds=10, pod={"seconds": 2}, algos={"ppo": 1},
                              generator={"scheme": "leaderboard", "explore": 0.0, "mutation_prob": 1.0})  # fmt: skip
    base = effective_hparams(config.pod_spec("ppo", 0))
    assert base["ent_coef"] == 0.0
    parent = Entry("p0001", None, "ppo", "CartPole-v1", base, 100.0, 1.0, 100, 100, 1.0, "/c/p0001.pt", 0.0, 1)
    low, high = config.mutable("ppo")["ent_coef"]
    values = [Generator(config).next(n, [parent], [], ["ppo"]).spec.hparams["ent_coef"] for n in range(2, 22)]
    assert all(low <= v <= high for v in values) and len(set(values)) > 10


def test_a_truncation_tournament_continues_and_copies_members(tmp_path):
    pods = _inline_tournament(
        tmp_path,
        cpus=2,
        algos={"sac": 1},
        steps=8 * 1_024,
        pod={"steps": 1_024, "eval_every": 512, "eval_episodes": 4, "tensorboard": False, "eval_mode": "inline"},
        pool={"min": 2, "max": 2},
        generator={"scheme": "truncation", "mutation_prob": 1.0},
        seed=3,
    )
    by_id = {p.id: p for p in pods}
    by_member: dict[str, list[PodRecord]] = {}
    for pod in pods:
        by_member.setdefault(pod.lineage, []).append(pod)
    assert len(pods) >= 8 and len(by_member) == 2  # two members, four rounds or more each
    rounds = [p for p in pods if p.lineage != p.id]
    assert all(p.init_checkpoint and p.parent_id for p in rounds)
    continued = [p for p in rounds if p.init_checkpoint.endswith("last.pt")]
    copied = [p for p in rounds if p.init_checkpoint.endswith("best.pt")]
    assert continued and copied  # the better member goes on, the worse one copies it
    assert all(by_id[p.parent_id].lineage == p.lineage for p in continued)
    assert all(by_id[p.parent_id].lineage != p.lineage for p in copied)
    assert all(p.status == PodStatus.FINISHED and math.isfinite(p.score_mean) for p in pods)


def test_every_algorithm_of_the_mix_gets_a_member_when_slots_are_fewer_than_algorithms():
    """Two slots, ``sac: 2, td3: 1, ppo: 1``: the member that ends first waits while PPO has no member (a member
    per slot would never run it), then the members take turns, the earliest ended first."""
    config = TournamentConfig(
        **{**BASE, "algos": {"sac": 2, "td3": 1, "ppo": 1}, "generator": {"scheme": "truncation"}}
    )
    sac = _pod(1, -300.0, ended=10.0)
    td3 = dataclasses.replace(_pod(2, None, status=PodStatus.RUNNING), algo="td3")
    plan = Generator(config).next(3, [], ["td3"], ["sac", "td3"], [sac, td3])
    assert plan.spec.algo == "ppo" and plan.lineage is None and plan.source is None  # a new member, not sac's
    ppo = dataclasses.replace(_pod(3, None, status=PodStatus.RUNNING), algo="ppo")
    td3 = dataclasses.replace(td3, status=PodStatus.FINISHED, score_mean=-500.0, ended=20.0)
    plan = Generator(config).next(4, [], ["ppo"], ["sac", "td3", "ppo"], [sac, td3, ppo])
    assert plan.spec.algo == "sac" and plan.lineage == "p0001" and plan.source == sac  # sac waited longest
    plan = Generator(config).next(4, [], ["ppo"], ["sac", "td3", "ppo"], [td3, ppo])  # sac's member gone
    assert plan.spec.algo == "sac" and plan.lineage is None  # ... a new one, before td3 goes again


def test_a_losing_algorithms_member_takes_fewer_turns_and_regains_them_within_the_noise():
    """Two slots, ``sac: 1, td3: 1, ppo: 1``: members take turns. Once PPO's best entry trails SAC's beyond
    the noise (``losing_margin`` standard errors of the gap), PPO's member no longer goes next merely because
    it waited longest: it plays ``losing_share`` of its share of the rounds. Within the noise it takes its
    turn as before."""
    config = TournamentConfig(
        **{**BASE, "algos": {"sac": 1, "td3": 1, "ppo": 1}, "generator": {"scheme": "truncation"}}
    )

    def member(number: int, algo: str, ended: float, status: PodStatus = PodStatus.FINISHED) -> PodRecord:
        return dataclasses.replace(_pod(number, -100.0, status=status, ended=ended), algo=algo)

    pods = [member(1, "sac", 40.0), member(2, "td3", 10.0), member(3, "ppo", 30.0)]
    pods.append(dataclasses.replace(pods[1], id="p0004", number=4, status=PodStatus.RUNNING, lineage="p0002"))

    def entry(pod_id: str, algo: str, score: float) -> Entry:
        return Entry(pod_id, None, algo, "Pendulum-v1", {}, score, 10.0, 1, 1, 1.0, "/c.pt", 0.0, score_episodes=100)

    def next_algo(ppo_score: float, started: list[str]) -> str:
        entries = [entry("p0001", "sac", -100.0), entry("p0002", "td3", -101.0), entry("p0003", "ppo", ppo_score)]
        entries.sort(key=lambda e: -e.score_mean)
        plan = Generator(config).next(len(started) + 1, entries, ["td3"], started, pods)
        assert plan.lineage == {"sac": "p0001", "ppo": "p0003"}[plan.spec.algo]  # a member's next round
        return plan.spec.algo

    assert next_algo(-102.0, ["sac", "td3", "ppo"]) == "ppo"  # within the noise: who waited longest goes
    assert next_algo(-300.0, ["sac", "td3", "ppo"]) == "sac"  # losing: the member whose algorithm is owed turns
    assert next_algo(-300.0, ["sac", "td3", "ppo"] + ["sac", "td3"] * 3) == "sac"
    # a quarter of its third (1/9 of the rounds): with 1 of 13 PPO is owed a round, and its member goes again
    assert next_algo(-300.0, ["sac", "td3", "ppo"] + ["sac", "td3"] * 5) == "ppo"


def test_a_one_slot_truncation_tournament_runs_each_algorithm_in_turn(tmp_path):
    pods = _inline_tournament(
        tmp_path,
        cpus=1,
        algos={"sac": 1, "ppo": 1},
        steps=4 * 512,
        pod={"steps": 512, "eval_every": 512, "eval_episodes": 2, "tensorboard": False, "eval_mode": "inline"},
        hparams={"sac": {"learning_starts": 256}, "ppo": {"rollout_size": 256}},
        pool={"min": 1, "max": 1},
        generator={"scheme": "truncation", "losing_share": 1.0},  # the mix fixed (adaptive turns: the test below)
        seed=0,
    )
    assert [p.algo for p in pods] == ["sac", "ppo", "sac", "ppo"]
    assert [p.lineage for p in pods] == ["p0001", "p0002", "p0001", "p0002"]  # two members, taking turns
    assert all(p.status == PodStatus.FINISHED for p in pods)


def test_a_tournament_searches_td3s_noise_type(tmp_path, capsys):
    """``generator.choices`` end to end: fresh pods after the first draw the noise type, pods train with
    what they drew, and the log line says which."""
    pods = _inline_tournament(
        tmp_path,
        cpus=1,
        algos={"td3": 1},
        steps=4 * 512,
        pod={"steps": 512, "eval_every": 512, "eval_episodes": 2, "tensorboard": False, "eval_mode": "inline"},
        hparams={"td3": {"learning_starts": 256}},
        pool={"min": 1, "max": 1},
        generator={"scheme": "leaderboard", "explore": 1.0, "choices": {"td3": {"noise_type": ["gaussian", "ou"]}}},
        seed=0,
    )
    assert len(pods) == 4 and pods[0].hparams["noise_type"] == "gaussian"  # the first: the preset's
    drawn = [p.hparams["noise_type"] for p in pods[1:]]
    assert set(drawn) <= {"gaussian", "ou"} and all(p.status == PodStatus.FINISHED for p in pods)
    out = capsys.readouterr().out
    for pod, value in zip(pods[1:], drawn, strict=True):
        assert f"{pod.id} td3 started fresh (noise_type {value})" in out


def test_a_lone_members_selection_stops_early_only_below_the_target_and_ranked_members_play_in_full(tmp_path):
    """``scheme: truncation`` ranks an algorithm's members by their selection scores, so with two members each
    plays its selection in full (no bar); a lone member is ranked against no other, and its selection may stop
    early only where it is surely below the target (the bar is the target)."""
    from podium.tournament.updater import member_bar

    mix = ["sac", "td3", "ppo"]
    assert member_bar("sac", {"sac": 1, "td3": 1, "ppo": 1}, mix, 2, 200.0) == 200.0  # members take turns
    assert member_bar("sac", {"sac": 1, "td3": 1, "ppo": 1}, mix, 3, None) is None  # no target: no bar
    assert member_bar("sac", {"sac": 1, "td3": 1}, mix, 2, 200.0) is None  # ppo's member is still to come
    assert member_bar("sac", {"sac": 1, "td3": 1, "ppo": 1}, mix, 4, 200.0) is None  # a 4th member may be sac's
    assert member_bar("sac", {"sac": 2, "td3": 1, "ppo": 1}, mix, 4, 200.0) is None  # ranked against another
    assert member_bar("td3", {"sac": 2, "td3": 1, "ppo": 1}, mix, 4, 200.0) == 200.0
    common = {
        "steps": 4 * 512,
        "pod": {"steps": 512, "eval_every": 512, "eval_episodes": 2, "tensorboard": False, "eval_mode": "inline"},
        "hparams": {"sac": {"learning_starts": 256}, "ppo": {"rollout_size": 256}},
        "target": -150.0,
        "seed": 0,
    }
    lone = _inline_tournament(
        tmp_path / "lone",
        cpus=1,
        algos={"sac": 1, "ppo": 1},
        pool={"min": 1, "max": 1},
        generator={"scheme": "truncation", "losing_share": 1.0},
        selection={"episodes": 8},
        **common,
    )
    assert len({p.lineage for p in lone}) == 2
    assert lone[0].spec["select_bar"] is None  # PPO had no member yet: sac's first round plays in full
    assert all(p.spec["select_bar"] == -150.0 for p in lone[1:])
    ranked = _inline_tournament(
        tmp_path / "ranked",
        cpus=2,
        algos={"sac": 1},
        pool={"min": 2, "max": 2},
        generator={"scheme": "truncation"},
        selection={"episodes": 8},
        **{**common, "hparams": {"sac": {"learning_starts": 256}}},
    )
    assert len({p.lineage for p in ranked}) == 2 and all(p.spec["select_bar"] is None for p in ranked)
