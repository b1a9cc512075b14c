"""Pendulum-v1 as batched torch code, with gymnasium's dynamics, reward, limits and resets."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.utils import verify_number_and_cast

from podium.envs.base import State, TensorVecEnv

__all__ = ["PendulumVecEnv"]


class PendulumVecEnv(TensorVecEnv):
    """Swing a pendulum up and hold it there (gymnasium ``Pendulum-v1``), ``num_envs`` at a time.

    Observation ``[N, 3]``: ``cos(theta)``, ``sin(theta)``, angular velocity ``theta_dot`` (rad/s,
    within ``[-8, 8]``), where ``theta`` (rad) is 0 with the pendulum upright. Action ``[N, 1]``: the
    torque (N m) at the pivot; the space is ``[-2, 2]`` and values outside it are clipped to it.
    Reward ``-(wrap(theta)^2 + 0.1 theta_dot^2 + 0.001 torque^2)`` with ``wrap`` mapping the angle to
    ``[-pi, pi)`` and the *clipped* torque; the angle before the step is used. Never terminates;
    truncated after 200 steps. Semi-implicit Euler with ``dt = 0.05`` s: the angular velocity is
    updated first (and clipped to ``[-8, 8]``), then the angle moves with the new velocity. The angle
    itself is not wrapped in the state.
    Initial state: ``theta`` uniform in ``[-pi, pi]``, ``theta_dot`` uniform in ``[-1, 1]``.

    Args:
        g: gravitational acceleration (m/s^2), as gymnasium's ``g`` (10.0 by default).
        Other arguments: see :class:`~podium.envs.base.TensorVecEnv`.

    The state is stored component-major (``[2, N]``: angle, angular velocity).
    """

    reset_options = ("x_init", "y_init")

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    mass = 1.0
    length = 1.0

    @property
    def max_return(self) -> float:
        return 0.0  # every reward is a cost, <= 0

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        max_episode_steps: int | None = 200,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        compile: bool = False,
        g: float = 10.0,
    ) -> None:
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        super().__init__(
            num_envs,
            gym.spaces.Box(-high, high, dtype=np.float32),
            gym.spaces.Box(-self.max_torque, self.max_torque, shape=(1,), dtype=np.float32),
            device=device,
            max_episode_steps=max_episode_steps,
            dtype=dtype,
            validate_actions=validate_actions,
            compile=compile,
        )
        self.g = float(g)
        self._init_high = torch.tensor([[math.pi], [1.0]], dtype=self.dtype, device=self.device)

    def _initial_state(self, k: int, options: dict[str, Any] | None = None) -> State:
        high = self._init_high
        if options:  # gymnasium's options: the angle's and the angular velocity's half-ranges
            x, y = (
                verify_number_and_cast(options.get(key, default))
                for key, default in (("x_init", math.pi), ("y_init", 1.0))
            )
            high = torch.tensor([[x], [y]], dtype=self.dtype, device=self.device)
            if not torch.isfinite(high).all():
                raise ValueError(f"x_init {x} and y_init {y} must be finite numbers in {self.dtype}")
        return (self._uniform((2, k), -1.0, 1.0).mul_(high),)

    def _observe(self, state: State) -> torch.Tensor:
        theta, theta_dot = state[0]
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), dim=1)

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        (s,) = state
        theta, theta_dot = s
        torque = actions[:, 0].clamp(-self.max_torque, self.max_torque)
        # cost of the current state: angle folded into [-pi, pi), plus velocity and effort penalties
        folded = torch.remainder(theta + math.pi, 2.0 * math.pi).sub_(math.pi)
        cost = folded.square_().add_(theta_dot.square(), alpha=0.1).add_(torque.square(), alpha=0.001)
        # angular acceleration of a uniform rod pivoting at one end: 3g/(2l) sin(theta) + 3/(m l^2) torque
        accel = torch.sin(theta).mul_(1.5 * self.g / self.length)
        accel.add_(torque, alpha=3.0 / (self.mass * self.length**2))
        new_theta_dot = torch.add(theta_dot, accel, alpha=self.dt).clamp_(-self.max_speed, self.max_speed)
        new_theta = torch.add(theta, new_theta_dot, alpha=self.dt)
        terminated = torch.zeros(theta.shape, dtype=torch.bool, device=theta.device)
        return (torch.stack((new_theta, new_theta_dot)),), cost.neg_(), terminated
