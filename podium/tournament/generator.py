"""Generator: decides what the next pod trains — a fresh agent, or a leaderboard entry's checkpoint with
mutated hyperparameters (exploit, then explore, as in population-based training).

1. The algorithm is picked so that the running pool follows the configured ratio (the one furthest
   below its share goes next; a child inherits its parent's algorithm, so this holds for every pod).
   Algorithms compete too: once each has ended a pod, one whose best leaderboard entry trails the best
   entry by more than the noise (``generator.losing_margin`` standard errors), or that has no entry, keeps
   only ``generator.losing_share`` of its share (:func:`algo_shares`), so the pool's cores go to the
   algorithms that suit the task. While the shares differ from the configured ones, the algorithm is drawn
   from them at random (a pool of two would otherwise never pick a share below a half, and a demoted
   algorithm could not catch up). (``scheme: truncation`` keeps its members' algorithms.)
2. With probability ``generator.explore``, or when the leaderboard holds no entry of that algorithm,
   the pod starts fresh with a new seed: the base hyperparameters for the first pod of its algorithm,
   later ones with each hyperparameter in ``generator.ranges`` drawn from its range.
3. Otherwise a parent is picked from that algorithm's entries (by rank, uniformly, or the best) and the
   child starts from the parent's checkpoint, each mutable hyperparameter (what the algorithm declares in
   ``AgentConfig.mutable``) changed with probability ``mutation_prob``: multiplied by one of ``perturb``'s
   factors (x0.8 or x1.2) or, with ``mutation_scale``, by a factor drawn log-uniformly from
   ``[1/mutation_scale, mutation_scale]``; a ranged one is redrawn from its range with probability
   ``resample_prob``. Values stay inside their range and the field's valid range. A categorical setting
   searched with ``generator.choices`` (e.g. TD3's ``noise_type``) is drawn uniformly by fresh pods and
   switched by a child with probability ``mutation_prob * resample_prob``, unless it shapes the networks
   the child inherits (``AgentConfig.shape``, e.g. gSDE's ``use_sde``).

With ``scheme: truncation`` (population-based training, :meth:`Generator.next` given the pods), a free slot
is refilled by the *member* (lineage) that finished its round first: it continues from its own last
checkpoint with the same hyperparameters, unless it is ready (``ready_steps``/``ready_seconds`` trained since
it last changed) and in the bottom ``truncation`` fraction of its algorithm's members, ranked by their latest
selection score; then it copies a top-fraction member's checkpoint and mutates as in 3. A new member starts
fresh (1 and 2) only when no member waits, or while an algorithm of the mix has no member yet: with fewer
slots than algorithms, every algorithm gets a member and the members take turns in the slots.

Decisions are drawn from a random stream seeded by (tournament seed, pod number), so a resumed
tournament makes the same decisions it would have made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import annotated_types
import numpy as np

from podium.algos import get_algo
from podium.algos.presets import preset_for
from podium.config import PodSpec
from podium.rundir import PodDir
from podium.tournament.config import TournamentConfig
from podium.tournament.leaderboard import Entry, PodRecord
from podium.tournament.states import PodStatus

__all__ = ["Generator", "Plan", "algo_shares", "effective_hparams", "members"]


@dataclass(frozen=True)
class Plan:
    """The generator's decision for one new pod."""

    spec: PodSpec
    parent: Entry | None
    mutated: dict[str, tuple[Any, Any]]
    """Mutated hyperparameters: name -> (parent's value, child's value)."""
    sampled: dict[str, Any] = field(default_factory=dict)
    """A fresh pod's hyperparameters drawn from ``generator.ranges``: name -> value."""
    lineage: str | None = None
    """``scheme: truncation``: the member (its first pod's id) this pod is the next round of; None: a new one."""
    source: PodRecord | None = None
    """``scheme: truncation``: the pod whose checkpoint this one starts from (the member's own last pod when
    it continues, a top member's when it copies one)."""

    @property
    def parent_id(self) -> str | None:
        return self.parent.pod_id if self.parent else self.source.id if self.source else None


def effective_hparams(spec: PodSpec) -> dict[str, Any]:
    """The complete hyperparameters a pod runs with: algorithm defaults, then the preset, then ``spec.hparams``."""
    cls = get_algo(spec.algo)
    merged = {**(preset_for(spec.algo, spec.env).hparams if spec.preset else {}), **spec.hparams}
    return cls.Config(**merged).model_dump(mode="json")


