"""The agent interface every algorithm implements, and the algorithm registry.

An :class:`Agent` is one algorithm's networks, optimisers and normalisers. It has two sides:

* the **worker** side — :meth:`Agent.explore` picks actions for a batch of observations and
  :meth:`Agent.record` writes the resulting transitions into the agent's own buffer
  (:meth:`Agent.make_buffer`); :attr:`Agent.rollout_steps` says how many env steps per sub-env the
  worker collects between two learning phases;
* the **learner** side — :meth:`Agent.learn` runs one learning phase on the buffer; it is built from
  :meth:`Agent.update`, one gradient step on one batch, which returns losses for logging.

:meth:`Agent.act` is the deployment policy (deterministic by default), and ``state_dict`` /
``load_state_dict`` cover networks, optimisers and normalisation statistics.
New algorithms plug in by subclassing :class:`Agent` and calling :func:`register_algo`.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

import gymnasium as gym
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from podium.config import refuse_booleans

__all__ = ["Agent", "AgentConfig", "HiddenSizes", "algo_names", "get_algo", "register_algo"]

HiddenSizes = tuple[Annotated[int, Field(gt=0)], ...]
"""Hidden layer widths, input to output: each at least 1 (an empty tuple: no hidden layer, a linear map)."""


class AgentConfig(BaseModel):
    """Base of every algorithm's hyperparameters: typed, documented, unknown fields rejected.

    ``mutable`` declares which numeric hyperparameters a tournament may perturb (population-based
    training) and the range a perturbed value must stay in: the algorithm knows its own knobs, so the
    tournament does not hard-code names per algorithm. ``choices`` declares its categorical settings a
    tournament may search (``generator.choices``) and their options; those in ``shape`` change which
    modules the agent saves, so a child keeps its parent's value (only fresh pods draw them).
    ``alternatives`` are groups of fields that say one thing in two ways (PPO's ``num_steps`` and
    ``rollout_size``): a user who sets one of a group overrides the preset's other ones too.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True, frozen=False)
    mutable: ClassVar[dict[str, tuple[float, float]]] = {}
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {}
    shape: ClassVar[frozenset[str]] = frozenset()
    alternatives: ClassVar[tuple[frozenset[str], ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        return refuse_booleans(cls, data)  # learning_rate: true is not a step size of 1


class Agent(ABC):
    """One algorithm: networks + optimisers + normalisers, with a worker side and a learner side.

    Args:
        observation_space: a sub-env's observation space (``Box``).
        action_space: a sub-env's action space (``Box`` or ``Discrete``).
        config: the algorithm's hyperparameters (an instance of ``cls.Config``).
        num_envs: number of sub-envs the worker steps (sizes the buffers).
        device: where networks and buffers live (normally the env's device).
    """

    name: ClassVar[str]
    Config: ClassVar[type[AgentConfig]]
    on_policy: ClassVar[bool]
    discrete_actions: ClassVar[tuple[bool, ...]] = (True, False)  # which action spaces it supports
    default_num_envs: ClassVar[int] = 16  # training sub-envs when the pod spec does not say
    added_modules: ClassVar[dict[str, str]] = {}
    """Modules that older checkpoints lack, with what the agent keeps instead when loading one."""
    stop_early: Callable[[], bool] | None = None
    """Set by a pod that trains towards a target beside a concurrent evaluator: returns True once a confirmed
    target is waiting, and an agent whose learning phase runs long (PPO's epochs) ends it at its next epoch
    instead of training on for a run that stops anyway. None (the default): never asked."""

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Box | gym.spaces.Discrete,
        config: AgentConfig,
        num_envs: int,
        device: torch.device,
    ) -> None:
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise ValueError(
                f"{self.name} needs a flat Box observation space, got {observation_space!r}; "
                "flatten it (gymnasium.wrappers.FlattenObservation) first"
            )
        discrete = isinstance(action_space, gym.spaces.Discrete)
        if not discrete and not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
            raise ValueError(
                f"{self.name} needs a Discrete or a flat Box action space, got {action_space!r}; for a Box of "
                "several axes, wrap the env in a gymnasium.ActionWrapper that takes a flat action and reshapes it"
            )
        if discrete not in self.discrete_actions:
            kind = "Discrete" if discrete else "Box (continuous)"
            fits = [n for n in algo_names() if discrete in get_algo(n).discrete_actions]
            raise ValueError(
                f"{self.name} cannot handle {kind} action spaces ({action_space!r}); "
                f"algorithms that can: {', '.join(fits)}"
            )
        self.observation_space = observation_space
        self.action_space = action_space
        self.discrete = discrete
        self.obs_dim = int(observation_space.shape[0])
        self.action_dim = int(action_space.n) if discrete else int(action_space.shape[0])
        self.config = config
        self.budget_steps: int | None = None  # this learner's share of the pod's step budget (set by the pod)
        self.num_envs = num_envs
        self.device = device
        if not discrete:
            low = torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
            high = torch.as_tensor(action_space.high, dtype=torch.float32, device=device)
            if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
                raise ValueError(
                    f"{self.name} needs a bounded Box action space (it squashes its actions into [low, high]), got "
                    f"{action_space!r}: wrap the env in gymnasium.wrappers.RescaleAction or ClipAction with finite "
                    "bounds and register the wrapped env"
                )
            self.action_scale = (high - low) / 2.0
            self.action_bias = (high + low) / 2.0

    # ----------------------------------------------------------------- action scaling
    def scale_action(self, unit_action: torch.Tensor) -> torch.Tensor:
        """Map an action in ``[-1, 1]^d`` to the env's bounds ``[low, high]``."""
        return unit_action * self.action_scale + self.action_bias

    def unscale_action(self, env_action: torch.Tensor) -> torch.Tensor:
        """Map an env action in ``[low, high]`` back to ``[-1, 1]^d``."""
        return (env_action - self.action_bias) / self.action_scale

    # ----------------------------------------------------------------- deployment
    @abstractmethod
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Actions for ``obs [B, obs_dim]``: ``[B]`` int64 (Discrete) or ``[B, act_dim]`` in env units (Box)."""

    # ----------------------------------------------------------------- worker side
    @property
    @abstractmethod
    def rollout_steps(self) -> int:
        """Env steps per sub-env that the worker collects before each learning phase."""

    @abstractmethod
    def make_buffer(self) -> Any:
        """Allocate this agent's buffer (rollout or replay) on ``self.device``."""

    @abstractmethod
    def explore(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Exploration actions for ``obs [N, obs_dim]`` (env units) and extras the buffer needs."""

    def explored(self, obs: torch.Tensor) -> None:  # noqa: B027 (an optional hook)
        """Account for one exploration step from ``obs [N, obs_dim]``: update what acting updates besides
        the actions (observation normaliser, env-step counter). :meth:`explore` calls it; so does a learner
        for the steps its rollout-worker processes took (:class:`~podium.pod.worker.WorkerGroup`). Nothing
        by default."""

    def episodes_ended(self, done: torch.Tensor) -> None:  # noqa: B027 (an optional hook)
        """The ``[N]`` mask of sub-envs whose episode just ended, for exploration state kept per episode
        (e.g. temporally correlated noise restarts from 0). Nothing by default."""

    @abstractmethod
    def record(
        self,
        buffer: Any,
        obs: torch.Tensor,
        actions: torch.Tensor,
        extras: dict[str, torch.Tensor],
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        final_obs: torch.Tensor,
    ) -> None:
        """Write one batched transition into ``buffer``. ``next_obs`` is the post-auto-reset observation,
        ``final_obs`` the true last observation of finished episodes (bootstrap on truncation)."""

    # ----------------------------------------------------------------- learner side
    @abstractmethod
    def learn(self, buffer: Any, next_obs: torch.Tensor) -> dict[str, float]:
        """One learning phase on ``buffer`` (several :meth:`update` calls); returns mean losses."""

    @abstractmethod
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient step on ``batch``; returns detached scalar losses/statistics."""

    @property
    def gradient_batch(self) -> int:
        """Transitions per gradient step (a minibatch or a replay batch); 0 when the agent does not say."""
        return 0

    @property
    def widest_matmul(self) -> int:
        """Multiply-adds of the largest matrix product of a gradient step: :attr:`gradient_batch` x the largest
        weight of :meth:`modules` (all members of an ensemble layer). A pod on a CPU decides from it whether
        training gains from more than one thread (:func:`podium.pod.pod.plan_cpu`)."""
        weights = [p.numel() for m in self.modules().values() for p in m.parameters() if p.dim() >= 2]
        return self.gradient_batch * max(weights, default=0)

    # ----------------------------------------------------------------- persistence
    @abstractmethod
    def modules(self) -> dict[str, torch.nn.Module]:
        """Named networks (and normalisers) whose parameters are saved, averaged and evaluated."""

    @abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Named optimisers."""

    def unsaved_parameters(self) -> list[str]:
        """Tensors an optimiser trains that no module in :meth:`modules` holds (they would be lost by
        ``state_dict``); empty for a correct agent. Each is named ``"optimiser[group][index] shape"``."""
        saved = {id(p) for m in self.modules().values() for p in m.parameters()}
        return [
            f"{name}[{g}][{i}] {tuple(p.shape)}"
            for name, opt in self.optimizers().items()
            for g, group in enumerate(opt.param_groups)
            for i, p in enumerate(group["params"])
            if id(p) not in saved
        ]

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimisers and normalisers (tensors and plain numbers only: loads with ``weights_only``).

        Raises:
            RuntimeError: an optimiser trains a tensor that no saved module holds (a bug in the agent:
                every trainable tensor must live in a module returned by :meth:`modules`).
        """
        missing = self.unsaved_parameters()
        if missing:
            raise RuntimeError(
                f"{self.name} trains tensors that its modules() do not hold, so a checkpoint would lose them: "
                f"{', '.join(missing)}; put them in a module listed by modules()"
            )
        state: dict[str, Any] = {f"module.{k}": m.state_dict() for k, m in self.modules().items()}
        state.update({f"optim.{k}": o.state_dict() for k, o in self.optimizers().items()})
        state.update({f"extra.{k}": v for k, v in self.extra_state().items()})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`. Raises ``ValueError`` naming the first missing/mismatched part."""
        unknown = sorted(k for k in state if k.startswith("module.") and k[len("module.") :] not in self.modules())
        if unknown:
            raise ValueError(
                f"checkpoint has {', '.join(unknown)}, which this {self.name} agent does not have: it was trained "
                "with other options (e.g. use_sde); load it with the hyperparameters it was trained with"
            )
        for kind, items in (("module", self.modules()), ("optim", self.optimizers())):
            for key, obj in items.items():
                if kind == "module" and key in self.added_modules and f"module.{key}" not in state:
                    warnings.warn(
                        f"this checkpoint predates {self.name}'s saved {key!r}; it keeps its initial value "
                        f"({self.added_modules[key]})",
                        stacklevel=2,
                    )
                    continue
                if f"{kind}.{key}" not in state:
                    raise ValueError(f"checkpoint has no '{kind}.{key}' for {self.name}; is it from another algorithm?")
                # optimiser hyperparameters (lr, betas, ...) come from this agent's config, not the file:
                # a child pod starting from its parent's checkpoint runs with its own (mutated) values
                hypers = [{k: v for k, v in g.items() if k != "params"} for g in getattr(obj, "param_groups", [])]
                try:
                    obj.load_state_dict(state[f"{kind}.{key}"])
                    for group, own in zip(getattr(obj, "param_groups", []), hypers, strict=True):
                        group.update(own)
                except (RuntimeError, ValueError, KeyError) as exc:
                    raise ValueError(
                        f"checkpoint part '{kind}.{key}' does not fit this {self.name} agent: {exc}"
                    ) from exc
        self.load_extra_state({k[len("extra.") :]: v for k, v in state.items() if k.startswith("extra.")})

    def load_modules(self, state: dict[str, Any]) -> None:
        """Load only the modules (networks and normalisers) of a :meth:`state_dict`: enough to act, e.g.
        for an evaluation snapshot. Optimisers and counters are left as they are."""
        for key, module in self.modules().items():
            if f"module.{key}" in state:
                module.load_state_dict(state[f"module.{key}"])

    def extra_state(self) -> dict[str, Any]:
        """Non-module state to checkpoint (e.g. an entropy coefficient); tensors or numbers."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`extra_state`; the default agent has none to load."""
        if state:
            raise ValueError(f"checkpoint has extra state {sorted(state)} that {self.name} does not know")


# ----------------------------------------------------------------- registry
_ALGOS: dict[str, type[Agent]] = {}


def register_algo(cls: type[Agent]) -> type[Agent]:
    """Class decorator: make an :class:`Agent` subclass available by ``cls.name`` (``--algo NAME``)."""
    _ALGOS[cls.name.lower()] = cls
    return cls


_BUILTIN = ("ppo", "sac", "td3", "ddpg", "dqn")


def _load_builtin() -> None:
    """Import the built-in algorithm modules (each registers itself)."""
    for module in _BUILTIN:
        importlib.import_module(f"podium.algos.{module}")


def algo_names() -> list[str]:
    """Names of all registered algorithms."""
    _load_builtin()
    return sorted(_ALGOS)


def get_algo(name: str) -> type[Agent]:
    """The :class:`Agent` class registered as ``name`` (case-insensitive).

    Raises:
        KeyError: unknown name, with close matches.
    """
    _load_builtin()
    key = name.lower()
    if key not in _ALGOS:
        close = difflib.get_close_matches(key, list(_ALGOS), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise KeyError(f"unknown algorithm {name!r}.{hint} Available: {', '.join(sorted(_ALGOS))}")
    return _ALGOS[key]
