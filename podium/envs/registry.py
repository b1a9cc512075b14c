"""``make()``: one call for every environment, tensor-native where podium has one.

podium's own batched envs are registered here by id. Any other id that gymnasium knows is wrapped
by :class:`~podium.envs.gym_adapter.GymVecEnv`, so ``make("LunarLander-v3", num_envs=8)`` works too.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing this module costs neither torch nor gymnasium (``podium`` answers fast)
    from podium.envs.base import VecEnv

__all__ = [
    "EnvSpec",
    "check_env_id",
    "describe_space",
    "import_env_module",
    "known_to_new_processes",
    "list_envs",
    "make",
    "register",
    "registry",
]


@dataclass(frozen=True)
class EnvSpec:
    """A registered tensor-native environment.

    Attributes:
        id: the name passed to :func:`make` (gymnasium style, e.g. ``"CartPole-v1"``).
        entry_point: a :class:`VecEnv` subclass or factory, or ``"module.path:ClassName"`` (imported lazily).
        kwargs: default keyword arguments for the constructor; ``make(**kwargs)`` overrides them.
        description: one line shown by ``podium envs``.
        observation, action: one sub-env's spaces in short form (``"Box(4,)"``, ``"Discrete(2)"``, see
            :func:`describe_space`) and ``time_limit`` its episode limit in steps (None: none), shown by
            ``podium envs`` without building the env; empty when not given (then it is built to find out).
    """

    id: str
    entry_point: str | Callable[..., VecEnv]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    observation: str = ""
    action: str = ""
    time_limit: int | None = None

    def load(self) -> Callable[..., VecEnv]:
        """Import and return the constructor."""
        if callable(self.entry_point):
            return self.entry_point
        module, _, name = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), name)


registry: dict[str, EnvSpec] = {}


def register(
    id: str,
    entry_point: str | Callable[..., VecEnv],
    *,
    description: str = "",
    observation: str = "",
    action: str = "",
    time_limit: int | None = None,
    override: bool = False,
    **kwargs: Any,
) -> EnvSpec:
    """Register a tensor-native environment under ``id`` so that :func:`make` and ``podium train`` find it.

    Args:
        id: the name to register (e.g. ``"MyRobot-v0"``).
        entry_point: a :class:`VecEnv` subclass (or factory) taking ``num_envs`` and ``device`` keyword
            arguments, or its import path ``"package.module:ClassName"``.
        description: one line for ``podium envs``.
        observation, action, time_limit: what ``podium envs`` shows without building the env (optional).
        override: replace an existing registration instead of raising.
        **kwargs: default constructor arguments.

    Raises:
        ValueError: ``id`` is already registered and ``override`` is False.
    """
    if id in registry and not override:
        raise ValueError(f"environment {id!r} is already registered; pass override=True to replace it")
    spec = EnvSpec(id, entry_point, dict(kwargs), description, observation, action, time_limit)
    registry[id] = spec
    return spec


def describe_space(space: Any) -> str:
    """A space in the short form of :class:`EnvSpec`: ``Box(4,)``, ``Discrete(2)`` (else its ``str``)."""
    name = type(space).__name__
    if name == "Box":
        return f"Box{tuple(space.shape)}"
    if name == "Discrete":
        return f"Discrete({int(space.n)})"
    return str(space)


def list_envs() -> list[EnvSpec]:
    """All registered tensor-native environments, sorted by id."""
    return [registry[k] for k in sorted(registry)]


def import_env_module(id: str) -> str:
    """``"package.module:EnvId"`` (gymnasium's convention): import ``package.module``, which registers
    ``EnvId`` with podium or gymnasium, and return ``"EnvId"``; an id without a module is returned as it is.
    Giving the module in the id is how a pod in another process (a tournament's) finds an env of your own.

    Raises:
        KeyError: the module cannot be imported (the message says what failed).
    """
    module, sep, name = id.rpartition(":")
    if not sep or id in registry:  # (an id registered with its colon is that id)
        return id
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise KeyError(
            f"environment {id!r}: cannot import {module!r}, the module that should register {name!r} ({exc}); "
            "check the module's name and that it is importable here (installed, or on PYTHONPATH)"
        ) from None
    return name


def known_to_new_processes(id: str) -> bool:
    """Whether a new Python process can make ``id``: one of podium's own envs, an env gymnasium registers as
    it is imported, or a ``module:EnvId`` id whose module it can import. An env registered by a running
    program alone is not: a pod in another process cannot make it."""
    if id in registry and ":" not in id:
        entry = registry[id].entry_point
        if isinstance(entry, str) and entry.startswith("podium."):
            return True
    return _fresh_process_knows(id)


@functools.cache
def _fresh_process_knows(id: str) -> bool:
    """Whether a new Python process (this one's interpreter, working directory and environment) can make
    ``id``: asked once per id, about half a second. True when it cannot be asked."""
    code = "import sys; from podium.envs.registry import check_env_id; check_env_id(sys.argv[1])"
    try:
        done = subprocess.run([sys.executable, "-c", code, id], capture_output=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: the pods will say
    return done.returncode == 0


def check_env_id(id: str) -> None:
    """Raise :func:`make`'s ``KeyError`` for an id that neither podium nor gymnasium knows, without importing
    torch or building anything (``podium train --env TYPO`` answers at once)."""
    id = import_env_module(id)
    if id in registry:
        return
    import gymnasium as gym

    if id not in gym.registry:
        raise _unknown_env(id)


def _unknown_env(id: str) -> KeyError:
    import gymnasium as gym

    names = sorted(set(registry) | set(gym.registry))
    close = difflib.get_close_matches(id, names, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return KeyError(
        f"unknown environment {id!r}: it is neither registered with podium nor with gymnasium.{hint} "
        "Run `podium envs` for podium's tensor-native envs; pass a gymnasium id (after importing the "
        "package that registers it, or as 'package.module:EnvId', which imports it) or register your own "
        "with podium.envs.register()."
    )


def make(
    id: str,
    num_envs: int = 1,
    device: str | Any = "cpu",
    seed: int | None = None,
    native: bool = True,
    **kwargs: Any,
) -> VecEnv:
    """Create ``num_envs`` copies of environment ``id`` as one batched :class:`VecEnv`.

    Args:
        id: a podium id (see ``podium envs``) or any gymnasium id; ``"package.module:EnvId"`` imports the
            module (which registers ``EnvId``) first.
        num_envs: number of sub-environments.
        device: torch device of observations, rewards and (for tensor-native envs) the simulation.
        seed: seeds the first ``reset()`` that is called without a seed.
        native: use podium's tensor-native implementation when one exists (default). ``False`` forces
            gymnasium's own env through :class:`~podium.envs.gym_adapter.GymVecEnv`, e.g. to compare.
        **kwargs: passed to the env's constructor (for gymnasium ids: to ``gymnasium.make``, except
            the adapter's own ``vectorization`` and ``max_episode_steps``).

    Raises:
        KeyError: unknown id (the message suggests close matches).
        ValueError: bad ``num_envs``, unknown device, or a gymnasium env whose spaces podium cannot batch.
        MissingDependencyError: a gymnasium env whose package or extra is not installed (a ``ValueError``
            whose one-line message names the ``pip install`` that fixes it, e.g. ``gymnasium[box2d]``).
    """
    import gymnasium as gym

    given, id = id, import_env_module(id)
    if native and id in registry:
        spec = registry[id]
        cls = spec.load()
        options = {**spec.kwargs, **kwargs}
        params = inspect.signature(cls).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            takes = [n for n, p in params.items() if p.kind in named and n not in ("num_envs", "device")]
            for name in options:
                if name not in takes:
                    close = difflib.get_close_matches(name, takes, n=1)
                    hint = f"did you mean {close[0]!r}? " if close else ""
                    raise ValueError(
                        f"env_kwargs: {name!r} is not an option of {id}; {hint}it takes: {', '.join(takes) or 'none'}"
                    )
        env = cls(num_envs=num_envs, device=device, **options)
    elif id in registry and id not in gym.registry:  # native=False asked for gymnasium's own, which has none
        raise ValueError(
            f"{id} is podium's own env and has no gymnasium implementation to compare with: native=False "
            "(native_env: false) applies to gymnasium ids such as CartPole-v1; drop it for this env"
        )
    elif id in gym.registry:
        from podium.envs.gym_adapter import GymVecEnv

        env = GymVecEnv(given, num_envs=num_envs, device=device, **kwargs)  # (its subprocesses import the module)
    else:
        raise _unknown_env(id)
    env.default_seed = seed
    return env


# podium's own environments (importing this module imports none of them, nor torch)
_CLASSIC = "podium.envs.classic"
_LOCOMOTION = "podium.envs.locomotion"  # needs the "mujoco" extra (and "mjx" for the GPU engine)
for _id, _entry, _obs, _act, _limit, _about in (
    ("CartPole-v1", f"{_CLASSIC}.cartpole:CartPoleVecEnv", "Box(4,)", "Discrete(2)", 500, "balance a pole on a cart"),
    ("Pendulum-v1", f"{_CLASSIC}.pendulum:PendulumVecEnv", "Box(3,)", "Box(1,)", 200, "swing a pendulum up"),
    ("Acrobot-v1", f"{_CLASSIC}.acrobot:AcrobotVecEnv", "Box(6,)", "Discrete(3)", 500, "swing a two-link arm up"),
    ("MountainCar-v0", f"{_CLASSIC}.mountain_car:MountainCarVecEnv", "Box(2,)", "Discrete(3)", 200, "drive up a hill"),
    (
        "MountainCarContinuous-v0",
        f"{_CLASSIC}.mountain_car:MountainCarContinuousVecEnv",
        "Box(2,)",
        "Box(1,)",
        999,
        "drive up a hill with a continuous throttle",
    ),
    (
        "StockTrading-v0",
        "podium.finance.env:StockTradingVecEnv",
        "Box(291,)",
        "Box(29,)",
        None,
        "trade the 29 Dow stocks, $1M, 0.2% costs (shipped data, 2009-2015 by default; an episode is the period)",
    ),
    (
        "Ant-v5",
        f"{_LOCOMOTION}.ant:AntVecEnv",
        "Box(105,)",
        "Box(8,)",
        1000,
        "a four-legged ant runs forward; MuJoCo C on CPU, MJX on GPU (podium[mujoco])",
    ),
    (
        "Humanoid-v5",
        f"{_LOCOMOTION}.humanoid:HumanoidVecEnv",
        "Box(348,)",
        "Box(17,)",
        1000,
        "a humanoid walks forward; MuJoCo C on CPU, MJX on GPU (podium[mujoco])",
    ),
):
    register(_id, _entry, description=_about, observation=_obs, action=_act, time_limit=_limit)
