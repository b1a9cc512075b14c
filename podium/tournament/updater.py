"""Updater: receives each pod's result, decides whether and where it enters the leaderboard, and keeps
the history.

* A finished pod becomes a candidate entry: its score, its steps and those of its ancestors, and its best
  checkpoint. The score is the *selection* score — the best snapshot re-scored on fresh episodes at the end
  of the round (``selection.episodes``) — where the pod has one, else its best training-time evaluation
  (mean, std). It enters if it ranks in the top ``leaderboard_size`` by mean (ties: lower std, then
  earlier); on a full board it must beat the entry it pushes off by more than ``selection.margin``
  standard errors of the difference. Entries pushed below the cut leave the leaderboard.
* A pod id is one entry, holding the pod's best result: a pod that reports again (resumed after
  preemption) replaces its entry only with a better result; a worse one is recorded as ``kept`` and the
  earlier entry stays — unless that entry's checkpoint no longer holds the policy that earned it (the
  resumed pod overwrote it with a weaker one), in which case the new result takes its place on its own merit.
  An entry's checkpoint is checked through the score a pod's best checkpoint records when it is saved.
* Every result — entered, rejected, kept, failed or lost (the pod's machine went away: it is preempted and
  resumes from its checkpoint, which is not a failure) — is appended to the history table.
* Checkpoints of pods that are neither on the leaderboard nor the starting point of a pod still in the
  pool (nor, with ``generator.scheme: truncation``, a member's latest round, which the member continues or
  another copies) are deleted (curves, logs and any snapshots stay), so a long tournament does not fill the disk.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from podium.pod import PodReport
from podium.rundir import PodDir
from podium.store import CheckpointError, load_checkpoint
from podium.tournament.leaderboard import Entry, Leaderboard, PodRecord
from podium.tournament.states import ACTIVE, FINAL, PodStatus

__all__ = ["Updater", "checkpoint_holds", "member_bar", "score_of", "selection_bar"]


class Updater:
    """Applies pod results to the leaderboard ``board``, which keeps ``size`` entries; ``keep_members``: keep
    the checkpoints of each member's latest round (``generator.scheme: truncation``)."""

    def __init__(self, board: Leaderboard, size: int, margin: float = 0.0, keep_members: bool = False) -> None:
        self.board, self.size, self.margin, self.keep_members = board, size, margin, keep_members

    def offer(self, pod: PodRecord, report: PodReport, elapsed: float, prune: bool = True) -> int | None:
        """Record ``pod``'s ``report``; returns the pod's leaderboard rank (1 = best) or None if it is not on it.
        The entry, the pod's new status and the history row are one transaction: all of them, or none.

        ``elapsed``: seconds since the tournament started (for the history). ``prune``: then delete the
        checkpoints nothing needs any more (False: the caller does, after its own transaction commits).
        """
        with self.board.transaction():
            rank = self._offer(pod, report, elapsed)
        if prune:
            self.prune()
        return rank

    def _offer(self, pod: PodRecord, report: PodReport, elapsed: float) -> int | None:
        parent_total = 0
        if pod.parent_id is not None:
            parent_total = self.board.pod(pod.parent_id).total_steps or 0
        total_steps = parent_total + report.steps
        mean, std, episodes = score_of(report)
        entry = Entry(
            pod_id=pod.id,
            parent_id=pod.parent_id,
            algo=pod.algo,
            env=pod.env,
            hparams=pod.hparams,
            score_mean=mean,
            score_std=std,
            steps=int(report.steps),
            total_steps=int(total_steps),
            wall_time=float(report.wall_time),
            checkpoint=report.checkpoint,
            created=time.time(),
            score_episodes=episodes,
        )

        # offered before the pod is marked finished, in one transaction: an orchestrator killed before it commits
        # leaves the pod "running", and the next one collects its report again instead of losing it
        def displaces(new: Entry, pushed: Entry) -> bool:
            """Higher by more than ``margin`` standard errors of the difference of the two means."""
            pushed_episodes = pushed.score_episodes or episodes  # an entry from an older podium: assume the same
            noise = math.sqrt(new.score_std**2 / episodes + pushed.score_std**2 / pushed_episodes)
            return new.score_mean - pushed.score_mean > self.margin * noise

        rank, _dropped = self.board.offer(entry, self.size, still_holds=checkpoint_holds, displaces=displaces)
        self.board.update_pod(
            pod.id,
            status=PodStatus.FINISHED,
            ended=time.time(),
            score_mean=entry.score_mean,
            score_std=entry.score_std,
            steps=entry.steps,
            total_steps=total_steps,
            wall_time=entry.wall_time,
            checkpoint=entry.checkpoint,
            error=None,
        )
        outcome = "entered"
        if rank is None:
            mine = next((e for e in self.board.entries() if e.pod_id == pod.id), None)
            outcome, rank = ("kept", mine.rank) if mine is not None else ("rejected", None)
        self.board.record(
            pod_id=pod.id,
            elapsed=elapsed,
            outcome=outcome,
            rank=rank,
            algo=pod.algo,
            score_mean=entry.score_mean,
            score_std=entry.score_std,
            steps=entry.steps,
            wall_time=entry.wall_time,
            report=_jsonable(report.to_dict()),
        )
        return rank

    def fail(self, pod: PodRecord, error: str, elapsed: float, steps: int | None = None) -> None:
        """Record that ``pod`` failed with ``error`` after ``steps`` env steps (its last evaluation's); its status
        and its history row are one transaction, as :meth:`offer`'s."""
        with self.board.transaction():
            self.board.update_pod(pod.id, status=PodStatus.FAILED, ended=time.time(), error=error, steps=steps)
            self.board.record(pod_id=pod.id, elapsed=elapsed, outcome="failed", algo=pod.algo, error=error)
        self.prune()

    def lose(self, pod: PodRecord, reason: str, elapsed: float, steps: int | None = None) -> None:
        """Record that ``pod`` was lost with the machine it ran on (``reason``): it is preempted, to resume from
        its last checkpoint, and the history says so (outcome ``lost``), in one transaction."""
        with self.board.transaction():
            self.board.update_pod(pod.id, status=PodStatus.PREEMPTED, handle=None, steps=steps)
            self.board.record(pod_id=pod.id, elapsed=elapsed, outcome="lost", algo=pod.algo, error=reason)

    def prune(self) -> list[str]:
        """Delete the checkpoints that nothing needs any more; returns the pod ids pruned."""
        keep = {e.checkpoint for e in self.board.entries()}
        keep |= {p.init_checkpoint for p in self.board.pods(*ACTIVE) if p.init_checkpoint}
        latest: set[str] = set()
        if self.keep_members:
            by_member: dict[str, str] = {}
            for pod in self.board.pods(PodStatus.FINISHED):  # in creation order: the last one wins
                by_member[pod.lineage or pod.id] = pod.id
            latest = set(by_member.values())
        pruned = []
        for pod in self.board.pods(*FINAL):
            if pod.pruned or pod.id in latest:
                continue
            run = PodDir(pod.run_dir)
            if str(run.best) in keep or str(run.last) in keep:
                continue
            for path in (run.best, run.last, run.replay):
                path.unlink(missing_ok=True)
            self.board.update_pod(pod.id, pruned=True)
            pruned.append(pod.id)
        return pruned


