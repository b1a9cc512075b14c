"""Acrobot-v1 as batched torch code, with gymnasium's dynamics, reward, limits and resets."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.utils import maybe_parse_reset_bounds

from podium.envs.base import State, TensorVecEnv

__all__ = ["AcrobotVecEnv"]


class AcrobotVecEnv(TensorVecEnv):
    """Swing the tip of a two-link arm above a line (gymnasium ``Acrobot-v1``), ``num_envs`` at a time.

    Observation ``[N, 6]``: ``cos(theta1)``, ``sin(theta1)``, ``cos(theta2)``, ``sin(theta2)``,
    ``theta1_dot`` (rad/s, within ``[-4 pi, 4 pi]``), ``theta2_dot`` (rad/s, within ``[-9 pi, 9 pi]``).
    ``theta1`` (rad) is the angle of the first link from hanging straight down, ``theta2`` (rad) that
    of the second link relative to the first. Action ``[N]`` in {0, 1, 2}: torque -1, 0 or +1 (N m)
    on the joint between the links (the only actuated joint).
    Reward -1 per step, 0 on the terminating step. Terminated when the tip is more than one link
    length above the pivot, ``-cos(theta1) - cos(theta1 + theta2) > 1``; truncated after 500 steps.
    One step integrates the "book" equations of motion (Sutton & Barto) over ``dt = 0.2`` s with a
    single classical Runge-Kutta (RK4) step, holding the torque constant; then both angles are wrapped
    into ``[-pi, pi]`` and the angular velocities clipped to their bounds. No torque noise.
    Initial state: all four components uniform in ``[-0.1, 0.1]``.

    The state is stored component-major (``[4, N]``: ``theta1, theta2, theta1_dot, theta2_dot``).
    """

    reset_options = ("low", "high")

    dt = 0.2
    link_length_1 = 1.0  # m
    link_mass_1 = 1.0  # kg
    link_mass_2 = 1.0  # kg
    link_com_1 = 0.5  # m, pivot to the first link's centre of mass
    link_com_2 = 0.5  # m, joint to the second link's centre of mass
    link_moi = 1.0  # moment of inertia of each link
    gravity = 9.8
    max_vel_1 = 4 * math.pi
    max_vel_2 = 9 * math.pi

    @property
    def max_return(self) -> float:
        return 0.0  # -1 per step until the goal

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        max_episode_steps: int | None = 500,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        compile: bool = False,
    ) -> None:
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2], dtype=np.float32)
        super().__init__(
            num_envs,
            gym.spaces.Box(-high, high, dtype=np.float32),
            gym.spaces.Discrete(3),
            device=device,
            max_episode_steps=max_episode_steps,
            dtype=dtype,
            validate_actions=validate_actions,
            compile=compile,
        )
        self._max_vel = torch.tensor([[self.max_vel_1], [self.max_vel_2]], dtype=self.dtype, device=self.device)

    def _initial_state(self, k: int, options: dict[str, Any] | None = None) -> State:
        low, high = maybe_parse_reset_bounds(options, -0.1, 0.1)  # gymnasium's options: every state variable's range
        return (self._uniform((4, k), low, high),)

    def _observe(self, state: State) -> torch.Tensor:
        theta1, theta2, theta1_dot, theta2_dot = state[0]
        return torch.stack(
            (torch.cos(theta1), torch.sin(theta1), torch.cos(theta2), torch.sin(theta2), theta1_dot, theta2_dot), dim=1
        )

    def _derivatives(self, s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        """Time derivative ``[4, N]`` of the state ``s [4, N]`` under a constant joint ``torque [N]``."""
        theta1, theta2, dtheta1, dtheta2 = s
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, inertia, g = self.link_com_1, self.link_com_2, self.link_moi, self.gravity
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        coupling = m2 * l1 * lc2  # strength of the velocity/configuration coupling between the links
        # generalised inertia terms
        d1 = cos2 * (2.0 * coupling) + (m1 * lc1**2 + m2 * (l1**2 + lc2**2) + 2.0 * inertia)
        d2 = cos2 * coupling + (m2 * lc2**2 + inertia)
        # gravity on the second link (measured from the downward vertical) and the first joint's generalised force
        phi2 = torch.sin(theta1 + theta2) * (m2 * lc2 * g)
        phi1 = (
            phi2
            + torch.sin(theta1) * ((m1 * lc1 + m2 * l1) * g)
            - sin2 * coupling * (dtheta2 * (dtheta2 + 2.0 * dtheta1))
        )
        ratio = d2 / d1
        ddtheta2 = (torque + ratio * phi1 - coupling * dtheta1.square() * sin2 - phi2) / (
            (m2 * lc2**2 + inertia) - ratio * d2
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2))

    @staticmethod
    def _wrap_angle(x: torch.Tensor) -> torch.Tensor:
        """Shift ``x`` by whole turns into ``[-pi, pi]`` (values already inside are left untouched)."""
        turn = 2.0 * math.pi
        x = torch.where(x > math.pi, x - turn * torch.ceil((x - math.pi) / turn), x)
        return torch.where(x < -math.pi, x + turn * torch.ceil((-math.pi - x) / turn), x)

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        (s,) = state
        torque = actions.to(s.dtype) - 1.0  # 0, 1, 2 -> -1, 0, +1 N m
        h = self.dt
        k1 = self._derivatives(s, torque)
        k2 = self._derivatives(torch.add(s, k1, alpha=h / 2), torque)
        k3 = self._derivatives(torch.add(s, k2, alpha=h / 2), torque)
        k4 = self._derivatives(torch.add(s, k3, alpha=h), torque)
        slope = (k2 + k3).mul_(2.0).add_(k1).add_(k4)
        integrated = torch.add(s, slope, alpha=h / 6)
        angles = self._wrap_angle(integrated[:2])
        velocities = torch.maximum(torch.minimum(integrated[2:], self._max_vel), -self._max_vel)
        new = torch.cat((angles, velocities))
        theta1, theta2 = angles
        terminated = (torch.cos(theta1) + torch.cos(theta1 + theta2)) < -1.0
        reward = terminated.to(s.dtype) - 1.0
        return (new,), reward, terminated