class Generator:
    """Makes the next :class:`~podium.config.PodSpec` of a tournament.

    Args:
        config: the tournament's config (algorithms, ratio, base hyperparameters, generator settings).
    """

    def __init__(self, config: TournamentConfig) -> None:
        self.config = config
        total = sum(config.algos.values())
        self.shares = {algo: weight / total for algo, weight in config.algos.items()}

    def choose_algo(self, running: list[str], started: list[str], among: Sequence[str] = ()) -> str:
        """The algorithm (of ``among``, else of the mix) furthest below its share in the running pool (ties:
        over all pods started so far, then the config's order)."""

        def deficit(algo: str) -> tuple[float, float]:
            now = self.shares[algo] * (len(running) + 1) - running.count(algo)
            ever = self.shares[algo] * (len(started) + 1) - started.count(algo)
            return (now, ever)

        return max(among or self.shares, key=deficit)

    def next(
        self,
        number: int,
        entries: list[Entry],
        running: list[str],
        started: list[str],
        pods: Sequence[PodRecord] = (),
    ) -> Plan:
        """Plan pod number ``number`` given the leaderboard ``entries`` (best first), the algorithms of the
        running pods and of all pods started so far, and (``scheme: truncation``) every pod so far."""
        g = self.config.generator
        rng = np.random.default_rng([self.config.seed, number])
        untried: list[str] = []
        if g.scheme == "truncation":
            waiting = waiting_members(pods)
            have = {member[0].algo for member in members(pods).values()}
            untried = [algo for algo in self.shares if algo not in have]
        ended = {p.algo for p in pods if p.status in (PodStatus.FINISHED, PodStatus.FAILED)}
        shares = algo_shares(self.shares, entries, ended, g.losing_share, g.losing_margin)
        if g.scheme == "truncation":
            if waiting and not untried:
                return self._next_round(self._next_member(waiting, shares, started), pods, rng)
            if untried:  # every algorithm of the mix gets a member, losing or not
                shares = self.shares
        if shares != self.shares:  # some algorithm is losing: draw from the shares
            names = list(shares)
            algo = names[int(rng.choice(len(names), p=[shares[a] for a in names]))]
        else:
            algo = self.choose_algo(running, started, among=untried)
        seed = int(rng.integers(0, 2**31 - 1))
        candidates = [e for e in entries if e.algo == algo]
        explore = g.scheme == "truncation" or rng.random() < g.explore
        if not candidates or explore:
            return self._fresh(algo, seed, started, rng)
        parent = self._pick_parent(candidates, rng)
        hparams, mutated = self._mutate(algo, parent.hparams, rng)
        spec = self.config.pod_spec(algo, seed, hparams=hparams, init_checkpoint=parent.checkpoint, preset=False)
        return Plan(spec, parent, mutated)

    def _fresh(self, algo: str, seed: int, started: list[str], rng: np.random.Generator) -> Plan:
        ranges = self.config.generator.ranges.get(algo, {})
        choices = self.config.generator.choices.get(algo, {})
        if not (ranges or choices) or algo not in started:
            return Plan(self.config.pod_spec(algo, seed), None, {})
        base = effective_hparams(self.config.pod_spec(algo, seed))
        sampled = {name: _like(base[name], _draw(low, high, rng)) for name, (low, high) in ranges.items()}
        sampled |= {name: options[int(rng.integers(len(options)))] for name, options in choices.items()}
        hparams = {**self.config.hparams.get(algo, {}), **sampled}
        return Plan(self.config.pod_spec(algo, seed, hparams=hparams), None, {}, sampled)

    def _mutate(
        self, algo: str, hparams: dict[str, Any], rng: np.random.Generator
    ) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
        """``hparams`` with each mutable hyperparameter perturbed with probability ``mutation_prob``."""
        g = self.config.generator
        hparams = dict(hparams)
        mutated = {}
        config_cls = get_algo(algo).Config
        ranges = g.ranges.get(algo, {})
        for name, (low, high) in self.config.mutable(algo).items():
            if name not in hparams or rng.random() >= g.mutation_prob:
                continue
            value = hparams[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if (name in ranges and rng.random() < g.resample_prob) or value == 0:
                new = _draw(low, high, rng)  # (a factor cannot move 0, e.g. PPO's default ent_coef: resample it)
            elif g.mutation_scale is not None:
                new = value * math.exp(rng.uniform(-math.log(g.mutation_scale), math.log(g.mutation_scale)))
            else:
                new = value * g.perturb[int(rng.integers(len(g.perturb)))]
            new = _like(value, _clamp(config_cls, name, min(max(new, low), high)))
            if new != value:
                hparams[name] = new
                mutated[name] = (value, new)
        for name, options in g.choices.get(algo, {}).items():  # categorical: switch, or keep
            if name in config_cls.shape or rng.random() >= g.mutation_prob or rng.random() >= g.resample_prob:
                continue
            others = [o for o in options if o != hparams.get(name)]
            new = others[int(rng.integers(len(others)))]
            mutated[name] = (hparams.get(name), new)
            hparams[name] = new
        return hparams, mutated

    def _next_member(
        self, waiting: list[list[PodRecord]], shares: dict[str, float], started: list[str]
    ) -> list[PodRecord]:
        """Which waiting member (``scheme: truncation``, more members than slots) takes the free slot: the one
        that waited longest while every algorithm holds its own; once one is losing (``shares`` differ from the
        mix, :func:`algo_shares`), the one whose algorithm is furthest below its share of the pods started so
        far, so a losing algorithm's member takes fewer turns (ties: the one that waited longest)."""
        if shares == self.shares:
            return waiting[0]
        return max(waiting, key=lambda m: shares[m[0].algo] * (len(started) + 1) - started.count(m[0].algo))

    def _next_round(self, member: list[PodRecord], pods: Sequence[PodRecord], rng: np.random.Generator) -> Plan:
        """The next pod of a waiting member (``scheme: truncation``): it continues, or copies a top member."""
        g = self.config.generator
        last = member[-1]
        lineage = member[0].lineage or member[0].id
        seed = int(rng.integers(0, 2**31 - 1))
        ranking = member_ranking(pods, last.algo)
        k = max(1, math.floor(g.truncation * len(ranking))) if len(ranking) >= 2 else 0
        top, bottom = ranking[:k], ranking[len(ranking) - k :] if k else []
        trained = since_change(member)
        ready = trained[0] >= g.ready_steps and trained[1] >= g.ready_seconds
        lost = last.status != PodStatus.FINISHED or last.checkpoint is None
        if top and (lost or (ready and any(m[-1].id == last.id for m in bottom))):
            source = top[int(rng.integers(len(top)))][-1]
            hparams, mutated = self._mutate(last.algo, source.hparams, rng)
            spec = self.config.pod_spec(
                last.algo, seed, hparams=hparams, init_checkpoint=source.checkpoint, preset=False
            )
            return Plan(spec, None, mutated, lineage=lineage, source=source)
        if lost:  # failed with no member to copy: it starts again, fresh
            return Plan(self.config.pod_spec(last.algo, seed), None, {}, lineage=lineage)
        spec = self.config.pod_spec(
            last.algo, seed, hparams=last.hparams, init_checkpoint=str(PodDir(last.run_dir).last), preset=False
        )
        return Plan(spec, None, {}, lineage=lineage, source=last)

    def _pick_parent(self, candidates: list[Entry], rng: np.random.Generator) -> Entry:
        how = self.config.generator.parent
        if how == "best":
            return candidates[0]
        if how == "uniform":
            return candidates[int(rng.integers(len(candidates)))]
        weights = np.array([1.0 / (i + 1) for i in range(len(candidates))])
        return candidates[int(rng.choice(len(candidates), p=weights / weights.sum()))]


def algo_shares(
    shares: dict[str, float], entries: Sequence[Entry], ended: set[str], losing_share: float, margin: float
) -> dict[str, float]:
    """The mix's shares once algorithms have competed: when every algorithm of ``shares`` has ended a pod
    (finished or failed), each one whose best entry in ``entries`` trails the best entry by more than
    ``margin`` standard errors of the gap, or that has no entry, is weighted by ``losing_share``; then the
    shares are normalised. Before that, with ``losing_share`` 1, when none is losing, or when no entry was
    scored on more than one episode (no measure of the noise, as with a trading validation period): ``shares``."""
    if losing_share >= 1 or not entries or any(algo not in ended for algo in shares):
        return dict(shares)
    known = [e.score_episodes for e in entries if e.score_episodes]
    assumed = max(known, default=1)  # an entry from an older podium: as many episodes as the others
    if assumed < 2:
        return dict(shares)

    def stderr(entry: Entry) -> float:
        return entry.score_std / math.sqrt(entry.score_episodes or assumed)

    best = {
        algo: max((e for e in entries if e.algo == algo), key=lambda e: e.score_mean, default=None) for algo in shares
    }
    leader = max(entries, key=lambda e: e.score_mean)
    weights = {}
    for algo, share in shares.items():
        entry = best[algo]
        losing = entry is None or leader.score_mean - entry.score_mean > margin * math.hypot(
            stderr(leader), stderr(entry)
        )
        weights[algo] = share * (losing_share if losing else 1.0)
    if all(w == shares[algo] for algo, w in weights.items()):
        return dict(shares)
    total = sum(weights.values())
    return {algo: w / total for algo, w in weights.items()}


def members(pods: Sequence[PodRecord]) -> dict[str, list[PodRecord]]:
    """The pool's members (``scheme: truncation``): lineage -> its pods, oldest first."""
    out: dict[str, list[PodRecord]] = {}
    for pod in sorted(pods, key=lambda p: p.number):
        out.setdefault(pod.lineage or pod.id, []).append(pod)
    return out


def waiting_members(pods: Sequence[PodRecord]) -> list[list[PodRecord]]:
    """Members whose latest pod ended (finished or failed) and has no next round yet, the earliest ended first."""
    ended = (PodStatus.FINISHED, PodStatus.FAILED)
    waiting = [m for m in members(pods).values() if m[-1].status in ended]
    return sorted(waiting, key=lambda m: (m[-1].ended or 0.0, m[-1].number))


def member_ranking(pods: Sequence[PodRecord], algo: str) -> list[list[PodRecord]]:
    """``algo``'s members that have a score, best first, each ending at its latest scored pod."""
    scored = []
    for member in members(pods).values():
        done = [p for p in member if p.status == PodStatus.FINISHED and p.score_mean is not None]
        if member[0].algo == algo and done:
            scored.append(member[: member.index(done[-1]) + 1])
    return sorted(scored, key=lambda m: (-(m[-1].score_mean or 0.0), m[-1].number))


def since_change(member: list[PodRecord]) -> tuple[int, float]:
    """Env steps and training seconds a member has run since it started or last copied another member."""
    steps, seconds = 0, 0.0
    for pod in reversed(member):
        steps += int(pod.steps or 0)
        seconds += float(pod.wall_time or 0.0)
        if pod.parent_id is None or pod.parent_id != _previous(member, pod):
            break
    return steps, seconds


def _previous(member: list[PodRecord], pod: PodRecord) -> str | None:
    i = member.index(pod)
    return member[i - 1].id if i > 0 else None


def _draw(low: float, high: float, rng: np.random.Generator) -> float:
    """A value from ``[low, high]``: log-uniform when ``low > 0`` (scales such as learning rates), else uniform."""
    if low > 0:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return float(rng.uniform(low, high))


def _like(reference: Any, value: float) -> int | float:
    """``value`` with the type of ``reference``: integers are rounded (and at least 1), floats stay floats."""
    return max(1, round(value)) if isinstance(reference, int) and not isinstance(reference, bool) else float(value)


def _clamp(config_cls: Any, name: str, value: float) -> float:
    """Keep ``value`` inside the bounds declared on the config field ``name`` (gt/ge/lt/le)."""
    field = config_cls.model_fields.get(name)
    if field is None:
        raise KeyError(f"{config_cls.__name__} has no hyperparameter {name!r}")
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            value = max(value, bound.ge)
        elif isinstance(bound, annotated_types.Gt):
            value = max(value, bound.gt + 1e-9 * max(1.0, abs(bound.gt)))
        elif isinstance(bound, annotated_types.Le):
            value = min(value, bound.le)
        elif isinstance(bound, annotated_types.Lt):
            value = min(value, bound.lt - 1e-9 * max(1.0, abs(bound.lt)))
    return value
