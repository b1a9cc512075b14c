"""The tournament's decisions (:func:`podium.tournament.scheduler.decide`) on made-up database states — no
process, no file, no clock — and the pod states' allowed transitions, enforced by the leaderboard."""

from __future__ import annotations

import uuid

import pytest

from podium.tournament.backends import Resources
from podium.tournament.leaderboard import Leaderboard, PodRecord
from podium.tournament.scheduler import (
    MIN_ROUND_SECONDS,
    Decisions,
    Rules,
    State,
    decide,
    overhead,
    pool_size,
    reaches,
)
from podium.tournament.states import (
    ACTIVE,
    FINAL,
    TRANSITIONS,
    IllegalTransition,
    PodStatus,
    StopReason,
    check_transition,
)

RULES = Rules(seconds=None, steps=None, target=None, max_failures=3, pool_min=1, pool_max=4, cpus_per_pod=1.0)


def pod(number: int, status: str, started: float | None = None, steps: int | None = None, **fields) -> PodRecord:
    values = {
        "id": f"p{number:04d}",
        "number": number,
        "parent_id": None,
        "algo": "ppo",
        "env": "CartPole-v1",
        "hparams": {},
        "seed": number,
        "spec": {},
        "status": PodStatus(status),
        "run_dir": f"/nowhere/p{number:04d}",
        "init_checkpoint": None,
        "handle": None,
        "attempts": 1,
        "created": float(number),
        "started": started if started is not None else float(number),
        "ended": None,
        "error": None,
        "score_mean": None,
        "score_std": None,
        "steps": steps,
        "total_steps": None,
        "wall_time": None,
        "checkpoint": None,
        "pruned": False,
    }
    return PodRecord(**{**values, **fields})


def state(
    pods=(), cpus: float = 4, gpus: float = 0, elapsed: float = 10.0, reached=False, failures=0, **rules
) -> State:
    return State(
        rules=Rules(**{**RULES.__dict__, **rules}),
        pods=tuple(pods),
        reached=reached,
        resources=Resources(cpus, gpus),
        elapsed=elapsed,
        failures_in_row=failures,
    )


# ------------------------------------------------------------------------------------------ pool size
@pytest.mark.parametrize(
    ("cpus", "gpus", "rules", "size"),
    [
        (4, 0, {}, 4),
        (64, 0, {}, 4),  # max wins
        (0.5, 0, {"pool_min": 2}, 2),  # min wins on a small machine
        (7, 0, {"cpus_per_pod": 2}, 3),
        (16, 1, {"gpus_per_pod": 0.5}, 2),  # two pods share the one GPU
        (16, 1, {"gpus_per_pod": 0.25, "pool_max": 8}, 4),
        (2.9999999999, 0, {}, 3),  # float noise from a cluster's sum of resources
    ],
)
def test_the_pool_is_what_the_resources_hold_within_min_and_max(cpus, gpus, rules, size):
    r = Rules(**{**RULES.__dict__, **rules})
    assert pool_size(r, Resources(cpus, gpus)) == size
    assert decide(state(cpus=cpus, gpus=gpus, **rules)).pool_size == size


# ------------------------------------------------------------------------------------------ growing
def test_an_empty_tournament_starts_a_pod_per_slot():
    d = decide(state(cpus=3))
    assert d == Decisions(pool_size=3, start=3)


def test_preempted_pods_resume_before_new_ones_start_oldest_first():
    pods = [pod(1, "running"), pod(2, "preempted"), pod(3, "finished", steps=10), pod(4, "preempted")]
    assert decide(state(pods, cpus=4)) == Decisions(4, resume=("p0002", "p0004"), start=1)
    assert decide(state(pods, cpus=2)) == Decisions(2, resume=("p0002",))


def test_failed_and_finished_pods_are_replaced_by_new_ones():
    pods = [pod(1, "failed", steps=5), pod(2, "finished", steps=9), pod(3, "running")]
    assert decide(state(pods, cpus=2)).start == 1


def test_a_full_pool_starts_nothing():
    pods = [pod(n, "running") for n in (1, 2)]
    assert decide(state(pods, cpus=2)) == Decisions(2)


