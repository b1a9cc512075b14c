"""The tournament's decisions: a pure function of what the database says, tested without processes.

:func:`decide` takes a :class:`State` — the pods and their statuses, the leaderboard's best score, the
resources the backend reports, the elapsed time, the failures in a row, and the :class:`Rules` taken from
the config — and returns :class:`Decisions`: the pool size, which running pods to preempt, which
preempted pods to resume, how many new pods to start (a failed or finished pod is *replaced* by a new one
in its slot), how long a new pod's round may be, and whether and why to stop. It reads no file, starts no
process and has no clock: the runner (:mod:`podium.tournament.orchestrator`) gathers the state, calls it,
and carries the decisions out through a backend. This is how Ray Tune splits a scheduler from its executor.

The rules, in order:

1. **Stop** when a pod's score reached the target by the rule that stops a single pod (its mean minus a
   margin of standard errors at or above it, the margin growing with the tries: :func:`reaches`), after
   ``max_failures`` failures in a row, when the time budget or the step budget is spent (steps = those of
   every pod that is not running).
2. **Pool size** = the pods the resources hold (``floor(cpus / cpus_per_pod)``, and the same for GPUs when
   pods need them), clamped to ``[pool.min, pool.max]``.
3. **Shrink**: beyond the pool size, the youngest running pods are preempted (they resume later).
4. **Grow**: free slots resume preempted pods first (oldest pod first), then start new ones — unless less
   than :data:`MIN_ROUND_SECONDS` of the time budget is left, or the step budget is committed: the steps
   of the pods that stopped plus those the running ones are set to train (:func:`steps_committed`). New
   pods start only as many as the uncommitted steps hold.
5. **Round length**: a new pod's round never outlasts the tournament: it is capped at the seconds left
   minus the pods' overhead (start-up, final evaluation, reporting: the median over the pods finished so
   far in one attempt), and at the uncommitted steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from podium.config import PodSpec
from podium.pod.evaluator import lower_bound, margin_for
from podium.tournament.backends import Resources
from podium.tournament.config import PoolConfig, TournamentConfig
from podium.tournament.leaderboard import PodRecord
from podium.tournament.states import PodStatus, StopReason

__all__ = [
    "MIN_ROUND_SECONDS",
    "Decisions",
    "Rules",
    "State",
    "decide",
    "overhead",
    "pool_size",
    "reaches",
    "steps_committed",
    "steps_done",
]

MIN_ROUND_SECONDS = 2.0
"""A new pod is only started if the tournament has at least this many seconds of budget left."""


@dataclass(frozen=True)
class Rules:
    """What the config says about stopping and sizing (see :class:`~podium.tournament.config.TournamentConfig`).

    ``margin``: standard errors a pod's score must clear the ``target`` by on the first try — the pods' own
    ``confirm_margin`` when pods are scored on fresh episodes (``selection.episodes`` > 0), else 0 (a pod
    without confirmation compares its mean alone too).
    """

    target: float | None = None
    margin: float = 0.0
    seconds: float | None = None
    steps: int | None = None
    max_failures: int = 5
    pool_min: int = 1
    pool_max: int = 8
    cpus_per_pod: float = 1.0
    gpus_per_pod: float = 0.0
    pod_steps: int | None = None
    """A new pod's step budget (``pod.steps``), if it has one."""

    @classmethod
    def of(cls, config: TournamentConfig) -> Rules:
        pool = config.pool
        margin = config.pod.get("confirm_margin", PodSpec.model_fields["confirm_margin"].default)
        return cls(
            target=config.target,
            margin=float(margin) if config.selection.episodes > 0 else 0.0,
            seconds=config.seconds,
            steps=config.steps,
            max_failures=config.max_failures,
            pool_min=pool.min,
            pool_max=pool.max,
            cpus_per_pod=pool.cpus_per_pod,
            gpus_per_pod=pool.gpus_per_pod,
            pod_steps=int(config.pod["steps"]) if config.pod.get("steps") is not None else None,
        )


@dataclass(frozen=True)
class State:
    """A snapshot of the tournament, as the database and the backend tell it.

    Attributes:
        rules: the config's stopping and sizing rules.
        pods: every pod of the tournament, in pod order (``steps`` of a pod that is not running are its
            steps so far, see :class:`~podium.tournament.leaderboard.PodRecord`).
        reached: a pod's score reached the target (:func:`reaches`; the runner records when).
        resources: what the backend can give the tournament now.
        elapsed: seconds the tournament has run (over all resumes).
        failures_in_row: pod failures since the last pod that finished.
    """

    rules: Rules
    pods: Sequence[PodRecord]
    reached: bool
    resources: Resources
    elapsed: float
    failures_in_row: int = 0


