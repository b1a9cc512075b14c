"""The states a pod goes through, why a tournament stops, and which changes of state are allowed.

The values are the strings the database has always held, so a database written before these enums
existed reads the same. :meth:`~podium.tournament.leaderboard.Leaderboard.update_pod` checks every
change of a pod's status against :data:`TRANSITIONS` and raises :class:`IllegalTransition` for any other::

    queued ──> running ──> finished
      │          │  ^
      │          │  └──────── preempted     (the pool shrank, the orchestrator left, or the pod's node died:
      │          └──> failed      │          it resumes from its last checkpoint when there is room)
      └──────────────> preempted ─┘
    queued / running / preempted ──> stopped   (given up for good; never resumed)

``finished``, ``failed`` and ``stopped`` are final: a pod id never runs again (a child is a new pod).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIVE", "FINAL", "TRANSITIONS", "IllegalTransition", "PodStatus", "StopReason", "check_transition"]


class PodStatus(StrEnum):
    """Where a pod is in its life (see the module's diagram)."""

    QUEUED = "queued"
    """Planned and recorded, not handed to a backend yet."""
    RUNNING = "running"
    """Handed to a backend; its ``handle`` says where."""
    FINISHED = "finished"
    """Reported a result, which the updater recorded."""
    FAILED = "failed"
    """Crashed, or its process died; its ``error`` says why."""
    PREEMPTED = "preempted"
    """Stopped before the end of its round (the pool shrank, the tournament stopped or was killed, its node
    died); it resumes from its last checkpoint."""
    STOPPED = "stopped"
    """Given up for good (never resumed)."""


class StopReason(StrEnum):
    """Why a tournament stopped."""

    TARGET = "target"
    """The leaderboard's best reached the target."""
    SECONDS = "seconds"
    """The time budget is spent."""
    STEPS = "steps"
    """The env-step budget is spent."""
    FAILURES = "failures"
    """``max_failures`` pods failed in a row."""
    INTERRUPTED = "interrupted"
    """Ctrl-C or SIGTERM; ``podium tournament resume`` continues it."""

    @property
    def drains(self) -> bool:
        """Whether running pods may hand in their (budget-capped) rounds before the tournament ends."""
        return self in (StopReason.SECONDS, StopReason.STEPS)


TRANSITIONS: dict[PodStatus, frozenset[PodStatus]] = {
    PodStatus.QUEUED: frozenset({PodStatus.RUNNING, PodStatus.PREEMPTED, PodStatus.FAILED, PodStatus.STOPPED}),
    PodStatus.RUNNING: frozenset({PodStatus.FINISHED, PodStatus.FAILED, PodStatus.PREEMPTED, PodStatus.STOPPED}),
    PodStatus.PREEMPTED: frozenset({PodStatus.RUNNING, PodStatus.FAILED, PodStatus.STOPPED}),
    PodStatus.FINISHED: frozenset(),
    PodStatus.FAILED: frozenset(),
    PodStatus.STOPPED: frozenset(),
}
"""status -> the statuses a pod in it may move to. Staying in the same status is not a transition."""

ACTIVE = (PodStatus.QUEUED, PodStatus.RUNNING, PodStatus.PREEMPTED)
"""Pod states that still need the pool (a preempted pod is resumed when there is room)."""
FINAL = tuple(status for status, after in TRANSITIONS.items() if not after)
"""Pod states a pod never leaves."""


class IllegalTransition(ValueError):
    """A pod was asked to change to a status it cannot reach from its current one."""


def check_transition(pod_id: str, old: str, new: str) -> PodStatus:
    """``new`` as a :class:`PodStatus` if a pod in ``old`` may move to it.

    Raises:
        IllegalTransition: ``new`` is not in ``TRANSITIONS[old]`` (naming the pod and both states), or either
            is not a pod status at all.
    """
    try:
        before, after = PodStatus(old), PodStatus(new)
    except ValueError:
        raise IllegalTransition(
            f"pod {pod_id}: {new!r} is not a pod status (choose from {', '.join(PodStatus)})"
        ) from None
    if after not in TRANSITIONS[before]:
        allowed = ", ".join(sorted(TRANSITIONS[before])) or "none: it is final"
        raise IllegalTransition(f"pod {pod_id} cannot go from {before} to {after} (allowed from {before}: {allowed})")
    return after
