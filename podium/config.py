"""Typed configuration: the pod spec (what one training run is) and YAML loading with clear errors."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "ConfigError",
    "PodSpec",
    "boolean_among_numbers",
    "boolean_error",
    "load_yaml",
    "refuse_booleans",
    "validation_message",
]


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names the field and the fix."""


def validation_message(
    exc: ValidationError,
    where: str,
    model: type[BaseModel] | None = None,
    given: Mapping[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> str:
    """Turn a pydantic error into one line per bad field: ``where: field.path: problem (got value)``. With
    ``model`` (the model validated), an unknown top-level field is answered with the nearest field names.

    ``given`` names where some values came from instead of ``where``, by dotted field path (e.g. ``{"steps":
    "command line --steps"}``): an error at that path, or below it, reads ``command line --steps: problem``.
    ``prefix``: the path of the model validated inside the one the paths of ``given`` are in (``("hparams",)``
    for an algorithm's hyperparameters)."""
    lines: list[str] = []
    for err in exc.errors():
        path = (*prefix, *(str(p) for p in err["loc"]), *_item(err))
        loc = ".".join(path) or "(top level)"
        source = _given_as(path, given or {})
        msg = err["msg"] if not _item(err) else err["ctx"]["why"]  # the item is in the path
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see the documented fields)"
            fields = _fields_at(model, err["loc"][:-1]) if model is not None and err["loc"] else []
            close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=3, cutoff=0.6) if fields else []
            if close:
                msg = f"unknown field; did you mean {' or '.join(close)}?"
        whole = not err["loc"] and err["type"] == "value_error"  # a rule between fields: its message names them
        if whole:
            msg = msg.removeprefix("Value error, ")
        shown = err["type"] not in ("extra_forbidden", "boolean_number") and not whole  # (the input: all of it)
        got = f" (got {err['input']!r})" if shown and "input" in err else ""
        at = f"{where}: {msg}" if whole and not path else f"{where}: {loc}: {msg}{got}"
        line = f"{source}: {msg}{got}" if source else at
        if line not in lines:  # one value that breaks two rules (--pods 0: pool.min and pool.max) says so once
            lines.append(line)
    return "\n".join(lines)


def _item(err: Any) -> tuple[str, ...]:
    """The item below the error's field that :func:`boolean_error` named (``hparams``' ``hidden_sizes``)."""
    item = (err.get("ctx") or {}).get("item") if err["type"] == "boolean_number" else None
    return (str(item),) if item is not None else ()


def _given_as(path: tuple[str, ...], given: Mapping[str, str]) -> str | None:
    """Where the value at ``path`` was given (see :func:`validation_message`), with the rest of its path."""
    for i in range(len(path), 0, -1):
        source = given.get(".".join(path[:i]))
        if source is not None:
            rest = ".".join(path[i:])
            return f"{source}.{rest}" if rest else source
    return None


def boolean_among_numbers(value: Any) -> str | None:
    """What is wrong where ``value``, a list of numbers (or a mapping of them), holds ``true`` or ``false``, which
    pydantic would read as 1 and 0 (``"td3.noise: item 0 is true, ..."``); None when it holds none."""
    found = _boolean_in(value)
    return None if found is None else ": ".join([".".join(found[0]), found[1]] if found[0] else [found[1]])


def boolean_error(value: Any, item: str | None = None) -> PydanticCustomError | None:
    """:func:`boolean_among_numbers` as the error for a validator to raise; ``item``: the entry of the field it
    is about (``hparams``' ``hidden_sizes``), which :func:`validation_message` adds to the field's path."""
    why = boolean_among_numbers(value)
    if why is None:
        return None
    if item is None:
        return PydanticCustomError("boolean_number", "{why}", {"why": why})
    return PydanticCustomError("boolean_number", "{item}: {why}", {"why": why, "item": item})


def refuse_booleans(model: type[BaseModel], data: Any) -> Any:
    """The body of a ``mode="before"`` model validator: ``data`` unchanged, or the error of its first field that
    takes a number (or a list of them) and was given ``true`` or ``false`` (pydantic's lax mode reads them as
    1 and 0: ``steps: true`` would train one step, ``learning_rate: true`` at a step size of 1)."""
    if isinstance(data, dict):
        for name, field in model.model_fields.items():
            if name in data and _takes_numbers(field.annotation):
                error = boolean_error(data[name], name)
                if error is not None:
                    raise error
    return data