def score_of(report: PodReport) -> tuple[float, float, int]:
    """The (mean, std, episodes) a pod is ranked by: its selection score when it has one, else its best
    training-time evaluation (with the routine evaluations' episode count)."""
    if report.selection_mean is not None and report.selection_std is not None:
        return float(report.selection_mean), float(report.selection_std), int(report.selection_episodes or 1)
    episodes = int(report.curve[-1]["eval_episodes"]) if report.curve else 1
    return float(report.score_mean), float(report.score_std), episodes


def selection_bar(entries: Sequence[Entry], size: int, target: float | None) -> float | None:
    """The score below which a new pod's selection score makes no difference (``PodSpec.select_bar``): on a
    full board of ``size`` entries, the last entry's mean, since a pod must beat it to enter; the ``target``
    instead where that is lower, since a pod at the target stops the tournament. None while the board has
    room: every pod enters then, and its score ranks it."""
    if len(entries) < size:
        return None
    cut = min(entry.score_mean for entry in entries)
    return cut if target is None else min(cut, target)


def member_bar(
    algo: str, members: Mapping[str, int], mix: Sequence[str], slots: int, target: float | None
) -> float | None:
    """``scheme: truncation``'s :func:`selection_bar` for a pod of ``algo``, where ``members`` counts each
    algorithm's members (lineages) and the pool has ``slots`` slots. Truncation ranks an algorithm's members
    against each other by their selection scores, so every score counts (None) unless ``algo`` has one member
    and will keep it: every algorithm of the ``mix`` has a member and the members fill the slots (the
    generator then starts no new member: a freed slot always has one waiting). Such a lone member is ranked
    against no other, and below the ``target`` it cannot stop the tournament: the bar is the target (None
    without one). Its score still weighs its algorithm in the mix (``generator.losing_share``); a score
    stopped early counts fewer episodes, so its wider standard error makes the mix slower, not quicker, to
    call that algorithm losing."""
    settled = all(members.get(name, 0) > 0 for name in mix) and sum(members.values()) >= slots
    return target if settled and members.get(algo, 0) == 1 else None


def checkpoint_holds(entry: Entry) -> bool:
    """Whether ``entry.checkpoint`` still holds the policy that earned ``entry``'s score: a pod's best
    checkpoint records the score it was saved for (``best_mean``/``best_std``, and ``selection_mean``/
    ``selection_std`` once it was re-scored for selection). False when the file is gone, unreadable or
    records another score (the pod overwrote it since)."""
    try:
        counters = load_checkpoint(entry.checkpoint)["counters"]
        if counters.get("selection_mean") is not None:
            recorded = (float(counters["selection_mean"]), float(counters["selection_std"]))
        else:
            recorded = (float(counters["best_mean"]), float(counters["best_std"]))
        return recorded == (entry.score_mean, entry.score_std)
    except (CheckpointError, KeyError, TypeError, ValueError):
        return False


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:  # NaN is not valid JSON in every database
        return None
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
