"""Humanoid-v5 as a batched tensor env: gymnasium's model, reward, termination, reset and time limit."""

from __future__ import annotations

from typing import Any

import torch

from podium.envs.locomotion.base import Frame, LocomotionVecEnv

__all__ = ["HumanoidVecEnv"]


class HumanoidVecEnv(LocomotionVecEnv):
    """A 3D humanoid learns to walk forward without falling (gymnasium ``Humanoid-v5``), ``num_envs`` at a time.

    Model: gymnasium's ``humanoid.xml`` (RK4, 0.003 s; 5 substeps per env step, ``dt = 0.015`` s; its
    PGS solver on the ``"mujoco"`` engine, Newton on ``"mjx"``, which has no PGS).
    Action ``[N, 17]``: joint torques in ``[-0.4, 0.4]``.
    Observation ``[N, 348]`` (float32): ``qpos[2:]`` (22), ``qvel`` (23), then for the 13 bodies after
    the world ``cinert`` (130), ``cvel`` (78), ``qfrc_actuator[6:]`` (17) and ``cfrc_ext`` (78); the
    ``include_*`` flags drop parts. Reward ``forward + healthy - ctrl - contact`` with ``forward =
    forward_reward_weight * dx/dt`` of the mass-weighted centre of the bodies' ``xipos``, ``healthy =
    healthy_reward`` while healthy, ``ctrl = ctrl_cost_weight * sum(ctrl^2)``, ``contact =
    contact_cost_weight * sum(cfrc_ext^2)`` clipped to ``contact_cost_range``. Healthy: ``qpos[2]``
    strictly inside ``healthy_z_range``; terminated when not (with ``terminate_when_unhealthy``);
    truncated after 1000 steps. Initial state: ``qpos0 + U(-s, s)``, ``qvel = U(-s, s)`` with
    ``s = reset_noise_scale`` (0.01); actuator and contact forces are zero in the first observation.

    Args:
        forward_reward_weight, ctrl_cost_weight, contact_cost_weight, contact_cost_range, healthy_reward,
        terminate_when_unhealthy, healthy_z_range, include_cinert_in_observation,
        include_cvel_in_observation, include_qfrc_actuator_in_observation,
        include_cfrc_ext_in_observation: gymnasium's ``Humanoid-v5`` arguments, same defaults.
        Other arguments: see :class:`~podium.envs.locomotion.base.LocomotionVecEnv` (``engine``, ...).
    """

    default_xml = "humanoid.xml"
    default_noise = 1e-2

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        *,
        forward_reward_weight: float = 1.25,
        ctrl_cost_weight: float = 0.1,
        contact_cost_weight: float = 5e-7,
        contact_cost_range: tuple[float, float] = (-float("inf"), 10.0),
        healthy_reward: float = 5.0,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (1.0, 2.0),
        include_cinert_in_observation: bool = True,
        include_cvel_in_observation: bool = True,
        include_qfrc_actuator_in_observation: bool = True,
        include_cfrc_ext_in_observation: bool = True,
        **kwargs: Any,
    ) -> None:
        self.forward_reward_weight = float(forward_reward_weight)
        self.ctrl_cost_weight = float(ctrl_cost_weight)
        self.contact_cost_weight = float(contact_cost_weight)
        self.contact_cost_range = tuple(float(c) for c in contact_cost_range)
        self.healthy_reward = float(healthy_reward)
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        self.healthy_z_range = tuple(float(z) for z in healthy_z_range)
        self.include = {
            "cinert": bool(include_cinert_in_observation),
            "cvel": bool(include_cvel_in_observation),
            "qfrc_actuator": bool(include_qfrc_actuator_in_observation),
            "cfrc_ext": bool(include_cfrc_ext_in_observation),
        }
        self._need_cfrc = self.include["cfrc_ext"] or self.contact_cost_weight != 0.0
        observed = [key for key in ("cinert", "cvel", "qfrc_actuator") if self.include[key]]
        fields = ("xipos", *observed, *(("cfrc_ext",) if self._need_cfrc else ()))
        super().__init__(num_envs, device, fields=fields, **kwargs)
        mass = torch.as_tensor(self.model.body_mass, dtype=self.dtype, device=self.device)
        self._mass, self._total_mass = mass, mass.sum()

    def _extra_size(self, model: Any) -> int:
        widths = {"cinert": 10 * (model.nbody - 1), "cvel": 6 * (model.nbody - 1), "cfrc_ext": 6 * (model.nbody - 1)}
        widths["qfrc_actuator"] = model.nv - 6
        return sum(w for key, w in widths.items() if self.include[key])

    def _reset_noise(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.reset_noise_scale
        qpos = self._qpos0 + self._uniform((k, self.model.nq), -s, s)
        return qpos, self._uniform((k, self.model.nv), -s, s)

    def _position(self, frame: Frame) -> torch.Tensor:
        # gymnasium's mass_center: sum_b(mass_b * xipos_b) / sum_b(mass_b), x and y
        return (self._mass[:, None] * frame["xipos"][:, :, :2]).sum(dim=1) / self._total_mass

    def _extra(self, frame: Frame) -> torch.Tensor:
        k = frame["qpos"].shape[0]
        parts = []
        for key in ("cinert", "cvel", "qfrc_actuator", "cfrc_ext"):
            if self.include[key]:
                value = frame[key][:, 6:] if key == "qfrc_actuator" else frame[key][:, 1:]
                parts.append(value.reshape(k, -1))
        return torch.cat(parts, dim=1) if parts else frame["qpos"].new_zeros(k, 0)

    def _reward(
        self, position_before: torch.Tensor, frame: Frame, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x_velocity = (self._position(frame)[:, 0] - position_before[:, 0]) / self.dt
        z = frame["qpos"][:, 2]
        low, high = self.healthy_z_range
        healthy = (z > low) & (z < high)
        forward_reward = self.forward_reward_weight * x_velocity
        rewards = forward_reward + healthy.to(self.dtype) * self.healthy_reward
        ctrl_cost = self.ctrl_cost_weight * actions.square().sum(dim=1)  # gymnasium: data.ctrl, i.e. the action
        if self._need_cfrc:
            contact = self.contact_cost_weight * frame["cfrc_ext"].square().sum(dim=(1, 2))
            costs = ctrl_cost + contact.clamp(*self.contact_cost_range)
        else:  # a weight of 0 without the forces: gymnasium still clamps the zero cost into the range
            costs = ctrl_cost + min(max(0.0, self.contact_cost_range[0]), self.contact_cost_range[1])
        terminated = ~healthy if self.terminate_when_unhealthy else torch.zeros_like(healthy)
        return rewards - costs, terminated