@dataclass(frozen=True)
class Decisions:
    """What the runner does next.

    Attributes:
        pool_size: pods the pool holds now.
        stop: why the tournament stops now (None: it goes on; nothing else is decided then).
        preempt: running pods to stop now (they keep their checkpoint and resume later), youngest first.
        resume: preempted pods to run again from their last checkpoint, in this order.
        start: new pods to plan with the generator and run (fresh or children of leaderboard entries).
        round_seconds: the longest round a new pod may have (None: no time budget).
    """

    pool_size: int
    stop: StopReason | None = None
    preempt: tuple[str, ...] = ()
    resume: tuple[str, ...] = ()
    start: int = 0
    round_seconds: float | None = None
    round_steps: int | None = None
    """The most env steps a new pod may train (None: no step budget)."""


def pool_size(rules: Rules, resources: Resources) -> int:
    """Pods that fit in ``resources`` given each pod's declared need, clamped to ``[pool_min, pool_max]``
    (:meth:`~podium.tournament.config.PoolConfig.size`)."""
    pool = PoolConfig.model_construct(  # (the rules' values were validated with their config)
        min=rules.pool_min, max=rules.pool_max, cpus_per_pod=rules.cpus_per_pod, gpus_per_pod=rules.gpus_per_pod
    )
    return pool.size(resources.cpus, resources.gpus)


def steps_done(pods: Sequence[PodRecord]) -> int:
    """Env steps of every pod that is not running (finished: its report; failed or preempted: its last
    evaluation when it stopped). A running pod's steps count once it reports or stops."""
    return sum(int(p.steps or 0) for p in pods if p.status not in (PodStatus.RUNNING, PodStatus.QUEUED))


def steps_committed(pods: Sequence[PodRecord]) -> int:
    """Env steps spent or promised: those of every pod that is not running (:func:`steps_done`) plus the step
    budget of each running or queued pod (its steps so far when it has none)."""
    promised = 0
    for p in pods:
        if p.status in (PodStatus.RUNNING, PodStatus.QUEUED):
            budget = (p.spec or {}).get("steps")
            promised += int(budget) if budget is not None else int(p.steps or 0)
    return steps_done(pods) + promised


def overhead(pods: Sequence[PodRecord]) -> float:
    """Seconds a pod spends outside its training budget (process start, building, final evaluation,
    reporting): the median over the pods that finished in one attempt, 0 before the first."""
    spent = sorted(
        (p.ended - p.started) - (p.wall_time or 0.0)
        for p in pods
        if p.status == PodStatus.FINISHED and p.ended and p.started and p.attempts == 1
    )
    return max(0.0, spent[len(spent) // 2]) if spent else 0.0


def reaches(rules: Rules, mean: float, std: float, episodes: int, attempt: int = 1) -> bool:
    """Whether a pod's score (``mean`` and ``std`` over ``episodes``), the tournament's ``attempt``-th at or
    above ``rules.target``, reaches it by the rule a single pod stops by: its mean minus
    ``margin_for(rules.margin, attempt)`` standard errors (:func:`podium.pod.evaluator.margin_for`) at or
    above it. A tournament judges many pods as a pod confirms many snapshots, so later tries ask for more
    in both."""
    if rules.target is None:
        return False
    return lower_bound(mean, std, episodes, margin_for(rules.margin, attempt)) >= rules.target


def stop_reason(state: State) -> StopReason | None:
    """Why the tournament stops now, or None."""
    r = state.rules
    if r.target is not None and state.reached:
        return StopReason.TARGET
    if state.failures_in_row >= r.max_failures:
        return StopReason.FAILURES
    if r.seconds is not None and state.elapsed >= r.seconds:
        return StopReason.SECONDS
    if r.steps is not None and steps_done(state.pods) >= r.steps:
        return StopReason.STEPS
    return None


def decide(state: State) -> Decisions:
    """The runner's next moves given ``state`` (see the module's rules)."""
    r = state.rules
    size = pool_size(r, state.resources)
    stop = stop_reason(state)
    if stop is not None:
        return Decisions(size, stop=stop)
    running = sorted(
        (p for p in state.pods if p.status == PodStatus.RUNNING), key=lambda p: p.started or 0.0, reverse=True
    )
    preempt = tuple(p.id for p in running[: max(0, len(running) - size)])
    free = size - (len(running) - len(preempt))
    budget_left = not (r.seconds is not None and r.seconds - state.elapsed < MIN_ROUND_SECONDS)
    steps_left = None if r.steps is None else r.steps - steps_committed(state.pods)
    if steps_left is not None and steps_left <= 0:
        budget_left = False
    resume: tuple[str, ...] = ()
    start = 0
    if free > 0 and budget_left:
        waiting = [p.id for p in state.pods if p.status == PodStatus.PREEMPTED]
        resume = tuple(waiting[:free])
        start = free - len(resume)
        if steps_left is not None and r.pod_steps:  # no more new pods than the uncommitted steps hold
            start = min(start, math.ceil(steps_left / r.pod_steps))
    round_seconds = None
    if r.seconds is not None:
        round_seconds = max(MIN_ROUND_SECONDS, r.seconds - state.elapsed - overhead(state.pods))
    return Decisions(
        size, preempt=preempt, resume=resume, start=start, round_seconds=round_seconds, round_steps=steps_left
    )
