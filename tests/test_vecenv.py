"""The VecEnv contract (DESIGN.md): tensors on device, same-step auto-reset, final_obs, episode stats,
seeding, gymnasium wrapper compatibility and clear errors for bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium.envs as envs
from podium.envs.classic.cartpole import CartPoleVecEnv


def test_reset_and_step_return_tensors_with_documented_dtypes_and_shapes():
    env = envs.make("CartPole-v1", num_envs=8, seed=0)
    obs, info = env.reset()
    assert isinstance(obs, torch.Tensor) and obs.shape == (8, 4) and obs.dtype == torch.float32
    obs, reward, terminated, truncated, info = env.step(torch.zeros(8, dtype=torch.long))
    assert reward.shape == (8,) and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert info["final_obs"].shape == (8, 4)
    assert env.observation_space.shape == (8, 4) and env.single_action_space == gym.spaces.Discrete(2)
    assert env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP


def test_same_step_autoreset_reports_final_obs_and_episode_stats():
    env = CartPoleVecEnv(num_envs=64)
    env.reset(seed=3)
    ret = torch.zeros(64)
    length = torch.zeros(64, dtype=torch.long)
    seen = 0
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(torch.ones(64, dtype=torch.long))  # always push right
        ret += reward
        length += 1
        done = terminated | truncated
        assert torch.equal(info["_final_obs"], done)
        if done.any():
            seen += int(done.sum())
            # the final observation is out of bounds (the pole fell or the cart left); the new one is a reset state
            final = info["final_obs"][done]
            assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * np.pi / 360)).all()
            assert (obs[done].abs() <= 0.05).all()
            assert torch.equal(info["episode_return"][done], ret[done])
            assert torch.equal(info["episode_length"][done], length[done])
            ret[done] = 0
            length[done] = 0
    assert seen > 64  # every sub-env finished at least once


def test_time_limit_truncates_exactly_at_max_episode_steps():
    env = CartPoleVecEnv(num_envs=4, max_episode_steps=7)
    env.reset(seed=0)
    for t in range(1, 8):
        # alternate pushes keep the pole up for 7 steps from a near-upright start
        _, _, terminated, truncated, info = env.step(torch.full((4,), t % 2, dtype=torch.long))
    assert truncated.all() and not terminated.any()
    assert torch.equal(info["episode_length"], torch.full((4,), 7))
    assert env.episode_length.eq(0).all()


def test_seeded_runs_are_reproducible_and_seeds_differ():
    def rollout(seed: int) -> torch.Tensor:
        env = envs.make("CartPole-v1", num_envs=16, seed=seed)
        obs, _ = env.reset()
        gen = torch.Generator().manual_seed(123)
        trace = [obs]
        for _ in range(100):
            obs, *_ = env.step(torch.randint(0, 2, (16,), generator=gen))
            trace.append(obs)
        return torch.stack(trace)

    assert torch.equal(rollout(1), rollout(1))
    assert not torch.equal(rollout(1), rollout(2))


def test_explicit_reset_seed_overrides_make_seed():
    env = envs.make("CartPole-v1", num_envs=4, seed=1)
    a, _ = env.reset(seed=5)
    b, _ = envs.make("CartPole-v1", num_envs=4, seed=9).reset(seed=5)
    assert torch.equal(a, b)


def test_gymnasium_record_episode_statistics_wraps_a_podium_vecenv():
    # numpy-based gymnasium wrappers go over gymnasium's own ArrayConversion(torch -> numpy)
    env = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.wrappers.vector.ArrayConversion(CartPoleVecEnv(num_envs=8), env_xp=torch, target_xp=np)
    )
    env.reset(seed=0)
    finished = 0
    for _ in range(100):
        _, _, _, _, info = env.step(np.random.randint(0, 2, 8))
        if "episode" in info:
            mask = np.asarray(info["_episode"])
            # the wrapper's own bookkeeping agrees with podium's
            np.testing.assert_allclose(info["episode"]["r"][mask], info["episode_return"][mask])
            np.testing.assert_array_equal(info["episode"]["l"][mask], info["episode_length"][mask])
            finished += int(mask.sum())
    assert finished > 0 and len(env.return_queue) == finished


def test_functional_gymnasium_wrappers_apply_directly_to_tensors():
    # (gymnasium's observation wrappers refuse SAME_STEP autoreset by design: they would miss final_obs)
    env = gym.wrappers.vector.TransformReward(CartPoleVecEnv(num_envs=4), lambda r: r * 0.5)
    env.reset(seed=0)
    _, reward, *_ = env.step(torch.zeros(4, dtype=torch.long))
    assert torch.equal(reward, torch.full((4,), 0.5))


def test_step_before_reset_is_an_error():
    with pytest.raises(RuntimeError, match="before reset"):
        CartPoleVecEnv(num_envs=2).step(torch.zeros(2, dtype=torch.long))


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (torch.zeros(3, dtype=torch.long), "shape"),  # wrong batch size
        (torch.zeros(4, 2, dtype=torch.long), "shape"),
        (torch.zeros(4), "integer"),  # float actions for a Discrete space
        (torch.tensor([0, 1, 2, 0]), r"\[0, 1\]"),  # out of range
        (torch.tensor([0, -1, 0, 0]), r"\[0, 1\]"),
    ],
)
def test_bad_discrete_actions_raise_clear_errors(actions, match):
    env = CartPoleVecEnv(num_envs=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(actions)


def test_numpy_actions_are_accepted():
    env = CartPoleVecEnv(num_envs=4)
    env.reset(seed=0)
    obs, *_ = env.step(np.array([0, 1, 0, 1]))
    assert isinstance(obs, torch.Tensor)


@pytest.mark.parametrize("num_envs", [0, -3, 2.5, True, "8"])
def test_bad_num_envs(num_envs):
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("CartPole-v1", num_envs=num_envs)


@pytest.mark.parametrize("device", ["gpu", "cuda:7" if not torch.cuda.is_available() else "cuda:99", "tpu"])
def test_unknown_device(device):
    with pytest.raises(ValueError, match="device"):
        envs.make("CartPole-v1", num_envs=2, device=device)


def test_unknown_env_id_suggests_close_match():
    with pytest.raises(KeyError, match="CartPole-v1"):
        envs.make("CartPol-v1")


def test_register_a_user_vecenv_and_make_it():
    class Constant(CartPoleVecEnv):
        pass

    envs.register("MyConstant-v0", Constant, description="test env", max_episode_steps=3)
    try:
        env = envs.make("MyConstant-v0", num_envs=2)
        assert isinstance(env, Constant) and env.max_episode_steps == 3
        assert "MyConstant-v0" in [s.id for s in envs.list_envs()]
        with pytest.raises(ValueError, match="already registered"):
            envs.register("MyConstant-v0", Constant)
    finally:
        envs.registry.pop("MyConstant-v0")


def test_compiled_step_matches_eager():
    pytest.importorskip("torch._inductor")
    eager, compiled = CartPoleVecEnv(num_envs=32), CartPoleVecEnv(num_envs=32, compile=True)
    a, _ = eager.reset(seed=4)
    b, _ = compiled.reset(seed=4)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        act = torch.randint(0, 2, (32,), generator=gen)
        a, ra, ta, _, _ = eager.step(act)
        b, rb, tb, _, _ = compiled.step(act)
        torch.testing.assert_close(a, b)
        assert torch.equal(ta, tb) and torch.equal(ra, rb)


def test_many_compiled_envs_in_one_process_do_not_exhaust_the_compile_cache():
    # torch.compile allows 8 recompilations per code object; each env size must not count against it
    for n in range(1, 10):
        env = CartPoleVecEnv(num_envs=n, compile=True)
        env.reset(seed=n)
        obs, *_ = env.step(torch.zeros(n, dtype=torch.long))
        assert obs.shape == (n, 4)


def test_set_state_checks_its_shape():
    env = CartPoleVecEnv(num_envs=3)
    env.reset(seed=0)
    env.set_state(torch.zeros(3, 4))
    assert torch.equal(env.step(torch.zeros(3, dtype=torch.long))[0][:, 0], torch.zeros(3))
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        env.set_state(torch.zeros(2, 4))


@pytest.mark.parametrize("spec", envs.list_envs(), ids=lambda s: s.id)
def test_what_podium_envs_shows_without_building_an_env_is_what_the_env_is(spec):
    from podium.envs.registry import describe_space

    if spec.id in ("Ant-v5", "Humanoid-v5"):
        pytest.importorskip("mujoco")
    env = envs.make(spec.id, num_envs=1)
    assert spec.observation == describe_space(env.single_observation_space)
    assert spec.action == describe_space(env.single_action_space)
    assert spec.time_limit == env.max_episode_steps


def test_the_env_list_costs_no_torch_import():
    import subprocess
    import sys

    code = "import sys; from podium.envs.registry import list_envs; list_envs(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
