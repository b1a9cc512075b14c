"""Generator: decides what the next pod trains — a fresh agent, or a leaderboard entry's checkpoint with
mutated hyperparameters (exploit, then explore, as in population-based training).

1. The algorithm is picked so that the running pool follows the configured ratio (the one furthest
   below its share goes next; a child inherits its parent's algorithm, so this holds for every pod).
2. With probability ``generator.explore``, or when the leaderboard holds no entry of that algorithm,
   the pod starts fresh with a new seed: the base hyperparameters for the first pod of its algorithm,
   later ones with each hyperparameter in ``generator.ranges`` drawn from its range.
3. Otherwise a parent is picked from that algorithm's entries (by rank, uniformly, or the best) and the
   child starts from the parent's checkpoint, each mutable hyperparameter changed with probability
   ``mutation_prob``: multiplied by a factor drawn log-uniformly from
   ``[1/mutation_scale, mutation_scale]``, or, for a ranged one with probability ``resample_prob``,
   redrawn from its range. Values stay inside the field's valid range and inside their own range.

Decisions are drawn from a random stream seeded by (tournament seed, pod number), so a resumed
tournament makes the same decisions it would have made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import annotated_types
import numpy as np

from podium.algos import get_algo
from podium.algos.presets import preset_for
from podium.config import PodSpec
from podium.tournament.config import TournamentConfig
from podium.tournament.leaderboard import Entry

__all__ = ["Generator", "Plan", "effective_hparams"]


@dataclass(frozen=True)
class Plan:
    """The generator's decision for one new pod."""

    spec: PodSpec
    parent: Entry | None
    mutated: dict[str, tuple[Any, Any]]
    """Mutated hyperparameters: name -> (parent's value, child's value)."""
    sampled: dict[str, Any] = field(default_factory=dict)
    """A fresh pod's hyperparameters drawn from ``generator.ranges``: name -> value."""


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

    def choose_algo(self, running: list[str], started: list[str]) -> str:
        """The algorithm furthest below its share in the running pool (ties: over all pods started so far,
        then the config's order)."""

        def deficit(algo: str) -> tuple[float, float]:
            now = self.shares[algo] * (len(running) + 1) - running.count(algo)
            ever = self.shares[algo] * (len(started) + 1) - started.count(algo)
            return (now, ever)

        return max(self.shares, key=deficit)

    def next(self, number: int, entries: list[Entry], running: list[str], started: list[str]) -> Plan:
        """Plan pod number ``number`` given the leaderboard ``entries`` (best first) and the algorithms of
        the running pods and of all pods started so far."""
        g = self.config.generator
        rng = np.random.default_rng([self.config.seed, number])
        algo = self.choose_algo(running, started)
        seed = int(rng.integers(0, 2**31 - 1))
        candidates = [e for e in entries if e.algo == algo]
        explore = rng.random() < g.explore
        ranges = g.ranges.get(algo, {})
        if not candidates or explore:
            if not ranges or algo not in started:
                return Plan(self.config.pod_spec(algo, seed), None, {})
            base = effective_hparams(self.config.pod_spec(algo, seed))
            sampled = {name: _like(base[name], _draw(low, high, rng)) for name, (low, high) in ranges.items()}
            hparams = {**self.config.hparams.get(algo, {}), **sampled}
            return Plan(self.config.pod_spec(algo, seed, hparams=hparams), None, {}, sampled)
        parent = self._pick_parent(candidates, rng)
        hparams = dict(parent.hparams)
        mutated = {}
        config_cls = get_algo(algo).Config
        for name in self.config.mutable(algo):
            if name not in hparams or rng.random() >= g.mutation_prob:
                continue
            value = hparams[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if name in ranges and rng.random() < g.resample_prob:
                new = _draw(*ranges[name], rng)
            else:
                factor = math.exp(rng.uniform(-math.log(g.mutation_scale), math.log(g.mutation_scale)))
                new = value * factor
            if name in ranges:
                new = min(max(new, ranges[name][0]), ranges[name][1])
            new = _like(value, _clamp(config_cls, name, new))
            if new != value:
                hparams[name] = new
                mutated[name] = (value, new)
        spec = self.config.pod_spec(algo, seed, hparams=hparams, init_checkpoint=parent.checkpoint, preset=False)
        return Plan(spec, parent, mutated)

    def _pick_parent(self, candidates: list[Entry], rng: np.random.Generator) -> Entry:
        how = self.config.generator.parent
        if how == "best":
            return candidates[0]
        if how == "uniform":
            return candidates[int(rng.integers(len(candidates)))]
        weights = np.array([1.0 / (i + 1) for i in range(len(candidates))])
        return candidates[int(rng.choice(len(candidates), p=weights / weights.sum()))]


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
