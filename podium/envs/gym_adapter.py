"""``GymVecEnv``: any gymnasium environment as a podium :class:`~podium.envs.base.VecEnv`.

This is the paper's "PreprocessVecEnv": it takes a gymnasium id or constructor — including envs
podium has never heard of — runs ``num_envs`` copies in gymnasium's own vector env (in-process for
cheap envs, one subprocess each for expensive ones), and hands back torch tensors on the chosen
device with podium's conventions (same-step auto-reset, ``final_obs``, episode statistics).

Supported spaces: ``Box`` or ``Discrete`` actions; ``Box`` observations, and ``Discrete`` observations
converted to one-hot vectors. Anything else is refused with a message that names a fix.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.async_vector_env import _async_worker

from podium.envs.base import VecEnv
from podium.machine import cpu_budget

__all__ = ["GymVecEnv", "MissingDependencyError", "choose_vectorization"]

Vectorization = Literal["auto", "sync", "async"]

# A single env step slower than this (seconds) is worth a subprocess per env in "auto" mode.
_ASYNC_THRESHOLD_S = 2e-4


def choose_vectorization(step_seconds: float, num_envs: int, cores: int) -> Literal["sync", "async"]:
    """What ``vectorization="auto"`` picks: a subprocess per copy (``"async"``) only when one step takes
    longer than :data:`_ASYNC_THRESHOLD_S` and the copies have at least two cores to spread over; otherwise
    the copies step in this process (``"sync"``).

    Args:
        step_seconds: a typical (median) wall-clock time of one step of one copy.
        num_envs: copies.
        cores: the CPU cores this process should keep busy (:func:`podium.machine.cpu_budget`: its affinity
            mask, capped by ``PODIUM_CPUS``, which the tournament sets to a pod's share): a tournament pod on
            one core gets ``"sync"`` whatever the machine, since subprocesses would take cores the pool gave
            to other pods.
    """
    return "async" if num_envs > 1 and cores >= 2 and step_seconds > _ASYNC_THRESHOLD_S else "sync"


def _worker_ignoring_stop_signals(*args: Any) -> None:
    """gymnasium's env subprocess, in a process group of its own and deaf to SIGINT: Ctrl-C (and a SIGTERM
    sent to a whole process group) reaches every process of the group, and a subprocess that ended on it broke
    the next step with a ``BrokenPipeError`` before the pod (which stops on that signal, and closes its envs)
    could save its state. SIGTERM sent to the subprocess itself still ends it: that is how gymnasium's
    ``close(terminate=True)`` and multiprocessing's clean-up at exit stop it (ignoring it hung the exit of a
    program that never closed its env). It ends on its own, too, when its parent is gone (its pipe closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not what it inherited: a pod's child ignores it, a pod notes it
    if hasattr(os, "setpgrp"):
        os.setpgrp()
        _die_with_parent()  # out of the parent's group, a kill of the group (a stuck pod's) no longer ends it
    _async_worker(*args)


def _die_with_parent() -> None:
    """Linux: ask the kernel to SIGKILL this process when the process (thread) that started it dies, however
    it dies, so that an env stuck in ``step`` does not outlive a killed pod. Elsewhere, a subprocess ends
    when its parent's end of the pipe closes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # the parent died before the request was in place
        os._exit(1)


class MissingDependencyError(ValueError, ImportError):
    """A gymnasium env needs a package that is not installed (e.g. Box2D for ``LunarLander-v3``).

    The message is one line: the env, what is missing, and the command that installs it."""


def _make_probe(name: str, factory: Callable[[], gym.Env]) -> gym.Env:
    """The first copy of the env; a missing optional package becomes one :class:`MissingDependencyError`."""
    try:
        return factory()
    except gym.error.DependencyNotInstalled as exc:  # gymnasium's extras: its message names the pip command
        reason = " ".join(str(exc).split())
        raise MissingDependencyError(f"cannot create {name!r}: {reason}") from None
    except ImportError as exc:  # a third-party env whose own dependency is missing
        reason = f"{' '.join(str(exc).split())}; install the package that provides it"
        raise MissingDependencyError(f"cannot create {name!r}: {reason}") from None


def _describe(space: gym.Space) -> str:
    return repr(space)


def _check_spaces(name: str, obs_space: gym.Space, act_space: gym.Space) -> None:
    if not isinstance(act_space, gym.spaces.Box | gym.spaces.Discrete):
        raise ValueError(
            f"{name}: podium handles Box and Discrete action spaces, this env has {_describe(act_space)}. "
            "Wrap it first with a gymnasium.ActionWrapper that maps a Box or Discrete action onto it."
        )
    if isinstance(act_space, gym.spaces.Discrete) and act_space.start != 0:
        raise ValueError(f"{name}: Discrete action spaces must start at 0 (this one starts at {act_space.start})")
    if not isinstance(obs_space, gym.spaces.Box | gym.spaces.Discrete):
        raise ValueError(
            f"{name}: podium handles Box (and Discrete, one-hot encoded) observation spaces, this env has "
            f"{_describe(obs_space)}. Wrap it with gymnasium.wrappers.FlattenObservation (Dict/Tuple) first, and "
            "register the wrapped env to train on it: gymnasium.register('Flat-v0', entry_point=lambda: "
            "FlattenObservation(gymnasium.make(...)))"
        )


class GymVecEnv(VecEnv):
    """``num_envs`` copies of a gymnasium env, batched, with torch tensors on ``device``.

    Args:
        env: a gymnasium id (``"LunarLander-v3"``) or a zero-argument callable returning a ``gymnasium.Env``.
        num_envs: number of copies.
        device: torch device for observations, rewards and flags (the simulation itself runs on CPU).
        vectorization: ``"sync"`` steps the copies one after another in this process (best for cheap
            envs such as classic control), ``"async"`` runs each copy in its own subprocess (best for
            expensive ones such as MuJoCo), ``"auto"`` times a few steps of one copy and picks (see
            :func:`choose_vectorization`: async needs a slow step and two cores).
        max_episode_steps: override the env's registered time limit.
        **env_kwargs: passed to ``gymnasium.make``.

    Raises:
        KeyError: unknown gymnasium id.
        MissingDependencyError: the env needs a package that is not installed (a ``ValueError``).
        ValueError: unsupported observation or action space, bad ``num_envs`` or device.
    """

    batched = False  # copies step one after another (or each in its own process)

    def __init__(
        self,
        env: str | Callable[[], gym.Env],
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        vectorization: Vectorization = "auto",
        max_episode_steps: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        if isinstance(env, str):
            from podium.envs.registry import _unknown_env, import_env_module

            if import_env_module(env) not in gym.registry:  # "module:EnvId": gymnasium.make imports it too
                raise _unknown_env(env)
            self.env_id = env
            make_kwargs = dict(env_kwargs)
            if max_episode_steps is not None:
                make_kwargs["max_episode_steps"] = max_episode_steps

            def factory() -> gym.Env:
                return gym.make(env, **make_kwargs)

        elif callable(env):
            if env_kwargs or max_episode_steps is not None:
                raise ValueError("pass env kwargs inside your constructor when `env` is a callable")
            factory = env
            self.env_id = getattr(env, "__name__", type(env).__name__)
        else:
            raise TypeError(f"env must be a gymnasium id or a callable returning a gymnasium.Env, got {env!r}")
        if vectorization not in ("auto", "sync", "async"):
            raise ValueError(f"vectorization must be 'auto', 'sync' or 'async', got {vectorization!r}")

        probe = _make_probe(self.env_id, factory)
        try:
            _check_spaces(self.env_id, probe.observation_space, probe.action_space)
            obs_space, act_space = probe.observation_space, probe.action_space
            spec = probe.spec
            render_modes = list(probe.metadata.get("render_modes", []))
            if vectorization == "auto":
                vectorization = self._choose(probe, num_envs)
        finally:
            probe.close()
        self._one_hot = isinstance(obs_space, gym.spaces.Discrete)
        if self._one_hot:
            single_obs = gym.spaces.Box(0.0, 1.0, (int(obs_space.n),), dtype=np.float32)
            self._obs_start = int(obs_space.start)
        else:
            single_obs = gym.spaces.Box(
                obs_space.low.astype(np.float32), obs_space.high.astype(np.float32), dtype=np.float32
            )
        super().__init__(
            num_envs,
            single_obs,
            act_space,
            device=device,
            max_episode_steps=spec.max_episode_steps if spec is not None else max_episode_steps,
        )
        self.vectorization = vectorization
        factories, mode = [factory] * self.num_envs, AutoresetMode.SAME_STEP
        if vectorization == "async":
            self.vector_env = AsyncVectorEnv(factories, autoreset_mode=mode, worker=_worker_ignoring_stop_signals)
        else:
            self.vector_env = SyncVectorEnv(factories, autoreset_mode=mode)
        self.render_mode = self.vector_env.render_mode  # the wrapped env's frames (``render_mode=`` its kwarg)
        self.metadata = {**self.metadata, "render_modes": render_modes}
        self._act_dtype = act_space.dtype if isinstance(act_space, gym.spaces.Box) else np.int64
        self._last_obs: np.ndarray | None = None  # gymnasium's last batch of observations
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)

    @staticmethod
    def _choose(probe: gym.Env, num_envs: int) -> Vectorization:
        cores = cpu_budget()
        if num_envs == 1 or cores < 2 or multiprocessing.current_process().daemon:
            return "sync"  # (a daemonic process, such as a pod's evaluator, may not start subprocesses)
        probe.reset(seed=0)
        times = []
        for i in range(25):
            action = probe.action_space.sample()  # not timed: the copies will step the policy's actions
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = probe.step(action)
            if terminated or truncated:
                probe.reset()  # (timed with its step: an env may spend its time in resets)
            if i >= 5:  # after a warm-up; one step at a time, so that the median ignores the steps during
                times.append(time.perf_counter() - t0)  # which other processes had the core
        return choose_vectorization(float(np.median(times)), num_envs, cores)

    def render(self) -> tuple[Any, ...] | None:
        """The copies' frames, as gymnasium's vector env renders them (``render_mode`` given as an env kwarg,
        e.g. ``make(id, native=False, render_mode="rgb_array")``)."""
        return self.vector_env.render()

    # ----------------------------------------------------------------- conversions
    @property
    def discrete_observations(self) -> bool:
        """Whether the gymnasium env's observations are integers (one-hot encoded here)."""
        return self._one_hot

    def observations_to_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """A batch of the gymnasium env's observations (``[B, ...]``, or ``[B]`` integers) as podium's
        ``[B, obs_dim]`` float32 tensor on ``self.device`` (one-hot for Discrete observations)."""
        return self._obs(obs)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        if self._one_hot:
            idx = np.asarray(obs, dtype=np.int64) - self._obs_start
            n = self.single_observation_space.shape[0]
            if ((idx < 0) | (idx >= n)).any():  # checked here: one_hot does not check on a GPU (a device assert)
                raise ValueError(f"observations outside the Discrete space of {n} values from {self._obs_start}")
            return torch.nn.functional.one_hot(torch.as_tensor(idx, device=self.device), n).to(torch.float32)
        return torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset all copies; an int ``seed`` seeds copy ``i`` with ``seed + i``, a list of ``num_envs`` seeds
        seeds each copy with its own (as gymnasium's vector envs do). Returns ``(obs, info)``."""
        if isinstance(seed, list | tuple) and len(seed) > 1:
            if len(seed) != self.num_envs:
                raise ValueError(f"{len(seed)} seeds for {self.num_envs} copies: give one per copy, or an int")
            first = next((int(s) for s in seed if s is not None), None)
            self._seed(first)  # the action space takes the first seed given; every copy takes its own below
            per_copy: int | list[int] | None = [None if s is None else int(s) for s in seed]
        else:
            per_copy = self._seed(seed)
        mask = (options or {}).get("reset_mask")  # gymnasium 1.x: reset these copies only (it pops the key)
        reset = slice(None) if mask is None else np.asarray(mask, dtype=bool)
        obs, info = self.vector_env.reset(seed=per_copy, options=options)
        self._last_obs = obs  # the rows step_active leaves alone
        self._returns[reset] = 0.0  # the copies left running keep their episode's statistics
        self._lengths[reset] = 0
        return self._obs(obs), info

    def step(
        self, actions: torch.Tensor | np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step all copies; same returns as :meth:`podium.envs.base.TensorVecEnv.step`."""
        obs, reward, terminated, truncated, info = self.vector_env.step(self._np_actions(actions))
        done = np.logical_or(terminated, truncated)
        idx = np.flatnonzero(done)
        finals = [info["final_obs"][i] for i in idx]  # only the finished copies
        return self._output(obs, reward, terminated, truncated, None, idx, finals, info)

    def step_active(
        self, actions: torch.Tensor | np.ndarray, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step only the copies in ``active`` (see :meth:`podium.envs.base.VecEnv.step_active`); the others
        stay where they are, and their rows repeat their last observation with a reward of 0 and both flags
        False; ``info`` holds podium's own keys only (not the gymnasium env's). In-process (``sync``) copies
        only: ``async`` ones all step, each in its own process.

        An active copy steps exactly as :meth:`step` would step it (its own random stream, its reset when
        its episode ends), so an evaluation gives the same scores either way, for less work.
        """
        mask = np.asarray(torch.as_tensor(active).cpu(), dtype=bool).reshape(-1)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"active must have one flag per sub-env ({self.num_envs}), got shape {mask.shape}")
        if self.vectorization == "async" or mask.all() or self._last_obs is None:
            return self.step(actions)
        np_actions = self._np_actions(actions)
        obs = self._last_obs.copy()
        reward = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        idx, finals = [], []
        for i in np.flatnonzero(mask):  # what SyncVectorEnv does for every copy, for the active ones
            env = self.vector_env.envs[i]
            obs[i], reward[i], terminated[i], truncated[i], _ = env.step(np_actions[i])
            if terminated[i] or truncated[i]:
                idx.append(i)
                finals.append(obs[i].copy())
                obs[i], _ = env.reset()
        return self._output(obs, reward, terminated, truncated, mask, np.asarray(idx, dtype=np.int64), finals, {})

    def _np_actions(self, actions: torch.Tensor | np.ndarray) -> np.ndarray:
        return self._check_actions(actions).cpu().numpy().astype(self._act_dtype, copy=False)

    def _output(
        self,
        obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        stepped: np.ndarray | None,
        idx: np.ndarray,
        finals: list[Any],
        info: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """A step's returns from gymnasium's arrays: the ``stepped`` copies moved (None: all; their returns
        and lengths grow), copies ``idx`` finished an episode whose last observations are ``finals``."""
        self._check_finite(obs, reward, finals, idx)
        self._last_obs = obs
        done = np.logical_or(terminated, truncated)
        if stepped is None:
            self._returns += reward
            self._lengths += 1
        else:
            self._returns[stepped] += reward[stepped]
            self._lengths[stepped] += 1
        out = dict(info)
        obs_t = self._obs(obs)
        final_obs = obs_t
        if len(idx):
            final = obs_t.clone()
            final[torch.as_tensor(idx, device=self.device)] = self._obs(np.stack([np.asarray(f) for f in finals]))
            final_obs = final
        done_t = torch.as_tensor(done, device=self.device)
        out["final_obs"] = final_obs
        out["_final_obs"] = done_t
        out["episode_return"] = torch.as_tensor(self._returns, dtype=torch.float32, device=self.device)
        out["_episode_return"] = done_t
        out["episode_length"] = torch.as_tensor(self._lengths.copy(), device=self.device)
        out["_episode_length"] = done_t
        self._returns[done] = 0.0
        self._lengths[done] = 0
        return (
            obs_t,
            torch.as_tensor(np.asarray(reward, dtype=np.float32), device=self.device),
            torch.as_tensor(terminated, device=self.device),
            # gymnasium's TimeLimit reports truncated=True on a terminal step that hits the limit too;
            # podium's contract: truncated means "cut off, not terminated" (bootstrap), so a real
            # termination always wins
            torch.as_tensor(np.logical_and(truncated, ~np.asarray(terminated, dtype=bool)), device=self.device),
            out,
        )

    def _check_finite(self, obs: np.ndarray, reward: np.ndarray, finals: list[Any], idx: np.ndarray) -> None:
        """Refuse a step whose rewards or observations hold NaN or inf, naming the copy: an agent fed one
        diverges, or acts NaN, steps later, and then the error would blame the learning rate or the policy."""
        n = self.num_envs
        checks = [("reward", np.asarray(reward).reshape(n, -1), np.arange(n))]
        if not self._one_hot:
            checks.append(("observation", np.asarray(obs).reshape(n, -1), np.arange(n)))
            if len(idx):
                last = np.stack([np.asarray(f).reshape(-1) for f in finals])
                checks.append(("last observation of an episode", last, np.asarray(idx)))
        for what, values, copies in checks:
            finite = np.isfinite(values)
            if not finite.all():
                row = int(np.flatnonzero(~finite.all(axis=1))[0])
                copy = int(copies[row])
                value = values[row][~finite[row]][0]
                raise ValueError(
                    f"{self.env_id}: the env returned a non-finite {what} ({value}) in copy {copy}, "
                    f"{int(self._lengths[copy]) + 1} steps into its episode; an agent cannot learn from NaN or "
                    "inf. Fix the env, or wrap it (e.g. gymnasium.wrappers.TransformReward or "
                    "TransformObservation with numpy.nan_to_num) and register the wrapped env"
                )

    def close_extras(self, **kwargs: Any) -> None:
        """Close the underlying gymnasium vector env (and its subprocesses)."""
        self.vector_env.close(**kwargs)

    def __repr__(self) -> str:
        return f"GymVecEnv({self.env_id!r}, num_envs={self.num_envs}, {self.vectorization}, device={self.device})"