# ------------------------------------------------------------------------------------------ shrinking
def test_the_youngest_running_pods_are_preempted_when_the_pool_shrinks():
    pods = [pod(1, "running", started=100.0), pod(2, "running", started=300.0), pod(3, "running", started=200.0)]
    d = decide(state(pods, cpus=1))
    assert d.pool_size == 1 and d.preempt == ("p0002", "p0003") and d.resume == () and d.start == 0


def test_pods_preempted_now_are_not_resumed_in_the_same_decision():
    pods = [pod(1, "running", started=1.0), pod(2, "running", started=2.0), pod(3, "preempted")]
    d = decide(state(pods, cpus=1))
    assert d.preempt == ("p0002",) and d.resume == ()


def test_lost_pods_resume_when_a_node_brings_room_back():
    """A pod whose node died is preempted (lost); the pool shrank with the node and grows when a node joins."""
    pods = [pod(1, "running"), pod(2, "preempted"), pod(3, "preempted")]
    assert decide(state(pods, cpus=1)) == Decisions(1)
    assert decide(state(pods, cpus=3)) == Decisions(3, resume=("p0002", "p0003"))


# ------------------------------------------------------------------------------------------ budgets
@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"target": 100.0, "reached": True}, StopReason.TARGET),
        ({"max_failures": 3, "failures": 3}, StopReason.FAILURES),
        ({"seconds": 60.0, "elapsed": 60.0}, StopReason.SECONDS),
        ({"steps": 30}, StopReason.STEPS),  # 10 finished + 20 failed/preempted
        ({"target": 100.0, "reached": True, "seconds": 5.0, "elapsed": 60.0}, StopReason.TARGET),  # target first
        ({"failures": 3, "seconds": 5.0, "elapsed": 60.0}, StopReason.FAILURES),
    ],
)
def test_stop_reasons(kwargs, reason):
    pods = [pod(1, "finished", steps=10), pod(2, "failed", steps=5), pod(3, "preempted", steps=15), pod(4, "running")]
    d = decide(state(pods, **kwargs))
    assert d.stop == reason and d.stop.drains == (reason in ("seconds", "steps"))
    assert (d.preempt, d.resume, d.start) == ((), (), 0)  # stopping decides nothing else


def test_running_pods_steps_count_when_they_report_or_stop():
    pods = [pod(1, "finished", steps=10), pod(2, "running", steps=999), pod(3, "queued", steps=999)]
    assert decide(state(pods, steps=11)).stop is None
    assert decide(state(pods, steps=10)).stop == StopReason.STEPS
    assert decide(state(pods, target=50.0, reached=False)).stop is None


def test_the_tournament_stops_at_its_target_by_the_rule_a_pod_confirms_by():
    """One stop rule: a pod's score reaches the target when its mean minus the margin's standard errors
    does, as a pod's confirmation (``podium.pod.evaluator.confirms``); not when its mean alone does, and
    each later try asks for a wider margin."""
    rules = Rules(target=-150.0, margin=2.0)
    # 100 episodes, std 30: SE 3, so a first try needs a mean of at least -144
    assert not reaches(rules, -145.0, 30.0, 100)
    assert reaches(rules, -144.0, 30.0, 100)
    assert reaches(rules, -144.0, 30.0, 100, attempt=1) and not reaches(rules, -144.0, 30.0, 100, attempt=2)
    assert reaches(rules, -142.4, 30.0, 100, attempt=2)  # 2.53 standard errors on the second try
    assert not reaches(Rules(target=None, margin=2.0), 1e9, 0.0, 100)
    assert reaches(Rules(target=-150.0, margin=0.0), -150.0, 30.0, 100, attempt=50)  # no margin: never grows
    assert decide(state(target=-150.0, margin=2.0)).stop is None
    assert decide(state(target=-150.0, margin=2.0, reached=True)).stop == StopReason.TARGET
    assert decide(state(target=None, reached=True)).stop is None  # no target (since a resume): nothing to reach


@pytest.mark.parametrize(
    ("pod", "selection", "margin"),
    [({}, {}, 2.0), ({"confirm_margin": 0.5}, {}, 0.5), ({}, {"episodes": 0}, 0.0)],
)
def test_the_stop_margin_is_the_pods_confirmation_margin(pod, selection, margin):
    """The margin comes from the pods' ``confirm_margin`` (default 2) when entries are scored on fresh
    episodes; scored on the routine evaluations (``selection.episodes: 0``) the mean alone decides, as for a
    pod whose confirmation is off."""
    from podium.tournament.config import TournamentConfig

    config = TournamentConfig(target=0.0, pod={"seconds": 5.0, **pod}, selection=selection)
    assert Rules.of(config).margin == margin


