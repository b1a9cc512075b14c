"""Typed configuration of a tournament (YAML or Python), validated before any pod starts.

A minimal config::

    env: Pendulum-v1
    algos: {ppo: 1, sac: 1, td3: 1}    # the pool's mix, as a ratio
    target: -200                       # stop when the leaderboard's best evaluation reaches this
    seconds: 300                       # ... or after this much wall-clock time
    pod: {seconds: 20}                 # each pod trains this long, reports, and makes room for the next

Everything else has a documented default; unknown fields are rejected with their name.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from podium.config import ConfigError, PodSpec, boolean_error, load_yaml, refuse_booleans, validation_message
from podium.rundir import safe_name

__all__ = [
    "BacktestConfig",
    "GeneratorConfig",
    "PoolConfig",
    "SelectionConfig",
    "TournamentConfig",
    "load_tournament_config",
]

TOURNAMENT_EVAL_SHARE = 0.2
"""``PodSpec.eval_share`` of a tournament's pods unless ``pod.eval_share`` says otherwise."""

# PodSpec fields the tournament sets itself for every pod (they cannot appear under ``pod:``), and where to set them
_OWNED_POD_FIELDS = {
    "env": "env",
    "env_kwargs": "env_kwargs",
    "algo": "algos",
    "hparams": "hparams",
    "seed": "seed",
    "init_checkpoint": "generator (children start from their parent's checkpoint)",
    "target": "target",
    "select_episodes": "selection.episodes",
    "select_bar": "selection (the tournament sets each pod's bar from its leaderboard or its target)",
}

DEMO_CONFIG: dict[str, Any] = {
    "name": "demo",
    "env": "Pendulum-v1",
    "algos": {"ppo": 1, "sac": 1, "td3": 1},
    "target": -200.0,
    "seconds": 90.0,
    "pod": {"seconds": 4.0, "eval_every": 4096},
    "pool": {"max": 4},
}
"""``podium demo``: a short mixed tournament on Pendulum, ``examples/pendulum.yaml`` made shorter and stopping at
-200 (the threshold of podium's convergence tests); that example's -140 is close to the optimum and can take
minutes on two cores."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        return refuse_booleans(cls, data)  # seconds: true is not one second


def pod_threads(cpus_per_pod: float) -> int:
    """The torch/OpenMP threads of a CPU pod that needs ``cpus_per_pod`` cores: ``ceil(cpus_per_pod)``, at least 1."""
    return max(1, math.ceil(cpus_per_pod))


class PoolConfig(_Strict):
    """Size of the training pool. The orchestrator runs ``floor(free CPUs / cpus_per_pod)`` pods (and the
    same for GPUs when ``gpus_per_pod > 0``), clamped to ``[min, max]``, and follows the backend's
    resources while the tournament runs."""

    min: int = Field(default=1, ge=1)
    """Never fewer pods than this (even on a machine that looks too small)."""
    max: int = Field(default=8, ge=1)
    """Never more pods than this."""
    cpus_per_pod: float = Field(default=1.0, gt=0)
    """CPU cores one pod needs; a CPU pod pins its torch threads to ``ceil(cpus_per_pod)``."""
    gpus_per_pod: float = Field(default=0.0, ge=0)
    """GPUs one pod needs (fractions share a GPU); 0 = CPU pods."""

    @property
    def pod_threads(self) -> int:
        """The torch/OpenMP threads of a CPU pod (:func:`pod_threads`)."""
        return pod_threads(self.cpus_per_pod)

    def size(self, cpus: float, gpus: float = 0.0) -> int:
        """Pods that fit in ``cpus`` cores and ``gpus`` GPUs given each pod's need, clamped to ``[min, max]``."""
        fits = math.floor(cpus / self.cpus_per_pod + 1e-9)
        if self.gpus_per_pod > 0:
            fits = min(fits, math.floor(gpus / self.gpus_per_pod + 1e-9))
        return max(self.min, min(self.max, fits))

    @model_validator(mode="after")
    def _ordered(self) -> PoolConfig:
        if self.min > self.max:
            raise ValueError(f"pool.min ({self.min}) is larger than pool.max ({self.max}); lower min or raise max")
        return self


