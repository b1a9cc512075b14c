"""The batched-tensor environment contract.

A :class:`VecEnv` holds ``num_envs`` sub-environments whose state lives in torch tensors on
``env.device``; they all step together. It subclasses :class:`gymnasium.vector.VectorEnv`, so
gymnasium's conventions apply (and its vector wrappers, once a wrapper that computes with numpy is given
numpy arrays), with three promises on top:

* everything returned by ``reset`` and ``step`` is a torch tensor on ``env.device`` (float32
  observations and rewards, bool ``terminated`` / ``truncated``);
* auto-reset happens in the same step (``AutoresetMode.SAME_STEP``): for a finished sub-env the
  returned observation is already the first one of its next episode, and ``info["final_obs"]``
  holds the last observation of the finished episode (needed to bootstrap on truncation);
* finished episodes report their return and length in ``info["episode_return"]`` and
  ``info["episode_length"]`` (masked by ``info["_episode_return"]``), so no caller tracks them by hand.

Tensor-native envs derive from :class:`TensorVecEnv` and write three pure hooks —
:meth:`TensorVecEnv._initial_state`, :meth:`TensorVecEnv._dynamics` and :meth:`TensorVecEnv._observe`;
the base class does action checking, time limits, episode statistics and auto-reset once, for all.
"""

from __future__ import annotations

import functools
import types
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

__all__ = ["TensorVecEnv", "VecEnv", "resolve_device"]

State = tuple[torch.Tensor, ...]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """Turn ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``None`` (= cpu) into a usable device.

    Raises:
        ValueError: the string is not a device, or that device is not available on this machine.
    """
    if device is None:
        return torch.device("cpu")
    dev = parse_device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available here; use device='cpu'")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        return torch.device("cuda", index)
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} requested but MPS is not available here; use device='cpu'")
    return dev


