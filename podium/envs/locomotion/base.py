"""What every MuJoCo locomotion env shares: an engine, gymnasium's state, reset and time limit.

A :class:`LocomotionVecEnv` is a :class:`~podium.envs.base.TensorVecEnv` whose pure hooks call an
:class:`~podium.envs.locomotion.engine.Engine`; the subclass writes only gymnasium's formulas (reward,
termination, observation tail, reset noise), once, in torch. The state of N sub-envs is five tensors,
sub-env dimension last (the base class's convention):

* ``qpos [nq, N]``, ``qvel [nv, N]``: gymnasium's ``data.qpos`` / ``data.qvel``;
* ``qacc_warmstart [nv, N]``: the constraint solver's warm start, which gymnasium's ``MjData`` carries
  from one step to the next (zero after a reset);
* ``position [2, N]``: the x-y position the forward reward differentiates (Ant: the torso's ``xpos``,
  Humanoid: the centre of mass of ``xipos``), as of the last engine call — like gymnasium, which reads
  it from ``MjData`` before and after ``do_simulation``;
* ``extra [d, N]``: the derived part of the observation (contact forces, ...).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from podium.envs.base import State, TensorVecEnv, _check_num_envs, resolve_device
from podium.envs.locomotion.engine import Engine, load_model, make_engine

__all__ = ["LocomotionVecEnv"]

Frame = dict[str, torch.Tensor]


def default_engine(device: torch.device) -> str:
    """``"mjx"`` on a CUDA device, ``"mujoco"`` (MuJoCo C on the CPU) anywhere else."""
    return "mjx" if device.type == "cuda" else "mujoco"


class LocomotionVecEnv(TensorVecEnv):
    """Base of podium's MuJoCo locomotion envs (see the module docstring).

    Args:
        num_envs: number of sub-environments N.
        device: torch device of observations, rewards and (for ``engine="mjx"``) the simulation.
        engine: ``"mujoco"`` (MuJoCo C on the CPU: gymnasium's exact numbers), ``"mjx"`` (MuJoCo XLA on
            a GPU, or slowly on the CPU) or ``"auto"`` (the default: ``"mjx"`` on CUDA devices,
            ``"mujoco"`` elsewhere).
        engine_options: passed to the engine (``threads`` for ``"mujoco"``; ``iterations``,
            ``ls_iterations`` for ``"mjx"``).
        max_episode_steps: time limit (gymnasium's 1000).
        dtype: ``None`` (the engine's: float64 for ``"mujoco"``, float32 for ``"mjx"``) or that same dtype.
        validate_actions: see :class:`~podium.envs.base.VecEnv` (on a GPU, False saves a host sync per step).
        xml_file: the MJCF model, a file name in gymnasium's MuJoCo assets or a path (gymnasium's argument).
        frame_skip: MuJoCo substeps per env step (gymnasium's 5).
        reset_noise_scale: scale of the initial-state noise (gymnasium's argument).
        exclude_current_positions_from_observation: drop the x-y position from the observation (gymnasium's).

    Raises:
        MissingDependencyError: the engine's extra is not installed (the message names the ``pip install``).
        ValueError: bad argument, a device the engine cannot use, or more sub-envs than fit in memory.
    """

    default_xml: ClassVar[str]
    default_noise: ClassVar[float]

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        *,
        engine: str = "auto",
        engine_options: dict[str, Any] | None = None,
        max_episode_steps: int | None = 1000,
        dtype: torch.dtype | None = None,
        validate_actions: bool = True,
        xml_file: str | None = None,
        frame_skip: int = 5,
        reset_noise_scale: float | None = None,
        exclude_current_positions_from_observation: bool = True,
        fields: tuple[str, ...],
    ) -> None:
        num_envs = _check_num_envs(num_envs)
        dev = resolve_device(device)
        name = default_engine(dev) if engine == "auto" else engine
        self.model = model = load_model(xml_file or self.default_xml, f"podium's {type(self).__name__}")
        self.engine: Engine = make_engine(name, model, num_envs, dev, frame_skip, fields, **(engine_options or {}))
        if dtype is not None and dtype != self.engine.dtype:
            raise ValueError(
                f"the {name!r} engine computes in {self.engine.dtype}; pass dtype=None (or {self.engine.dtype})"
            )
        self.batched = name == "mjx"  # MuJoCo C steps its worlds one by one (on a few threads)
        self.fork_safe = name != "mjx"  # (XLA's threads do not survive a fork: a forked child's compile hangs)
        self.frame_skip = int(frame_skip)
        self.dt = float(model.opt.timestep) * self.frame_skip  # gymnasium's MujocoEnv.dt, same arithmetic
        self.reset_noise_scale = self.default_noise if reset_noise_scale is None else float(reset_noise_scale)
        self.exclude_current_positions = bool(exclude_current_positions_from_observation)
        obs_size = model.nq - 2 * self.exclude_current_positions + model.nv + self._extra_size(model)
        bounds = model.actuator_ctrlrange.copy().astype(np.float32)  # gymnasium's MujocoEnv action space
        super().__init__(
            num_envs,
            gym.spaces.Box(-np.inf, np.inf, (obs_size,), dtype=np.float32),
            gym.spaces.Box(bounds[:, 0], bounds[:, 1], dtype=np.float32),
            device=dev,
            max_episode_steps=max_episode_steps,
            dtype=self.engine.dtype,
            validate_actions=validate_actions,
        )
        self._qpos0 = torch.as_tensor(model.qpos0, dtype=self.dtype, device=self.device)

    def close_extras(self, **kwargs: Any) -> None:
        """Release the engine's thread pools."""
        self.engine.close()

    # ----------------------------------------------------------------- formulas, for subclasses
    def _extra_size(self, model: Any) -> int:
        """Width d of the observation's derived part for ``model`` (an ``MjModel``)."""
        raise NotImplementedError

    def _reset_noise(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``k`` initial ``qpos [k, nq]`` and ``qvel [k, nv]`` drawn from ``self.generator``."""
        raise NotImplementedError

    def _position(self, frame: Frame) -> torch.Tensor:
        """The x-y position ``[k, 2]`` whose change over a step is the forward velocity."""
        raise NotImplementedError

    def _extra(self, frame: Frame) -> torch.Tensor:
        """The observation's derived part ``[k, d]``."""
        raise NotImplementedError

    def _reward(
        self, position_before: torch.Tensor, frame: Frame, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reward [N], terminated [N])`` of a step that moved from ``position_before [N, 2]`` to ``frame``."""
        raise NotImplementedError

    # ----------------------------------------------------------------- TensorVecEnv hooks
    def _pack(self, frame: Frame) -> State:
        parts = (frame["qpos"], frame["qvel"], frame["qacc_warmstart"], self._position(frame), self._extra(frame))
        return tuple(p.T for p in parts)

    def _initial_state(self, k: int) -> State:
        qpos, qvel = self._reset_noise(k)
        return self._pack(self.engine.forward(qpos, qvel))

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        qpos, qvel, warm, position, _ = state
        frame = self.engine.step(qpos.T, qvel.T, warm.T, actions)
        reward, terminated = self._reward(position.T, frame, actions)
        return self._pack(frame), reward, terminated

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel, _, _, extra = state
        start = 2 if self.exclude_current_positions else 0
        return torch.cat((qpos.T[:, start:], qvel.T, extra.T), dim=1)

    # ----------------------------------------------------------------- public
    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> None:  # type: ignore[override]
        """Put every sub-env at ``qpos [N, nq]``, ``qvel [N, nv]`` as gymnasium's ``set_state`` after
        ``mj_resetData`` does (zero controls and warm start; the observation is then that of a reset).
        For tests and scripted starts; call :meth:`reset` first.

        Raises:
            ValueError: wrong shapes.
        """
        n = self.num_envs
        if tuple(qpos.shape) != (n, self.model.nq) or tuple(qvel.shape) != (n, self.model.nv):
            raise ValueError(
                f"{type(self).__name__}.set_state expects qpos ({n}, {self.model.nq}) and qvel ({n}, {self.model.nv}), "
                f"got {tuple(qpos.shape)} and {tuple(qvel.shape)}"
            )
        as_state = {"dtype": self.dtype, "device": self.device}
        frame = self.engine.forward(torch.as_tensor(qpos, **as_state), torch.as_tensor(qvel, **as_state))
        self.state = self._pack(frame)

    def observation(self) -> torch.Tensor:
        """The current observation ``[N, obs_dim]`` (float32), e.g. after :meth:`set_state`."""
        return self._as_obs(self._observe(self.state))

    def _healthy_finite(self, frame: Frame) -> torch.Tensor:
        return torch.isfinite(frame["qpos"]).all(dim=1) & torch.isfinite(frame["qvel"]).all(dim=1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device}, engine={self.engine.name!r})"
