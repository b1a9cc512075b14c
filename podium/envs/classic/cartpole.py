"""CartPole-v1 as batched torch code, with gymnasium's dynamics, reward, limits and resets."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.utils import maybe_parse_reset_bounds

from podium.envs.base import State, TensorVecEnv

__all__ = ["CartPoleVecEnv"]


class CartPoleVecEnv(TensorVecEnv):
    """Balance a pole on a cart (gymnasium ``CartPole-v1``), ``num_envs`` at a time.

    Observation ``[N, 4]``: cart position (m), cart velocity (m/s), pole angle (rad), pole angular
    velocity (rad/s). Action ``[N]`` in {0: push left, 1: push right} with a 10 N force.
    Reward 1 per step, including the terminating one. Terminated when ``|x| > 2.4`` or
    ``|theta| > 12°``; truncated after 500 steps. Euler integration with ``tau = 0.02`` s.
    Initial state: every component uniform in ``[-0.05, 0.05]``.

    The state is stored component-major (``[4, N]``) so that every arithmetic op runs on contiguous
    memory; the observation is a copy of its transpose, ``[N, 4]`` (a view would let a caller's in-place
    change of an observation change the physics)
    """

    reset_options = ("low", "high")

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    @property
    def max_return(self) -> float | None:
        return float(self.max_episode_steps) if self.max_episode_steps else None  # +1 per step

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        max_episode_steps: int | None = 500,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        compile: bool = False,
    ) -> None:
        inf = np.inf
        high = np.array([self.x_threshold * 2, inf, self.theta_threshold * 2, inf], dtype=np.float32)
        super().__init__(
            num_envs,
            gym.spaces.Box(-high, high, dtype=np.float32),
            gym.spaces.Discrete(2),
            device=device,
            max_episode_steps=max_episode_steps,
            dtype=dtype,
            validate_actions=validate_actions,
            compile=compile,
        )
        limits = [[self.x_threshold], [self.theta_threshold]]
        self._limits = torch.tensor(limits, dtype=self.dtype, device=self.device)

    def _initial_state(self, k: int, options: dict[str, Any] | None = None) -> State:
        low, high = maybe_parse_reset_bounds(options, -0.05, 0.05)  # gymnasium's options: every state variable's range
        return (self._uniform((4, k), low, high),)

    def _observe(self, state: State) -> torch.Tensor:
        return state[0].T.clone(memory_format=torch.contiguous_format)

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        (s,) = state
        _, x_dot, theta, theta_dot = s
        m, pml = self.total_mass, self.polemass_length
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        # temp = (force + pml * theta_dot^2 * sin) / m, with force = ±force_mag
        force = actions.to(self.dtype).mul_(2.0 * self.force_mag / m).sub_(self.force_mag / m)
        temp = torch.addcmul(force, theta_dot.square(), sintheta, value=pml / m)
        # thetaacc = (g sin - cos temp) / (l (4/3 - m_pole cos^2 / m))
        numerator = torch.addcmul(sintheta * self.gravity, costheta, temp, value=-1.0)
        denominator = costheta.square().mul_(-self.length * self.masspole / m).add_(self.length * 4.0 / 3.0)
        thetaacc = numerator.div_(denominator)
        xacc = torch.addcmul(temp, thetaacc, costheta, value=-pml / m)
        # explicit Euler on all four components at once: s' = s + tau * ds/dt
        new = torch.add(s, torch.stack((x_dot, xacc, theta_dot, thetaacc)), alpha=self.tau)
        out_of_bounds = new[0::2].abs() > self._limits
        terminated = out_of_bounds[0] | out_of_bounds[1]
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return (new,), reward, terminated