def test_the_rules_are_the_configs_fields():
    """Each rule the scheduler decides by is the config's field of the same meaning (no default in between)."""
    from podium.tournament.config import TournamentConfig

    config = TournamentConfig(
        target=-100.0,
        seconds=75.0,
        steps=50_000,
        max_failures=7,
        pool={"min": 2, "max": 6, "cpus_per_pod": 0.5, "gpus_per_pod": 0.25},
        pod={"steps": 4096, "confirm_margin": 1.5},
        selection={"episodes": 1},  # one fresh episode is still a fresh score: the pods' margin applies
    )
    assert Rules.of(config) == Rules(
        target=-100.0,
        margin=1.5,
        seconds=75.0,
        steps=50_000,
        max_failures=7,
        pool_min=2,
        pool_max=6,
        cpus_per_pod=0.5,
        gpus_per_pod=0.25,
        pod_steps=4096,
    )
    bare = Rules.of(TournamentConfig(target=1.0, pod={"seconds": 5.0}))
    assert (bare.seconds, bare.steps, bare.pod_steps) == (None, None, None)


def test_a_stop_still_says_the_pool_size():
    d = decide(state(cpus=3, seconds=60.0, elapsed=61.0))
    assert d == Decisions(pool_size=3, stop=StopReason.SECONDS)


def test_no_new_pod_starts_in_the_last_seconds_of_the_budget():
    d = decide(state(seconds=60.0, elapsed=60.0 - MIN_ROUND_SECONDS + 0.1))
    assert d.stop is None and d.start == 0 and d.resume == ()
    d = decide(state(seconds=60.0, elapsed=60.0 - MIN_ROUND_SECONDS))  # exactly a shortest round left: one more
    assert d.start == 4 and d.round_seconds == MIN_ROUND_SECONDS
    d = decide(state([pod(1, "preempted")], seconds=60.0, elapsed=60.0 - MIN_ROUND_SECONDS - 0.1))
    assert d.resume == ("p0001",) and d.start == 3


def test_a_new_pods_round_never_outlasts_the_tournament():
    finished = [
        pod(n, "finished", started=100.0 * n, ended=100.0 * n + 12.0, wall_time=10.0, steps=1) for n in (1, 2, 3)
    ]
    retried = pod(4, "finished", started=0.0, ended=100.0, wall_time=1.0, attempts=2)  # not a one-attempt pod
    assert overhead([*finished, retried]) == pytest.approx(2.0)
    d = decide(state([*finished, retried], seconds=100.0, elapsed=40.0))
    assert d.round_seconds == pytest.approx(100.0 - 40.0 - 2.0)
    assert decide(state(finished, seconds=100.0, elapsed=97.0)).round_seconds == MIN_ROUND_SECONDS  # 1 s left
    assert decide(state()).round_seconds is None


def test_the_overhead_is_the_median_of_the_finished_pods_and_may_be_under_a_second():
    def finished(number: int, spent: float, wall: float | None = 10.0) -> PodRecord:
        return pod(number, "finished", started=100.0, ended=100.0 + (wall or 0.0) + spent, wall_time=wall, steps=1)

    assert overhead([]) == 0.0 and overhead([pod(1, "running")]) == 0.0
    assert overhead([finished(n, s) for n, s in enumerate([0.9, 0.1, 0.5, 0.3, 0.7], 1)]) == pytest.approx(0.5)
    assert overhead([finished(1, 3.0, wall=None)]) == pytest.approx(3.0)  # no training time known: all of it


def test_no_more_steps_are_started_than_the_budget_has_left():
    """Every free slot started a full round until the steps of the pods that had *stopped* reached the budget:
    a tournament of 2,000 steps with 1,024-step pods on eight slots ran nine pods and 9,216 steps."""
    d = decide(state(cpus=8, pool_max=8, steps=2000, pod_steps=1024))
    assert d.start == 2 and d.round_steps == 2000  # two pods hold the budget (the orchestrator caps each round)
    running = [pod(1, "running", steps=0, spec={"steps": 1024}), pod(2, "queued", spec={"steps": 976})]
    d = decide(state(running, cpus=8, pool_max=8, steps=2000, pod_steps=1024))
    assert d.stop is None and d.start == 0 and d.resume == ()  # all 2,000 promised: nothing more starts
    d = decide(state([pod(1, "finished", steps=1024)], cpus=8, pool_max=8, steps=2000, pod_steps=1024))
    assert d.start == 1 and d.round_steps == 976  # the last round is the steps left
    seconds_only = [pod(1, "running", steps=300, spec={})]  # no step budget of its own: its steps so far count
    assert decide(state(seconds_only, cpus=8, pool_max=8, steps=2000)).round_steps == 1700