class GeneratorConfig(_Strict):
    """How the generator seeds new pods."""

    explore: float = Field(default=0.2, ge=0, le=1)
    """``scheme: leaderboard``: probability of a fresh pod (new seed, base hyperparameters) once the
    leaderboard has entries of the algorithm chosen; otherwise the new pod continues a leaderboard entry with
    mutated hyperparameters."""
    parent: Literal["rank", "uniform", "best"] = "rank"
    """``scheme: leaderboard``: choice of parent among the leaderboard entries of the chosen algorithm:
    ``rank`` = weight 1/rank, ``uniform`` = any entry, ``best`` = always the top one."""
    scheme: Literal["leaderboard", "truncation"] = "truncation"
    """Where a new pod comes from. ``truncation`` (the default): population-based training with truncation
    selection: each slot of the pool is a member that keeps training round after round from its own last
    checkpoint (same hyperparameters, optimiser and replay buffer; with fewer slots than algorithms in
    ``algos``, each algorithm has a member and they take turns in the slots); a member that has trained for at
    least ``ready_steps``/``ready_seconds`` since it last changed and whose score is in the bottom
    ``truncation`` fraction of its algorithm's members instead copies a member of the top fraction (its
    selected checkpoint) and mutates its hyperparameters. ``leaderboard``: a free slot starts a child of a
    leaderboard entry (or, with probability ``explore``, a fresh pod); every pod is a new lineage's step.
    Measured on two cores (BENCHMARKS.md), truncation reached LunarLanderContinuous's target in 5 seeds of 5
    where leaderboard did in 1; the two were level on MountainCarContinuous and Pendulum, and both met the
    trading goal."""
    losing_share: float = Field(default=0.25, gt=0, le=1)
    """Once every algorithm of the mix has ended a pod (finished or failed), an algorithm that is losing (its
    best leaderboard entry trails the best entry by more than ``losing_margin`` standard errors of the gap, or
    it has no entry) is drawn for new pods at this fraction of its share in ``algos``; the others share what
    it gives up. ``scheme: truncation`` keeps every member's algorithm: where members take turns in fewer
    slots, a losing algorithm's members take this fraction of its share of the rounds. 1 keeps the mix as
    configured, and so do entries scored on one episode each (no measure of the noise). Not zero: a demoted
    algorithm still runs now and then, and regains its share when its entries catch up
    (:func:`podium.tournament.generator.algo_shares`)."""
    losing_margin: float = Field(default=2.0, ge=0)
    """How many standard errors (``sqrt(se_best^2 + se_other^2)``, ``se = std /
    sqrt(episodes)`` of each entry's selection score) the gap must exceed before an algorithm counts as losing."""
    truncation: float = Field(default=0.25, gt=0, le=0.5)
    """``scheme: truncation``: the bottom fraction of each algorithm's members that continue from the top
    fraction (at least one member each once an algorithm has two)."""
    ready_steps: int = Field(default=0, ge=0)
    """``scheme: truncation``: env steps a member trains after it was created or last copied another before it
    may be replaced (it always finishes at least one round)."""
    ready_seconds: float = Field(default=0.0, ge=0)
    """``scheme: truncation``: the same in training seconds (both must hold)."""
    perturb: tuple[float, ...] = Field(default=(0.8, 1.2), min_length=1)
    """A mutated value is multiplied by one of these factors, chosen uniformly (PBT's usual x0.8 / x1.2)."""
    mutation_scale: float | None = Field(default=None, ge=1)
    """Instead of ``perturb``: multiply by a factor drawn log-uniformly from ``[1/scale, scale]``."""
    mutation_prob: float = Field(default=0.8, ge=0, le=1)
    """Probability that each mutable hyperparameter is perturbed in a child."""
    mutate: dict[str, list[str]] = Field(default_factory=dict)
    """Mutable hyperparameters per algorithm, e.g. ``{sac: [actor_lr, critic_lr]}``: a subset of what the
    algorithm declares (``AgentConfig.mutable``, e.g. ``podium.algos.sac.SACConfig.mutable``). Algorithms not
    listed mutate everything they declare. Values stay inside the declared range and the field's valid range."""
    ranges: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    """Search ranges per algorithm and hyperparameter, e.g. ``{td3: {exploration_noise: [0.05, 0.8]}}``
    (PBT's search space), replacing the range the algorithm declares for it (only declared hyperparameters can
    have one). A ranged hyperparameter is mutable and its mutations stay inside the range;
    every fresh pod except the first of its algorithm draws it from the range (log-uniformly when
    ``low > 0``, else uniformly), so the pool starts spread over the range rather than at one point;
    and a child redraws it with probability ``resample_prob`` instead of perturbing it. The first
    fresh pod of each algorithm keeps the base hyperparameters (podium's preset)."""
    resample_prob: float = Field(default=0.25, ge=0, le=1)
    """Probability that a ranged hyperparameter chosen for mutation is redrawn from its whole range (and that
    a searched choice chosen for mutation switches to another option)."""
    choices: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)
    """Categorical settings to search per algorithm, e.g. ``{td3: {noise_type: [gaussian, ou]}, sac: {use_sde:
    [false, true]}}``: options among those the algorithm declares (``AgentConfig.choices``). Every fresh pod
    except the first of its algorithm draws each one uniformly; a child switches it to another option with
    probability ``mutation_prob * resample_prob``, unless it changes the saved networks
    (``AgentConfig.shape``, e.g. gSDE's ``use_sde``): then the child keeps its parent's, since it continues
    the parent's checkpoint."""

    @field_validator("mutate")
    @classmethod
    def _lower_mutate(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return {algo.lower(): names for algo, names in value.items()}  # as algos' names are

    @field_validator("choices")
    @classmethod
    def _two_options(cls, value: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
        for algo, fields in value.items():
            for name, options in fields.items():
                if len(set(map(repr, options))) < 2:
                    raise ValueError(f"choices.{algo}.{name}: need at least two different options, got {options}")
        return {algo.lower(): fields for algo, fields in value.items()}

    @field_validator("ranges", mode="before")
    @classmethod
    def _no_booleans_in_ranges(cls, value: Any) -> Any:
        error = boolean_error(value)  # pydantic would read true as 1.0 (perturb: _Strict's rule covers it)
        if error is not None:
            raise error
        return value

    @field_validator("perturb")
    @classmethod
    def _positive_factors(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not all(math.isfinite(f) and f > 0 for f in value):
            raise ValueError(f"perturbation factors must be finite and > 0, got {list(value)}")
        return value

    @field_validator("ranges")
    @classmethod
    def _ordered_ranges(cls, value: dict[str, dict[str, tuple[float, float]]]) -> dict[str, Any]:
        for algo, fields in value.items():
            for name, (low, high) in fields.items():
                if not (math.isfinite(low) and math.isfinite(high) and low < high):
                    raise ValueError(f"ranges.{algo}.{name}: need finite low < high, got [{low}, {high}]")
        return {algo.lower(): fields for algo, fields in value.items()}

    @model_validator(mode="after")
    def _fields_of_the_scheme(self) -> GeneratorConfig:
        """A field set for the other scheme would do nothing: refuse it rather than ignore it. (Set to its default
        it changes nothing either way: a saved run's config, which holds every field, resumes.)"""
        only = {"leaderboard": ("explore", "parent"), "truncation": ("truncation", "ready_steps", "ready_seconds")}
        fields = type(self).model_fields
        for scheme, names in only.items():
            given = [n for n in names if n in self.model_fields_set and getattr(self, n) != fields[n].default]
            if given and self.scheme != scheme:
                verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
                default = "" if "scheme" in self.model_fields_set else ", the default"
                raise ValueError(
                    f"{', '.join(given)} only {verb} to scheme: {scheme}, and this generator's scheme is "
                    f"{self.scheme}{default}: set scheme: {scheme} to use {them}, or remove {them}"
                )
        return self


class SelectionConfig(_Strict):
    """How the leaderboard judges a pod: by a measurement, not by the best of its noisy evaluations."""

    episodes: int = Field(default=100, ge=0)
    """At the end of its round, each pod's best snapshot is re-scored on this many fresh episodes (seeds that
    training never used; ``PodSpec.select_episodes``) and ranked by that score; the stop-at-target decision uses
    it too (with the pods' ``confirm_margin``). 0: rank by the best training-time evaluation (the best of many
    noisy evaluations: optimistic)."""
    margin: float = Field(default=1.0, ge=0)
    """A pod displaces the last entry of a full leaderboard only if its score is higher by more than ``margin``
    standard errors of the difference between the two scores (``sqrt(s1^2/n1 + s2^2/n2)``): a difference
    inside the noise is not a better policy. 0: any higher score displaces."""


class BacktestConfig(_Strict):
    """A backtest run right after the tournament (trading envs): ``podium backtest`` on the leaderboard."""

    start: str = "2016-01-04"
    """First day of the test period."""
    end: str = "2017-11-10"
    """Last day of the test period."""
    top_k: int = Field(default=1, ge=1)
    """Backtest the ensemble of the leaderboard's best ``top_k`` policies (their mean action)."""
    generalisation: bool = False
    """Also backtest every pod's training snapshots (needs ``pod.snapshot_every``): test return vs
    training time."""


class TournamentConfig(_Strict):
    """A tournament: a pool of pods training asynchronously, a leaderboard keeping the best."""

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Names the default run directory, ``runs/NAME`` (``runs/NAME-2``, ... when that one is taken).
    Default: the name of the YAML file the config was read from (``examples/stock_dow29.yaml`` ->
    ``runs/stock_dow29``), else ``tournament-ENV-TIMESTAMP``."""
    env: str = "Pendulum-v1"
    """Environment id (podium tensor-native or gymnasium)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment."""
    algos: dict[str, float] = Field(default_factory=lambda: {"ppo": 1.0, "sac": 1.0, "td3": 1.0})
    """The pool's algorithm mix as a ratio, e.g. ``{ppo: 1, sac: 1, td3: 1}``; a child inherits its
    parent's algorithm, so the ratio holds for every pod started."""
    hparams: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Base hyperparameters per algorithm (over the presets), e.g. ``{sac: {batch_size: 256}}``."""

    @field_validator("hparams")
    @classmethod
    def _lower_hparams(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {algo.lower(): fields for algo, fields in value.items()}  # as algos' names are

    pod: dict[str, Any] = Field(default_factory=lambda: {"seconds": 20.0})
    """:class:`~podium.config.PodSpec` fields for every pod: its budget per round (``seconds``/``steps``),
    ``num_envs``, ``eval_episodes``, ``eval_every``, ``device``, ... (not env/algo/hparams/seed/target)."""
    target: float | None = None
    """Stop when a pod's score reaches this by the rule that stops a pod: its mean minus ``pod.confirm_margin``
    (default 2) standard errors at or above it, a wider margin for each later score at or above the target
    (the mean alone with ``selection.episodes: 0``; :func:`podium.tournament.scheduler.reaches`)."""
    seconds: float | None = Field(default=None, gt=0)
    """Wall-clock budget of the whole tournament (summed over resumes)."""
    steps: int | None = Field(default=None, gt=0)
    """Env-step budget of the whole tournament (all pods together)."""
    leaderboard_size: int = Field(default=8, ge=1)
    """Entries kept on the leaderboard (top-K by evaluation mean, ties by lower std)."""
    pool: PoolConfig = Field(default_factory=PoolConfig)
    """Training-pool size (elastic)."""
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    """How a pod's score for the leaderboard is measured, and the margin that displaces an entry."""
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    """How new pods are made."""
    max_failures: int = Field(default=5, ge=1)
    """Stop after this many pod failures in a row (a pod that crashes at start must not spin forever)."""
    backend: Literal["inline", "process", "ray"] = "process"
    """Where pods run: ``process`` (local subprocesses, the default), ``ray`` (Ray actors on a Ray cluster:
    ``pip install 'podium[ray]'``; see docs/tournament.md) or ``inline`` (this process, one pod at a time;
    for tests and debugging)."""
    address: str | None = None
    """``backend: ray`` only: the Ray cluster's address (``HOST:PORT`` of its head, or ``auto``). Default: start
    a Ray cluster on this machine, listening on 127.0.0.1 only, for the tournament's lifetime."""
    db: str | None = None
    """Leaderboard database URL (SQLAlchemy). Default: ``sqlite:///RUN_DIR/leaderboard.db``. PostgreSQL:
    ``postgresql://user:password@host:5432/dbname``."""
    seed: int = Field(default=0, ge=0)
    """Seeds the generator; pod seeds are derived from it."""
    backtest: BacktestConfig | None = None
    """Backtest the leaderboard on later data when the tournament ends (trading envs; see docs/trading.md)."""

    @field_validator("algos")
    @classmethod
    def _valid_ratio(cls, value: dict[str, float]) -> dict[str, float]:
        from podium.algos import get_algo

        if not value:
            raise ValueError("no algorithms given: set algos, e.g. {ppo: 1, sac: 1}")
        out = {}
        for name, weight in value.items():
            try:
                get_algo(name)
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
            if not (isinstance(weight, int | float) and math.isfinite(weight) and weight >= 0):
                raise ValueError(f"the ratio for {name} must be a finite number >= 0, got {weight!r}")
            out[name.lower()] = float(weight)
        if sum(out.values()) <= 0:
            raise ValueError(f"the ratio {value} has no positive weight; give at least one algorithm a weight > 0")
        return {k: v for k, v in out.items() if v > 0}

    @field_validator("pod")
    @classmethod
    def _pod_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        owned = [k for k in value if k in _OWNED_POD_FIELDS]
        if owned:
            raise ValueError(f"pod.{owned[0]} is set by the tournament itself; set {_OWNED_POD_FIELDS[owned[0]]}")
        if "steps" not in value and "seconds" not in value:
            raise ValueError("give each pod a budget per round: pod.seconds or pod.steps")
        return value

    @model_validator(mode="after")
    def _has_budget(self) -> TournamentConfig:
        if self.address is not None and self.backend != "ray":
            raise ValueError(f"address {self.address!r} is a Ray cluster's address: it needs backend: ray")
        if self.target is None and self.seconds is None and self.steps is None:
            raise ValueError("set at least one of target, seconds or steps, or the tournament would run forever")
        for what, algos in (
            ("hparams", self.hparams),
            ("generator.ranges", self.generator.ranges),
            ("generator.mutate", self.generator.mutate),
            ("generator.choices", self.generator.choices),
        ):
            for algo in algos:
                if algo not in self.algos:
                    raise ValueError(
                        f"{what}.{algo}: {algo} is not among the algorithms with a weight > 0 in algos "
                        f"{sorted(self.algos)}; give it a weight or remove {what}.{algo}"
                    )
        from podium.algos import get_algo

        for what, algos in (("mutate", self.generator.mutate), ("ranges", self.generator.ranges)):
            for algo, names in algos.items():
                declared = get_algo(algo).Config.mutable
                for name in names:
                    if name not in declared:
                        raise ValueError(
                            f"generator.{what}.{algo}: {name!r} is not a mutable {algo} hyperparameter "
                            f"(mutable: {', '.join(declared) or 'none'})"
                        )
        for algo, fields in self.generator.choices.items():
            declared_choices = get_algo(algo).Config.choices
            for name, options in fields.items():
                if name not in declared_choices:
                    raise ValueError(
                        f"generator.choices.{algo}: {name!r} is not a setting {algo} lets a tournament choose "
                        f"(choices: {', '.join(declared_choices) or 'none'})"
                    )
                bad = [o for o in options if o not in declared_choices[name]]
                if bad:
                    raise ValueError(
                        f"generator.choices.{algo}.{name}: {bad[0]!r} is not an option "
                        f"(options: {', '.join(map(str, declared_choices[name]))})"
                    )
        return self

    # ----------------------------------------------------------------- derived
    def pod_spec(self, algo: str, seed: int, **fields: Any) -> PodSpec:
        """The :class:`PodSpec` of a pod of ``algo`` (base hyperparameters unless ``hparams`` is given)."""
        data: dict[str, Any] = {
            "env": self.env,
            "env_kwargs": self.env_kwargs,
            "algo": algo,
            "hparams": dict(self.hparams.get(algo, {})),
            "seed": seed,
            "target": self.target,
            "select_episodes": self.selection.episodes,
            **self.pod,
            **fields,
        }
        if data.get("num_envs") is None:  # explicit, so that a child (preset off, full hparams) keeps it
            from podium.algos import get_algo
            from podium.algos.presets import preset_for

            preset = preset_for(algo, self.env) if self.pod.get("preset", True) else None
            data["num_envs"] = (preset and preset.num_envs) or get_algo(algo).default_num_envs
        if "torch_threads" not in data and data.get("device", "cpu") == "cpu":
            data["torch_threads"] = self.pool.pod_threads
        # a round is short and ends with a fresh score of its best snapshot (selection): evaluations during
        # it may take at most this share of it
        data.setdefault("eval_share", TOURNAMENT_EVAL_SHARE)
        try:
            return PodSpec(**data)
        except ValidationError as exc:
            raise ConfigError(validation_message(exc, f"pod spec for {algo}", PodSpec)) from None

    def mutable(self, algo: str) -> dict[str, tuple[float, float]]:
        """The hyperparameters the generator perturbs for ``algo`` and the range each stays in: what the
        algorithm declares (or ``generator.mutate``'s subset of it), with ``generator.ranges`` overriding."""
        from podium.algos import get_algo

        declared = get_algo(algo).Config.mutable
        names = self.generator.mutate.get(algo, list(declared))
        ranges = self.generator.ranges.get(algo, {})
        return {name: tuple(ranges.get(name, declared[name])) for name in dict.fromkeys([*names, *ranges])}


def load_tournament_config(
    path: str | Path | None = None, *, options: dict[str, str] | None = None, **overrides: Any
) -> TournamentConfig:
    """Read a tournament YAML file (optional) and apply keyword overrides (None = not given).

    ``options``: the command line's, for the error messages: the option that gave each override, by dotted
    field path (``{"seconds": "--seconds", "pool.max": "--pods"}``). Without it, an override is named as a
    keyword argument where a file gave the rest.

    Raises:
        ConfigError: the message names the file (or the option, or the argument), the field and the problem.
    """
    data: dict[str, Any] = load_yaml(path) if path is not None else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    data.update(given)
    if path is not None and "name" not in data:  # runs/stock_dow29 for examples/stock_dow29.yaml
        data["name"] = safe_name(Path(path).stem).strip("-._") or None
    try:
        return TournamentConfig(**data)
    except ValidationError as exc:
        where = str(path) if path else "tournament config"
        if options is not None:  # the command line's
            sources = {k: f"command line {o}" for k, o in options.items() if k.partition(".")[0] in given}
        else:  # Python's keyword arguments, where a file gave the rest
            sources = {k: f"argument {k}" for k in given} if path is not None else {}
        raise ConfigError(validation_message(exc, where, TournamentConfig, given=sources)) from None
