"""Ant-v5 as a batched tensor env: gymnasium's model, reward, termination, reset and time limit."""

from __future__ import annotations

from typing import Any

import torch

from podium.envs.locomotion.base import Frame, LocomotionVecEnv

__all__ = ["AntVecEnv"]


class AntVecEnv(LocomotionVecEnv):
    """A four-legged ant learns to run forward (gymnasium ``Ant-v5``), ``num_envs`` at a time.

    Model: gymnasium's ``ant.xml`` (RK4, 0.01 s; 5 substeps per env step, ``dt = 0.05`` s).
    Action ``[N, 8]``: hip and ankle torques in ``[-1, 1]`` (gear 150; MuJoCo clamps larger values).
    Observation ``[N, 105]`` (float32): ``qpos[2:]`` (13), ``qvel`` (14), then the external contact
    forces ``cfrc_ext`` of the 13 bodies after the world, clipped to ``contact_force_range`` (78).
    Reward ``forward + healthy - ctrl - contact`` with ``forward = forward_reward_weight * dx/dt`` of
    the torso's position, ``healthy = healthy_reward`` while healthy, ``ctrl = ctrl_cost_weight *
    sum(action^2)`` (the raw action), ``contact = contact_cost_weight * sum(clip(cfrc_ext)^2)`` (all
    bodies). Healthy: position and velocity finite and torso height ``qpos[2]`` in ``healthy_z_range``
    (inclusive); terminated when not (with ``terminate_when_unhealthy``); truncated after 1000 steps.
    Initial state: ``qpos0 + U(-s, s)``, ``qvel = s * N(0, 1)`` with ``s = reset_noise_scale`` (0.1);
    contact forces are zero in the first observation, as in gymnasium.

    Args:
        forward_reward_weight, ctrl_cost_weight, contact_cost_weight, healthy_reward, main_body,
        terminate_when_unhealthy, healthy_z_range, contact_force_range,
        include_cfrc_ext_in_observation: gymnasium's ``Ant-v5`` arguments, same defaults.
        Other arguments: see :class:`~podium.envs.locomotion.base.LocomotionVecEnv` (``engine``, ...).
    """

    default_xml = "ant.xml"
    default_noise = 0.1

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        *,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 0.5,
        contact_cost_weight: float = 5e-4,
        healthy_reward: float = 1.0,
        main_body: int | str = 1,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (0.2, 1.0),
        contact_force_range: tuple[float, float] = (-1.0, 1.0),
        include_cfrc_ext_in_observation: bool = True,
        **kwargs: Any,
    ) -> None:
        self.forward_reward_weight = float(forward_reward_weight)
        self.ctrl_cost_weight = float(ctrl_cost_weight)
        self.contact_cost_weight = float(contact_cost_weight)
        self.healthy_reward = float(healthy_reward)
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        self.healthy_z_range = tuple(float(z) for z in healthy_z_range)
        self.contact_force_range = tuple(float(f) for f in contact_force_range)
        self.include_cfrc_ext = bool(include_cfrc_ext_in_observation)
        self._need_cfrc = self.include_cfrc_ext or self.contact_cost_weight != 0.0
        fields = ("xpos", "cfrc_ext") if self._need_cfrc else ("xpos",)
        super().__init__(num_envs, device, fields=fields, **kwargs)
        nbody = self.model.nbody
        if isinstance(main_body, str):
            import mujoco

            body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, main_body)
            if body < 0:
                raise ValueError(f"main_body {main_body!r} is not a body of the model")
            main_body = body
        if not 0 <= int(main_body) < nbody:
            raise ValueError(f"main_body must be a body id in [0, {nbody}) or a body name, got {main_body!r}")
        self.main_body = int(main_body)

    def _extra_size(self, model: Any) -> int:
        return (model.nbody - 1) * 6 * self.include_cfrc_ext

    def _reset_noise(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.reset_noise_scale
        qpos = self._qpos0 + self._uniform((k, self.model.nq), -s, s)
        qvel = torch.randn(k, self.model.nv, generator=self.generator, dtype=self.dtype, device=self.device).mul_(s)
        return qpos, qvel

    def _position(self, frame: Frame) -> torch.Tensor:
        return frame["xpos"][:, self.main_body, :2]

    def _clipped_forces(self, frame: Frame) -> torch.Tensor:
        return frame["cfrc_ext"].clamp(*self.contact_force_range)

    def _extra(self, frame: Frame) -> torch.Tensor:
        k = frame["qpos"].shape[0]
        if not self.include_cfrc_ext:
            return frame["qpos"].new_zeros(k, 0)
        return self._clipped_forces(frame)[:, 1:].reshape(k, -1)

    def _reward(
        self, position_before: torch.Tensor, frame: Frame, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x_velocity = (self._position(frame)[:, 0] - position_before[:, 0]) / self.dt
        z = frame["qpos"][:, 2]
        low, high = self.healthy_z_range
        healthy = self._healthy_finite(frame) & (z >= low) & (z <= high)
        forward_reward = x_velocity * self.forward_reward_weight
        rewards = forward_reward + healthy.to(self.dtype) * self.healthy_reward
        ctrl_cost = self.ctrl_cost_weight * actions.square().sum(dim=1)
        costs = ctrl_cost
        if self._need_cfrc:
            costs = ctrl_cost + self.contact_cost_weight * self._clipped_forces(frame).square().sum(dim=(1, 2))
        terminated = ~healthy if self.terminate_when_unhealthy else torch.zeros_like(healthy)
        return rewards - costs, terminated