def test_a_committed_step_budget_starts_and_resumes_nothing_even_without_pod_steps():
    """Pods that train by seconds (no ``pod.steps``): once the steps done and promised reach the budget, no
    slot is filled, though the pool has room; one step left is still a round (capped at that step)."""
    pods = [pod(1, "finished", steps=1500), pod(2, "running", steps=500, spec={}), pod(3, "preempted", steps=None)]
    d = decide(state(pods, cpus=4, steps=2000))
    assert d.stop is None and (d.resume, d.start) == ((), 0)
    d = decide(state(pods, cpus=4, steps=2001))
    assert d.resume == ("p0003",) and d.start == 2 and d.round_steps == 1
    no_steps_yet = [pod(1, "failed", steps=None), pod(2, "running", steps=None, spec={})]
    assert decide(state(no_steps_yet, cpus=2, steps=1)).start == 1  # a pod with no steps counts none


def test_decide_is_a_pure_function_of_the_state():
    s = state([pod(1, "running"), pod(2, "preempted")], cpus=3, seconds=50.0)
    assert decide(s) == decide(s)


# ------------------------------------------------------------------------------------------ states
def test_pod_statuses_and_stop_reasons_read_as_the_strings_the_database_holds():
    assert [str(s) for s in PodStatus] == ["queued", "running", "finished", "failed", "preempted", "stopped"]
    assert [str(s) for s in StopReason] == ["target", "seconds", "steps", "failures", "interrupted"]
    assert PodStatus("running") == "running" and StopReason.STEPS == "steps"
    assert set(ACTIVE) == {"queued", "running", "preempted"} and set(FINAL) == {"finished", "failed", "stopped"}


@pytest.mark.parametrize("old", list(PodStatus))
@pytest.mark.parametrize("new", list(PodStatus))
def test_the_transition_table(old, new):
    if new in TRANSITIONS[old]:
        assert check_transition("p0001", old, new) == new
    else:
        with pytest.raises(IllegalTransition, match=f"p0001 cannot go from {old} to {new}"):
            check_transition("p0001", old, new)


def test_the_leaderboard_refuses_an_illegal_transition_and_writes_nothing(tmp_path):
    board = Leaderboard(f"sqlite:///{tmp_path / 'board.db'}", f"t-{uuid.uuid4().hex[:8]}")
    board.create({})
    values = {"number": 1, "algo": "ppo", "env": "CartPole-v1", "hparams": {}, "seed": 0, "spec": {}}
    board.add_pod(id="p0001", status="queued", run_dir="/r/p0001", **values)
    board.update_pod("p0001", status=PodStatus.RUNNING, handle="h:1")
    board.update_pod("p0001", status="running", attempts=1)  # staying is not a transition
    board.update_pod("p0001", status="finished", steps=2048)
    with pytest.raises(IllegalTransition, match="p0001 cannot go from finished to running"):
        board.update_pod("p0001", status="running", handle="h:2")
    record = board.pod("p0001")
    assert record.status is PodStatus.FINISHED and record.handle == "h:1" and record.steps == 2048
    with pytest.raises(IllegalTransition, match="'paused' is not a pod status"):
        board.update_pod("p0001", status="paused")
    with pytest.raises(IllegalTransition, match="pod p0002: 'paused' is not a pod status"):
        board.add_pod(id="p0002", status="paused", run_dir="/r/p0002", **{**values, "number": 2})
    with pytest.raises(KeyError, match=f"no pod 'p0009' in tournament '{board.name}'"):
        board.update_pod("p0009", status="running")
    with pytest.raises(KeyError, match=f"no pod 'p0009' in tournament '{board.name}'"):
        board.pod("p0009")
    assert [p.status for p in board.pods("finished")] == [PodStatus.FINISHED]
    board.close()
