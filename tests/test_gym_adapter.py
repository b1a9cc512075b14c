"""GymVecEnv: any gymnasium env (Box/Discrete actions; Box or Discrete observations) as a podium VecEnv."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium.envs as envs
from podium.envs import GymVecEnv


class _Unknown(gym.Env):
    """An env podium has never heard of: 2-D Box actions, 3-D obs, episodes of 5 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float64)
    action_space = gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3), {}

    def step(self, action):
        self.t += 1
        obs = np.full(3, self.t / 10.0)
        return obs, float(np.sum(action)), False, self.t >= 5, {}


def test_unknown_env_from_a_constructor():
    env = GymVecEnv(_Unknown, num_envs=3, vectorization="sync")
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.float32 and obs.shape == (3, 3)
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(torch.ones(3, 2))
    assert torch.equal(reward, torch.full((3,), 2.0))
    assert truncated.all() and not terminated.any()
    torch.testing.assert_close(info["final_obs"], torch.full((3, 3), 0.5))  # last obs of the episode
    assert not torch.allclose(obs, torch.full((3, 3), 0.5))  # already the next episode's first obs
    assert torch.equal(info["episode_return"], torch.full((3,), 10.0))
    assert torch.equal(info["episode_length"], torch.full((3,), 5))


def test_discrete_observations_become_one_hot():
    env = envs.make("FrozenLake-v1", num_envs=2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 16) and torch.equal(obs.sum(1), torch.ones(2))


def test_adapter_matches_gymnasium_cartpole_exactly():
    env = envs.make("CartPole-v1", num_envs=2, native=False)
    ref = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=7)
    ref_obs, _ = ref.reset(seed=7)
    np.testing.assert_array_equal(obs[0].numpy(), ref_obs)
    for t in range(30):
        obs, reward, terminated, truncated, _ = env.step(torch.tensor([t % 2, 0]))
        ref_obs, ref_r, ref_term, ref_trunc, _ = ref.step(t % 2)
        assert (float(reward[0]), bool(terminated[0]), bool(truncated[0])) == (ref_r, ref_term, ref_trunc)
        if ref_term or ref_trunc:
            break
        np.testing.assert_array_equal(obs[0].numpy(), ref_obs)


def test_async_vectorization_runs_subprocesses():
    env = GymVecEnv("Pendulum-v1", num_envs=2, vectorization="async")
    try:
        obs, _ = env.reset(seed=0)
        obs, reward, *_ = env.step(torch.zeros(2, 1))
        assert obs.shape == (2, 3) and reward.shape == (2,)
    finally:
        env.close()


def test_unsupported_spaces_are_refused_with_a_fix():
    with pytest.raises(ValueError, match="FlattenObservation"):
        envs.make("Blackjack-v1")  # Tuple observations


def test_bad_actions_through_the_adapter():
    env = envs.make("Pendulum-v1", num_envs=2, native=False)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.tensor([[0.0], [float("nan")]]))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(3, 1))
