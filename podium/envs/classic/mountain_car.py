"""MountainCar-v0 and MountainCarContinuous-v0 as batched torch code, with gymnasium's dynamics,
rewards, limits and resets."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.utils import maybe_parse_reset_bounds

from podium.envs.base import State, TensorVecEnv

__all__ = ["MountainCarContinuousVecEnv", "MountainCarVecEnv"]


class _MountainCarBase(TensorVecEnv):
    """What both mountain cars share: the track, the state, the observation and the initial state.

    The state is stored component-major (``[2, N]``: position, velocity); the observation is its
    transpose, copied (``[N, 2]``; a view would let an in-place change of an observation change the physics).
    """

    reset_options = ("low", "high")

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    gravity = 0.0025
    goal_position = 0.5

    def __init__(
        self,
        num_envs: int,
        single_action_space: gym.spaces.Box | gym.spaces.Discrete,
        device: str | torch.device | None,
        max_episode_steps: int | None,
        dtype: torch.dtype,
        validate_actions: bool,
        compile: bool,
        goal_velocity: float,
    ) -> None:
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        super().__init__(
            num_envs,
            gym.spaces.Box(low, high, dtype=np.float32),
            single_action_space,
            device=device,
            max_episode_steps=max_episode_steps,
            dtype=dtype,
            validate_actions=validate_actions,
            compile=compile,
        )
        self.goal_velocity = float(goal_velocity)

    def _initial_state(self, k: int, options: dict[str, Any] | None = None) -> State:
        low, high = maybe_parse_reset_bounds(options, -0.6, -0.4)  # gymnasium's options: the position's range
        position = self._uniform((k,), low, high)
        return (torch.stack((position, torch.zeros_like(position))),)

    def _observe(self, state: State) -> torch.Tensor:
        return state[0].T.clone(memory_format=torch.contiguous_format)

    def _move(self, s: torch.Tensor, thrust: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the car with engine acceleration ``thrust [N]``: ``(next_state [2, N], terminated [N])``."""
        position, velocity = s
        # the track's height is sin(3 x), so gravity pulls along it with -gravity * cos(3 x)
        accel = torch.cos(position * 3.0).mul_(-self.gravity).add_(thrust)
        velocity = (velocity + accel).clamp_(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp_(self.min_position, self.max_position)
        # the left edge is an inelastic wall: a car pressed against it stops
        at_wall = (position <= self.min_position) & (velocity < 0.0)
        velocity = velocity.masked_fill_(at_wall, 0.0)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        return torch.stack((position, velocity)), terminated


class MountainCarVecEnv(_MountainCarBase):
    """Drive an under-powered car up a hill (gymnasium ``MountainCar-v0``), ``num_envs`` at a time.

    Observation ``[N, 2]``: position along the track (within ``[-1.2, 0.6]``) and velocity (within
    ``[-0.07, 0.07]``, per step); the track's height is ``sin(3 x)``. Action ``[N]`` in
    {0: accelerate left, 1: coast, 2: accelerate right}, a velocity change of ``(a - 1) * 0.001`` per step.
    Reward -1 per step, including the terminating one. Terminated when ``position >= 0.5`` and
    ``velocity >= goal_velocity`` (0 by default); truncated after 200 steps. Each step adds thrust and
    gravity (``-0.0025 cos(3 x)``) to the velocity, clips it, moves the car by it and clips the position;
    a car that reaches the left edge with negative velocity stops there.
    Initial state: position uniform in ``[-0.6, -0.4]``, velocity 0.

    Args:
        goal_velocity: the velocity the car must at least have at the goal, as gymnasium's argument.
        Other arguments: see :class:`~podium.envs.base.TensorVecEnv`.
    """

    force = 0.001

    @property
    def max_return(self) -> float:
        return -1.0  # -1 per step until the goal, the terminating step included: at least one step

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        max_episode_steps: int | None = 200,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        compile: bool = False,
        goal_velocity: float = 0.0,
    ) -> None:
        super().__init__(
            num_envs,
            gym.spaces.Discrete(3),
            device,
            max_episode_steps,
            dtype,
            validate_actions,
            compile,
            goal_velocity,
        )

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        (s,) = state
        thrust = (actions - 1).to(s.dtype).mul_(self.force)
        new, terminated = self._move(s, thrust)
        reward = torch.full_like(thrust, -1.0)
        return (new,), reward, terminated


class MountainCarContinuousVecEnv(_MountainCarBase):
    """Drive an under-powered car up a hill with a throttle (gymnasium ``MountainCarContinuous-v0``).

    Observation ``[N, 2]``: position along the track (within ``[-1.2, 0.6]``) and velocity (within
    ``[-0.07, 0.07]``, per step); the track's height is ``sin(3 x)``. Action ``[N, 1]``: the throttle,
    space ``[-1, 1]``; the engine uses it clipped to that range, a velocity change of ``0.0015 * a``.
    Reward ``100`` on reaching the goal, minus ``0.1 * a^2`` every step, where ``a`` is the action as
    given, *not* clipped (as in gymnasium: actions outside the space cost more but push no harder).
    Terminated when ``position >= 0.45`` and ``velocity >= goal_velocity`` (0 by default); truncated
    after 999 steps. Same track, gravity, clipping and left wall as :class:`MountainCarVecEnv`.
    Initial state: position uniform in ``[-0.6, -0.4]``, velocity 0.

    Unlike gymnasium, which stores its state as float32 after every step, the state stays in ``dtype``.

    Args:
        goal_velocity: the velocity the car must at least have at the goal, as gymnasium's argument.
        Other arguments: see :class:`~podium.envs.base.TensorVecEnv`.
    """

    goal_position = 0.45
    power = 0.0015
    max_action = 1.0

    @property
    def max_return(self) -> float:
        return 100.0  # +100 at the goal, minus the (non-negative) cost of throttle

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        max_episode_steps: int | None = 999,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        compile: bool = False,
        goal_velocity: float = 0.0,
    ) -> None:
        super().__init__(
            num_envs,
            gym.spaces.Box(-self.max_action, self.max_action, shape=(1,), dtype=np.float32),
            device,
            max_episode_steps,
            dtype,
            validate_actions,
            compile,
            goal_velocity,
        )

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        (s,) = state
        throttle = actions[:, 0]
        thrust = throttle.clamp(-self.max_action, self.max_action).mul_(self.power)
        new, terminated = self._move(s, thrust)
        reward = terminated.to(s.dtype).mul_(100.0).sub_(throttle.square().mul_(0.1))
        return (new,), reward, terminated