def _boolean_in(value: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str] | None:
    if isinstance(value, bool):
        return path, f"{str(value).lower()} is a boolean where a number belongs; give a number"
    if isinstance(value, dict):
        for key, item in value.items():
            found = _boolean_in(item, (*path, str(key)))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if isinstance(item, bool):
                shown = json.dumps(list(value), default=str)
                return path, f"item {i} is {str(item).lower()}, a boolean among numbers ({shown}); give numbers only"
    return None


def _fields_at(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The field names of the (nested) model at ``path`` below ``model``; [] where that is no model."""
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


class PodSpec(BaseModel):
    """Everything that defines one pod (one agent's training run).

    The algorithm's hyperparameters go in ``hparams`` and are validated against that algorithm's
    config class (e.g. :class:`podium.algos.ppo.PPOConfig`) when the pod is built.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    env: str = "CartPole-v1"
    """Environment id: podium tensor-native (``podium envs``) or any gymnasium id."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the environment's constructor."""
    eval_env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Overrides of ``env_kwargs`` for the evaluation env only (e.g. ``{random_start: false}`` to evaluate
    a trading policy from a fixed start)."""
    algo: str = "ppo"
    """Algorithm name (ppo, sac, td3, ddpg, dqn)."""
    hparams: dict[str, Any] = Field(default_factory=dict)
    """Algorithm hyperparameters; unset ones come from the preset (if any), then the algorithm's defaults."""
    preset: bool = True
    """Fill unset hyperparameters and ``num_envs`` from podium's tuned preset for this algo and env
    (``podium.algos.presets``), where one exists."""
    num_envs: int | None = Field(default=None, gt=0)
    """Training sub-environments (default: the algorithm's ``default_num_envs``)."""
    native_env: bool = True
    """Use podium's tensor-native env when one exists; False runs gymnasium's env via the adapter."""
    device: str = "cpu"
    """Torch device for envs and networks: cpu, cuda, cuda:N, mps."""
    seed: int = Field(default=0, ge=0)
    """Random seed (env, networks, exploration); 0 or more, as gymnasium's seeds."""
    steps: int | None = Field(default=None, gt=0)
    """Budget in env steps (all sub-envs together). At least one of steps/seconds/target must be set."""
    seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Budget in wall-clock seconds (a resumed run counts its earlier ones), checked after each collect-and-learn
    iteration: a run ends within one iteration past it (a fraction of a second for the presets on a CPU;
    GPU-sized rollouts on a CPU take longer)."""
    target: float | None = Field(default=None, allow_inf_nan=False)
    """Stop as soon as a snapshot's evaluation mean reaches this score and its confirmation on fresh episodes
    (``confirm_episodes``, ``confirm_margin``) does too."""
    eval_episodes: int = Field(default=32, gt=0)
    """Episodes per evaluation, run in parallel."""
    eval_every: int | None = Field(default=None, gt=0)
    """Evaluate after every this many env steps (at the end of the learning phase that crosses it). None
    (default): whenever the evaluator is free if it runs in its own process (``eval_mode`` process: scoring
    there costs training nothing, so the pod learns of a reached target as soon as it can), else every
    5,000 env steps."""
    eval_share: float | None = Field(default=None, gt=0, le=1)
    """With the evaluator inline (``eval_mode``), the largest share of the pod's wall-clock that evaluations
    may take: after an evaluation that took ``e`` seconds, the next one waits for at least
    ``e * (1 - share) / share`` seconds of training (and ``eval_every`` env steps), and none comes within
    two such gaps of the end of the budget, whose final evaluation is near. None (default): every
    ``eval_every`` steps, however long evaluations take. Tournaments set 0.2 for their one-core pods, whose
    32-episode evaluations took 30-75% of a 20 s round on LunarLander."""
    eval_deterministic: bool = True
    """Evaluate the deterministic policy."""
    eval_mode: Literal["auto", "process", "thread", "inline"] = "auto"
    """Where the evaluator scores snapshots. ``process``: a child process on another core, while training
    goes on (the paper's evaluator service). ``thread``: a background thread (suits GPU pods; on a CPU,
    training and evaluation share Python's interpreter lock). ``inline``: training waits for each
    evaluation (cheapest on one core; reproducible to the step). ``auto``: ``thread`` on a GPU; on a CPU
    ``process`` when the pod's cores (``torch_threads``, else the cores it may use) leave training enough —
    two for classic-control networks, three for MuJoCo-sized ones, which train faster on every thread they
    get — else ``inline`` (:func:`podium.pod.pod.plan_cpu`)."""
    confirm_episodes: int = Field(default=100, ge=0)
    """Before a pod stops at its ``target``, the snapshot that reached it is re-scored on this many fresh
    episodes (seeds training and routine evaluations never use) and must reach the target there too.
    0 turns confirmation off (the routine evaluation decides, a noisy and optimistic test); at least 30
    otherwise."""
    confirm_margin: float = Field(default=2.0, ge=0)
    """A first confirmation passes when its mean minus this many standard errors of the mean (``std /
    sqrt(confirm_episodes)``) is at or above the target (:func:`podium.pod.evaluator.confirms`). The pod
    tries every snapshot that reaches the target, so without a margin a policy just below it passes by luck
    now and then; later tries ask for more (:func:`podium.pod.evaluator.margin_for`: 2.53 on the second,
    3.51 on the tenth). 0 compares the mean alone."""
    checkpoint_every: float = Field(default=30.0, ge=0)
    """Seconds between periodic checkpoints (``last.pt``); 0 = after every learning phase."""
    snapshot_every: float | None = Field(default=None, gt=0)
    """Also keep a snapshot ``checkpoints/snapshots/stepNNNNNNNNNNNN.pt`` every this many seconds of training
    (e.g. to backtest how the policy generalises as training goes on); None = no snapshots."""
    init_checkpoint: str | None = None
    """Start from this checkpoint's networks (e.g. a leaderboard entry; a pod's run directory: its ``best.pt``,
    else ``last.pt``, as :func:`podium.load` reads one); counters start at zero. An
    off-policy pod also starts with the replay buffer saved next to it (``replay.pt``), if there is one: the
    buffer as that run left it, which for a ``best.pt`` holds experience from after the best snapshot too."""
    save_replay_buffer: bool = True
    """Off-policy pods: keep the replay buffer in ``checkpoints/replay.pt`` (written with ``last.pt`` at
    each time-based checkpoint and when the run stops, at its end or on Ctrl-C/SIGTERM; not after every phase
    with ``checkpoint_every: 0``, so a killed run resumes with the buffer of its last clean stop, with a
    warning), so a resumed pod, or a tournament child
    starting from this pod, continues with its experience instead of an empty buffer. Its size is the
    buffer's filled part: about ``4 * (2 * obs_dim + act_dim + 2)`` bytes per transition."""
    select_episodes: int = Field(default=0, ge=0)
    """At the end of the run, re-score the best snapshot on this many fresh episodes (seeds nothing else uses)
    and report it as ``selection_mean``: the best of many noisy evaluations is biased upwards (a winner's
    curse), a fresh score is not. Tournaments rank pods by it. 0 = off."""
    select_bar: float | None = None
    """The score below which the selection score makes no difference (a tournament sets the last entry of its
    full leaderboard, or its target if lower; under ``scheme: truncation``, the target for an algorithm's
    lone member). On an env whose copies step one by one (gymnasium's through
    the adapter, MuJoCo C), the selection is then played in four parts of at least 25 episodes and stops
    after a part where the mean plus 3.5 standard errors is still below the bar: a pod that cannot enter
    costs a quarter of the episodes. Such a score counts fewer ``selection_episodes`` and leans low (it
    stopped because it was low), but it is only ever one below the bar. None: every episode is played."""
    learners: int = Field(default=1, ge=1)
    """Learner processes in this pod (the paper's learner parallelism). Each collects from its own envs
    (``num_envs`` sub-envs, other seeds) and learns; all of them average their networks and optimiser
    moments, and pool their normaliser statistics, every ``fuse_every`` learning phases
    (``torch.distributed`` with gloo, bound to the loopback interface). Env steps count every learner's.
    1 = the usual single learner."""
    workers: int = Field(default=0, ge=0)
    """Rollout-worker processes (the paper's worker parallelism, pipelined). 0 (default): the pod steps its
    env itself, between learning phases. ``W >= 1``: W processes, each stepping ``num_envs / W`` sub-envs of
    its own env on the CPU, collect the next rollout while the learner learns on the previous one, so acting
    and learning overlap (the acting policy is one learning phase behind). Worth it for envs that cannot be
    tensor-batched (gymnasium's MuJoCo or Box2D envs through the adapter). ``num_envs`` must be a multiple
    of W; a pod then uses W + 1 cores (set the tournament's ``cpus_per_pod`` to match). With ``learners: K``
    every learner has its own W workers: K * (W + 1) processes."""
    fuse_every: int = Field(default=1, ge=1)
    """Learning phases between two fusions of the learners (with ``learners > 1``)."""
    torch_threads: int | None = Field(default=None, gt=0)
    """Cores the pod may use on a CPU (default: those this process may use); an evaluator process takes one of
    them, training's torch threads the rest — one thread for classic-control networks whatever this says
    unless it is set (one is fastest for them, and fair to other pods), all for MuJoCo-sized networks
    (:func:`podium.pod.pod.plan_cpu`). On accelerators: torch's intra-op threads (default: torch's own)."""
    tensorboard: bool = True
    """Write TensorBoard scalars to ``RUN_DIR/tb``."""

    @field_validator("algo")
    @classmethod
    def _known_algo(cls, value: str) -> str:
        from podium.algos import get_algo

        try:
            get_algo(value)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        return value.lower()

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        return refuse_booleans(cls, data)

    @field_validator("hparams")
    @classmethod
    def _no_booleans_for_numbers(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from podium.algos import algo_names, get_algo

        algo = info.data.get("algo")  # absent when it was refused
        fields = get_algo(algo).Config.model_fields if algo in algo_names() else {}
        for name, item in value.items():
            if name in fields and _takes_numbers(fields[name].annotation):
                error = boolean_error(item, name)
                if error is not None:
                    raise error
        return value

    @field_validator("init_checkpoint", mode="before")
    @classmethod
    def _path_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, os.PathLike) else value  # a pathlib.Path is a path too

    @field_validator("confirm_episodes")
    @classmethod
    def _meaningful_confirmation(cls, value: int) -> int:
        if 0 < value < 30:
            raise ValueError(
                f"{value} confirmation episodes give a standard error of the mean of std/{value**0.5:.1f}, too "
                "noisy to confirm a target; use at least 30 (default 100, std/10), or 0 to turn confirmation off"
            )
        return value

    @model_validator(mode="after")
    def _has_budget(self) -> PodSpec:
        if self.steps is None and self.seconds is None and self.target is None:
            raise ValueError("set at least one of steps, seconds or target, or the pod would train forever")
        if self.workers and self.num_envs is not None and self.num_envs % self.workers:
            raise ValueError(
                f"num_envs: {self.num_envs} cannot be split evenly over workers: {self.workers}; "
                "make num_envs a multiple of workers"
            )
        return self


def _takes_numbers(annotation: Any) -> bool:
    """Whether a field of this type takes a number or a list or tuple of numbers (``int``, ``float | None``,
    ``tuple[int, ...]``, ``list[float] | None``, each possibly ``Annotated`` with constraints), and never a
    boolean."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if annotation in (int, float):
        return True
    if get_origin(annotation) in (Union, UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return bool not in options and any(_takes_numbers(a) for a in options)
    if get_origin(annotation) not in (list, tuple, Sequence):
        return False
    items = [a for a in get_args(annotation) if a is not Ellipsis]
    items = [get_args(a)[0] if get_origin(a) is Annotated else a for a in items]
    return bool(items) and all(a in (int, float) for a in items)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; raise :class:`ConfigError` naming the file for syntax errors or non-mappings."""
    path = Path(path)
    if path.is_dir():
        from podium.rundir import PodDir, TournamentDir

        if TournamentDir(path).holds_tournament():
            what = TournamentDir(path).describe()
        elif PodDir(path).holds_run():
            what = PodDir(path).describe()
        else:
            what = "give the path of a YAML file"
        raise ConfigError(f"config file {path} is a directory, not a YAML file; {what}")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value at the top level, got {type(data).__name__}")
    return data