def parse_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device of a kind podium runs on (cpu, cuda, mps), whether or not this machine
    has it (a tournament's pods may run on other machines).

    Raises:
        ValueError: not a device, or a kind podium does not run on.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'") from exc
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {device!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'")
    return dev


_COMPILED: dict[tuple[Any, ...], Callable[..., Any]] = {}


def _compiled_advance(env: TensorVecEnv) -> Callable[..., Any]:
    """``torch.compile`` of ``TensorVecEnv._advance_eager`` for this env's class, size, device and dtype.

    Dynamo keeps one cache (with a limit of 8 recompilations) per *code object*; compiling the shared
    method directly would make every differently sized or typed env in a process recompile the same
    entry until the limit fails. Each combination gets its own copy of the code object instead.
    """
    key = (type(env), env.num_envs, env.device, env.dtype, env.max_episode_steps)
    if key not in _COMPILED:
        base = TensorVecEnv._advance_eager
        code = base.__code__.replace(co_name=f"_advance_{type(env).__name__}_{len(_COMPILED)}")
        fn = types.FunctionType(code, base.__globals__, code.co_name, base.__defaults__, base.__closure__)
        _COMPILED[key] = torch.compile(fn, dynamic=False, fullgraph=True)
    return _COMPILED[key]


def _check_num_envs(num_envs: Any) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    return int(num_envs)


class VecEnv(gym.vector.VectorEnv):
    """Base class of podium's batched environments (the contract above).

    Args:
        num_envs: number of sub-environments N (> 0).
        single_observation_space: gymnasium space of one sub-env's observation (a ``Box``).
        single_action_space: gymnasium space of one sub-env's action (``Box`` or ``Discrete``).
        device: torch device the state lives on.
        max_episode_steps: time limit; an episode that reaches it is *truncated*. ``None`` = no limit.
        dtype: floating dtype of the internal state (float32 by default; float64 for exact parity
            checks). Observations and rewards are always returned as float32.
        validate_actions: check each action batch for NaN/inf and (discrete) range. Costs a host sync
            per step on an accelerator; turn off only where actions are valid by construction. Shape
            is always checked.
    """

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    batched: bool = True
    """Whether a step of all sub-envs costs about as much as a step of one (tensor envs), rather than one
    step's cost per sub-env (:class:`~podium.envs.gym_adapter.GymVecEnv`, MuJoCo C's worlds on a CPU):
    whether N episodes are better played at once or may be played in parts for the same price."""
    fork_safe: bool = True
    """Whether a forked copy of this process may build and step another instance of this env (a pod's
    evaluator, learner or rollout-worker process). Not with the MJX engine on a CPU: JAX's compiler threads do
    not survive a fork, and the child hangs at its first compile; such a pod keeps its evaluator in-process and
    starts other processes with ``spawn``."""

    def __init__(
        self,
        num_envs: int,
        single_observation_space: gym.spaces.Box,
        single_action_space: gym.spaces.Box | gym.spaces.Discrete,
        device: str | torch.device | None = "cpu",
        max_episode_steps: int | None = None,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
    ) -> None:
        self.num_envs = _check_num_envs(num_envs)
        self.device = resolve_device(device)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.dtype = dtype
        if max_episode_steps is not None and max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be positive or None, got {max_episode_steps}")
        self.max_episode_steps = max_episode_steps
        self.validate_actions = validate_actions
        self.single_observation_space = single_observation_space
        self.single_action_space = single_action_space
        self.observation_space = batch_space(single_observation_space, self.num_envs)
        self.action_space = batch_space(single_action_space, self.num_envs)
        self.discrete = isinstance(single_action_space, gym.spaces.Discrete)
        if self.discrete:
            self._num_actions = int(single_action_space.n)
            self._action_shape: tuple[int, ...] = (self.num_envs,)
        else:
            self._action_shape = (self.num_envs, *single_action_space.shape)
        self.generator = torch.Generator(device=self.device)
        self.default_seed: int | None = None  # used by the first reset() that gets no seed (see make())
        self._seeded = False

    @property
    def max_return(self) -> float | None:
        """The highest episode return this env can give (``None`` = unknown or unbounded). Used to reject
        a target score no policy can reach, such as a positive target on an env whose rewards are <= 0."""
        return None

    def unreachable(self, target: float, name: str = "this env") -> str | None:
        """Why no policy can reach ``target`` on this env (``name`` in the message, with the numbers), or None
        if one might."""
        best = self.max_return
        if best is None or target <= best:
            return None
        hint = f"; rewards here are <= 0 — did you mean {-target:g}?" if best <= 0 < target else ""
        return f"target {target:g} can never be reached on {name}: the best possible episode return is {best:g}{hint}"

    def step_active(
        self, actions: torch.Tensor | np.ndarray, active: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """:meth:`step` for a caller that reads only the rows of the sub-envs in ``active`` (bool ``[N]``),
        such as an evaluation whose other episodes have ended.

        The other sub-envs may be left where they are and their rows hold no meaning. Envs that step every
        sub-env for the price of one (tensor envs: the default) simply step them all; an env that steps its
        copies one by one (:class:`~podium.envs.gym_adapter.GymVecEnv`) steps only the active ones, so that
        scoring N episodes costs the sum of their lengths instead of N times the longest.
        """
        del active  # every sub-env steps
        return self.step(actions)

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release by default: the state is plain tensors."""

    def _seed(self, seed: int | list[int] | None) -> int | None:
        """Seed ``self.generator`` and the action space for ``reset``; return the seed used (or None).

        A tensor env's copies share one generator, so a batch has one seed. A list (gymnasium's vector
        envs take one seed per copy) must have one entry per copy: ``[s, s+1, ...]`` is the same as ``s``
        (what gymnasium makes of an int), any other list gives its own reproducible batch. ``[s]`` is ``s``.

        Raises:
            ValueError: a list whose length is not ``num_envs``.
        """
        if isinstance(seed, list | tuple) and len(seed) <= 1:  # [] and [None]: unseeded; [s]: s
            seed = seed[0] if seed else None
        if isinstance(seed, list | tuple):
            if len(seed) != self.num_envs:
                raise ValueError(
                    f"{type(self).__name__}.reset: seed is a list of {len(seed)} for {self.num_envs} sub-envs; "
                    "give one seed per sub-env, or one int for the whole batch"
                )
            if all(x is None for x in seed):
                seed = None
            elif any(x is None for x in seed):
                raise ValueError(f"{type(self).__name__}.reset: seed mixes None and ints ({list(seed)[:8]}...)")
            elif [int(x) for x in seed] == list(range(int(seed[0]), int(seed[0]) + len(seed))):
                seed = int(seed[0])
            else:
                seed = int(np.random.SeedSequence([int(x) for x in seed]).generate_state(1, np.uint64)[0] % 2**63)
        if seed is None and not self._seeded and self.default_seed is not None:
            seed = self.default_seed
        if seed is not None:
            seed = int(seed)  # numpy's integers too (gymnasium's vector envs take a Python int only)
            self.generator.manual_seed(seed)
            self.action_space.seed(seed)
            self._seeded = True
        elif not self._seeded:
            self.generator.manual_seed(int(np.random.SeedSequence().entropy) % (2**63))
            self._seeded = True
        return seed

    def _check_actions(self, actions: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Validate an action batch and return it on ``self.device`` (int64 ``[N]`` or ``self.dtype``)."""
        name = type(self).__name__
        if not isinstance(actions, torch.Tensor):
            actions = torch.as_tensor(np.asarray(actions), device=self.device)
        else:  # a policy's output may carry its autograd graph: the env's state must not
            actions = actions.detach().to(self.device)
        if self.discrete:
            if actions.dtype.is_floating_point or actions.dtype == torch.bool or actions.is_complex():
                raise ValueError(
                    f"{name} has Discrete({self._num_actions}) actions: expected an integer tensor of shape "
                    f"({self.num_envs},), got dtype {actions.dtype}"
                )
            if actions.ndim == 2 and actions.shape[1] == 1:
                actions = actions[:, 0]
            if tuple(actions.shape) != self._action_shape:
                raise ValueError(
                    f"{name}: expected actions of shape ({self.num_envs},) for {self.num_envs} sub-envs, "
                    f"got {tuple(actions.shape)}"
                )
            actions = actions.long()
            if self.validate_actions:
                lo, hi = torch.aminmax(actions)
                if int(lo) < 0 or int(hi) >= self._num_actions:
                    raise ValueError(
                        f"{name}: discrete actions must be in [0, {self._num_actions - 1}], "
                        f"got values in [{int(lo)}, {int(hi)}]"
                    )
            return actions
        if actions.dtype == torch.bool or actions.is_complex():
            raise ValueError(f"{name}: Box actions must be real numbers, got dtype {actions.dtype}")
        if actions.ndim == 1 and self._action_shape[1:] == (1,) and actions.shape[0] == self.num_envs:
            actions = actions.unsqueeze(-1)
        if tuple(actions.shape) != self._action_shape:
            raise ValueError(
                f"{name}: expected actions of shape {self._action_shape} (num_envs, *action_shape), "
                f"got {tuple(actions.shape)}"
            )
        actions = actions.to(self.dtype)
        if self.validate_actions and not bool(torch.isfinite(actions).all()):
            bad = (~torch.isfinite(actions)).reshape(self.num_envs, -1).any(dim=1).nonzero()[:5, 0].tolist()
            raise ValueError(f"{name}: actions contain NaN or inf (sub-envs {bad}); refusing to step")
        return actions

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"


class TensorVecEnv(VecEnv):
    """A :class:`VecEnv` whose physics is torch code; subclasses write three pure hooks.

    The state of all sub-envs is a tuple of tensors, each component-major with the sub-env dimension
    LAST (CartPole: one ``[4, N]`` tensor), so every arithmetic op runs on contiguous memory. Because
    the hooks are pure, this class can run them three ways: eagerly with an index-based auto-reset
    (CPU), branch-free with ``torch.where`` (accelerators: no step waits for the host), and with
    dynamics and bookkeeping fused by ``torch.compile`` (``compile=True``).

    Args:
        compile: fuse dynamics and bookkeeping with ``torch.compile`` (inductor). Optional: the first
            call compiles (seconds; needs a C++ compiler on CPU); later processes reuse inductor's
            on-disk cache.
        Other arguments: see :class:`VecEnv`.
    """

    def __init__(self, *args: Any, compile: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state: State = ()
        self._options: dict[str, Any] | None = None  # reset's options, for auto-resets too
        self._needs_reset = True
        self._advance = self._advance_eager
        if compile:
            self._advance = functools.partial(_compiled_advance(self), self)
        self.episode_return = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._all_true = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)

    reset_options: ClassVar[tuple[str, ...]] = ()
    """The keys ``reset(options=...)`` accepts (those of the gymnasium env of the same name); any other key
    is refused. Options hold until the next ``reset``: every auto-reset draws from them too, as in
    gymnasium's own vector envs (``gym.make_vec("CartPole-v1")``); a ``reset`` without options restores the
    default initial states."""

    # ----------------------------------------------------------------- hooks for subclasses
    @abstractmethod
    def _initial_state(self, k: int, options: dict[str, Any] | None = None) -> State:
        """Draw ``k`` fresh initial states (sub-env dimension last, of size ``k``) from ``self.generator``;
        ``options`` (keys of :attr:`reset_options` only) come from ``reset(options=...)``."""

    @abstractmethod
    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        """Advance every sub-env one step with validated ``actions`` (``[N]`` int64 for Discrete,
        ``[N, *act_shape]`` in ``self.dtype`` for Box). Pure: must not write into ``state``.

        Returns:
            ``(next_state, reward [N], terminated [N] bool)``.
        """

    @abstractmethod
    def _observe(self, state: State) -> torch.Tensor:
        """Observation batch ``[N, *obs_shape]`` of ``state``: new memory, never a view of the state (a caller
        may change an observation in place). Pure."""

    def _cut_off(self, state: State) -> torch.Tensor | None:
        """Optional: the sub-envs (``[N]`` bool) whose episode the env itself ends in ``state`` without the task
        having ended, e.g. a trading env whose market data runs out. They are *truncated* (an agent bootstraps
        from their last observation), like a time limit, and unlike ``terminated``. Pure. Default: ``None``."""
        return None

    def _step_info(self, state: State) -> dict[str, torch.Tensor]:
        """Optional extra ``info`` entries (each ``[N, ...]``) computed from the state right after
        :meth:`_dynamics`, before auto-reset replaces finished sub-envs. Pure. Default: none."""
        return {}

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every sub-env. An int ``seed`` makes the whole batch reproducible (a list: one seed per
        sub-env, as gymnasium's vector envs take them; ``[s, s+1, ...]`` is ``s``); ``options`` shape the
        initial states as the gymnasium env's do (:attr:`reset_options`: e.g. CartPole's ``low``/``high``).

        Returns:
            ``(obs [N, *obs_shape] float32, info)``.

        Raises:
            ValueError: an option this env does not have, or a bad value; a seed list of another length.
        """
        if not options:
            self._seed(seed)
            self._options = None
            self.state = self._initial_state(self.num_envs)
        else:
            unknown = sorted(set(options) - set(self.reset_options))
            if unknown:
                accepted = ", ".join(self.reset_options) or "none"
                raise ValueError(
                    f"{type(self).__name__}.reset got unknown option(s) {', '.join(map(repr, unknown))}; "
                    f"the options it accepts: {accepted}"
                )
            before = (self.generator.get_state(), self._seeded)
            self._seed(seed)
            try:
                self.state = self._initial_state(self.num_envs, options)
            except (ValueError, RuntimeError) as exc:  # a refused reset leaves the env as it was
                self.generator.set_state(before[0])
                self._seeded = before[1]
                raise ValueError(f"{type(self).__name__}.reset: options {options} cannot be used: {exc}") from exc
            self._options = dict(options)
        self.episode_return = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self.episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._needs_reset = False
        return self._as_obs(self._observe(self.state)), {}

    def step(
        self, actions: torch.Tensor | np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step all sub-envs with ``actions`` (``[N]`` ints for Discrete, ``[N, *act_shape]`` floats
        for Box; numpy arrays are accepted and moved to ``env.device``).

        Returns:
            ``(obs, reward, terminated, truncated, info)``: ``obs [N, *obs_shape] float32``,
            ``reward [N] float32``, ``terminated [N] bool``, ``truncated [N] bool``. ``info`` holds
            ``final_obs`` (``[N, *obs_shape]``, valid where ``_final_obs``), and ``episode_return``
            (``[N]`` float32) and ``episode_length`` (``[N]`` int64) of the episodes that just ended,
            valid where ``_episode_return`` / ``_episode_length``. (gymnasium's vector wrappers that
            compute with numpy, such as ``RecordEpisodeStatistics``, need the tensors turned into numpy
            arrays first; podium's own statistics are these keys.)

        Raises:
            ValueError: wrong action shape or dtype, NaN/inf actions, out-of-range discrete actions.
            RuntimeError: ``reset`` was never called.
        """
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset(); call env.reset(seed=...) first")
        actions = self._check_actions(actions)
        state, reward, terminated, truncated, done, final_obs, ep_return, ep_length, extra = self._advance(
            self.state, actions, self.episode_return, self.episode_length
        )
        if self.device.type == "cpu":
            # redraw only the finished sub-envs; at small N most steps finish none
            idx = done.nonzero().squeeze(1)
            if idx.numel() > 0:
                fresh = self._fresh(idx.numel())
                state = tuple(s.index_copy(s.ndim - 1, idx, f) for s, f in zip(state, fresh, strict=True))
                obs = self._as_obs(self._observe(state))
                self.episode_return = ep_return.index_fill(0, idx, 0.0)
                self.episode_length = ep_length.index_fill(0, idx, 0)
            else:
                obs = final_obs
                self.episode_return, self.episode_length = ep_return, ep_length
        else:
            # accelerators: branch-free, so that no step waits for the host
            fresh = self._fresh(self.num_envs)
            state = tuple(torch.where(done, f, s) for s, f in zip(state, fresh, strict=True))
            obs = self._as_obs(self._observe(state))
            self.episode_return = ep_return.masked_fill(done, 0.0)
            self.episode_length = ep_length.masked_fill(done, 0)
        self.state = state
        info: dict[str, Any] = {
            "final_obs": final_obs,
            "_final_obs": done,
            "episode_return": ep_return,
            "_episode_return": done,
            "episode_length": ep_length,
            "_episode_length": done,
        }
        for key, value in extra.items():
            info[key] = value
            info[f"_{key}"] = self._all_true
        return obs, reward, terminated, truncated, info

    def set_state(self, state: torch.Tensor) -> None:
        """Overwrite the physical state of every sub-env with ``state [N, d]``, one row per sub-env in
        the component order the env's docstring gives (gymnasium's ``env.unwrapped.state`` layout for
        the classic envs). For tests and scripted starts; call :meth:`reset` first. Envs whose state
        is more than one tensor define their own ``set_state``.

        Raises:
            ValueError: ``state`` does not have shape ``[num_envs, d]``, or the env's state has several parts.
        """
        if len(self.state) != 1:
            raise ValueError(f"{type(self).__name__} has a {len(self.state)}-part state (or reset() was not called)")
        d = self.state[0].shape[0]
        if tuple(state.shape) != (self.num_envs, d):
            raise ValueError(
                f"{type(self).__name__}.set_state expects shape ({self.num_envs}, {d}), got {tuple(state.shape)}"
            )
        self.state = (torch.as_tensor(state, device=self.device, dtype=self.dtype).T.contiguous(),)

    # ----------------------------------------------------------------- internals
    def _fresh(self, k: int) -> State:
        """``k`` initial states for auto-resets, from the options of the last ``reset`` if it had any."""
        return self._initial_state(k, self._options) if self._options else self._initial_state(k)

    def _advance_eager(
        self, state: State, actions: torch.Tensor, ep_return: torch.Tensor, ep_length: torch.Tensor
    ) -> tuple[Any, ...]:
        """Dynamics plus bookkeeping, before auto-reset. Pure, so ``torch.compile`` can fuse it."""
        state, reward, terminated = self._dynamics(state, actions)
        reward = reward.to(torch.float32)
        ep_return, ep_length = ep_return + reward, ep_length + 1
        cut = self._cut_off(state)  # the env's own end (e.g. its data ran out), or None
        if self.max_episode_steps is not None:
            limit = ep_length >= self.max_episode_steps
            cut = limit if cut is None else cut | limit
        if cut is None:
            truncated, done = torch.zeros_like(terminated), terminated
        else:
            truncated = cut > terminated  # cut off (a time limit, the env's own end), not terminated
            done = terminated | truncated
        final_obs = self._as_obs(self._observe(state))
        extra = self._step_info(state)
        return state, reward, terminated, truncated, done, final_obs, ep_return, ep_length, extra

    def _uniform(self, shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
        """Uniform samples in ``[low, high)`` of ``shape`` in ``self.dtype`` from ``self.generator``."""
        out = torch.empty(shape, device=self.device, dtype=self.dtype)
        return out.uniform_(low, high, generator=self.generator)

    @staticmethod
    def _as_obs(obs: torch.Tensor) -> torch.Tensor:
        return obs if obs.dtype == torch.float32 else obs.to(torch.float32)
