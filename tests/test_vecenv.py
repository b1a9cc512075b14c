"""The VecEnv contract (DESIGN.md): tensors on device, same-step auto-reset, final_obs, episode stats,
seeding, gymnasium wrapper compatibility and clear errors for bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium.envs as envs
from podium.envs.base import TensorVecEnv
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
    with pytest.raises(RuntimeError, match=r"^CartPoleVecEnv.step\(\) called before reset\(\); call env.reset"):
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


def test_native_false_on_an_env_only_podium_has_says_so():
    with pytest.raises(ValueError, match="StockTrading-v0 is podium's own env and has no gymnasium implementation"):
        envs.make("StockTrading-v0", native=False)


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


def test_many_compiled_envs_in_one_process_do_not_exhaust_the_compile_cache(monkeypatch):
    # torch.compile allows 8 recompilations per code object; each env size must not count against it. With a
    # limit of 1, a second size fails at once where the shared code object is compiled (as it once was)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    for n in (1, 2):
        env = CartPoleVecEnv(num_envs=n, compile=True)
        env.reset(seed=n)
        obs, *_ = env.step(torch.zeros(n, dtype=torch.long))
        assert obs.shape == (n, 4)


def test_each_env_class_size_dtype_and_time_limit_gets_its_own_torch_compile_entry():
    pytest.importorskip("torch._inductor")

    class Other(CartPoleVecEnv):
        pass

    def step_fn(cls=CartPoleVecEnv, **kwargs):
        return cls(compile=True, **{"num_envs": 3, **kwargs})._advance.func  # compiled on its first call: not yet

    first = step_fn()
    assert step_fn() is first  # the same combination shares one
    others = [step_fn(Other), step_fn(num_envs=4), step_fn(dtype=torch.float64), step_fn(max_episode_steps=7)]
    assert len({id(f) for f in [first, *others]}) == 5


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


# ----------------------------------------------------------------- the base class's own promises
class _Walk(TensorVecEnv):
    """Sub-env ``i`` walks by its action from a uniform start in [0, 1); it terminates once it has walked at
    least ``goal[i]`` (reward: the step taken). ``info["position"]`` is the position after the step."""

    def __init__(self, goal, action_dim: int = 1, **kwargs) -> None:
        box = gym.spaces.Box(-np.inf, np.inf, (action_dim,), np.float32)
        super().__init__(len(goal), gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), box, **kwargs)
        self.goal = torch.tensor(goal, dtype=self.dtype)
        self.seen: list[torch.Tensor] = []

    def _initial_state(self, k):
        return (torch.cat([self._uniform((1, k), 0.0, 1.0), torch.zeros(1, k, dtype=self.dtype)]),)

    def _dynamics(self, state, actions):
        self.seen.append(actions)
        (s,) = state
        step = actions.sum(1)
        walked = s[1] + step
        return (torch.stack([s[0] + step, walked]),), step, walked >= self.goal

    def _observe(self, state):
        return state[0].T

    def _step_info(self, state):
        return {"position": state[0][0]}


def test_a_device_is_resolved_or_refused_with_the_reason():
    from podium.envs.base import resolve_device

    assert resolve_device(None) == resolve_device("cpu") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match=r"unknown device 'gpu': use 'cpu', 'cuda', 'cuda:N' or 'mps'"):
        resolve_device("gpu")
    with pytest.raises(ValueError, match=r"unsupported device 'meta': use 'cpu', 'cuda', 'cuda:N' or 'mps'"):
        resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"'cuda' requested but CUDA is not available here; use device='cpu'"):
            resolve_device("cuda")
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match=r"device 'mps' requested but MPS is not available here; use device='cpu'"):
            resolve_device("mps")


def test_the_constructor_checks_its_arguments_and_describes_the_env():
    env = _Walk([1.0, 2.0, 3.0])
    assert repr(env) == "_Walk(num_envs=3, device=cpu)" and env.num_envs == 3
    assert _Walk(np.ones(np.int64(2)).tolist()).num_envs == 2
    assert type(CartPoleVecEnv(num_envs=np.int64(2)).num_envs) is int
    assert env.observation_space.shape == (3, 2) and env.action_space.shape == (3, 1) and not env.discrete
    assert env.max_episode_steps is None and env.validate_actions and env.dtype == torch.float32
    with pytest.raises(ValueError, match=r"dtype must be torch.float32 or torch.float64, got torch.float16"):
        _Walk([1.0], dtype=torch.float16)
    for limit in (0, -1):
        with pytest.raises(ValueError, match=f"max_episode_steps must be positive or None, got {limit}"):
            _Walk([1.0], max_episode_steps=limit)
    assert _Walk([1.0], max_episode_steps=1).max_episode_steps == 1
    with pytest.raises(ValueError, match=r"num_envs must be a positive integer, got 0"):
        _Walk([])


def test_a_target_above_the_best_possible_return_is_explained():
    class Bounded(_Walk):
        best = 0.0

        @property
        def max_return(self):
            return self.best

    env = Bounded([1.0])
    assert env.unreachable(0.0) is None and env.unreachable(-5.0) is None
    assert env.unreachable(200.0, "Bounded-v0") == (
        "target 200 can never be reached on Bounded-v0: the best possible episode return is 0; "
        "rewards here are <= 0 — did you mean -200?"
    )
    env.best = 100.0
    assert env.unreachable(100.0) is None
    assert env.unreachable(150.0) == (
        "target 150 can never be reached on this env: the best possible episode return is 100"
    )
    env.best = -1.0
    assert env.unreachable(-0.5).endswith("is -1")  # no hint: the target is not positive
    assert env.unreachable(0.0).endswith("is -1")  # (nor at 0)
    env.best = 0.5
    assert env.unreachable(1.0).endswith("is 0.5")  # no hint: some rewards are positive
    assert env.unreachable(2.0).endswith("is 0.5")  # (whatever the target)
    assert _Walk([1.0]).unreachable(1e9) is None  # no known bound


def test_seeds_given_as_a_list_the_make_seed_and_unseeded_resets():
    def start(**kwargs):
        env = _Walk([1.0] * 4)
        env.default_seed = kwargs.pop("default", None)
        obs, _ = env.reset(**kwargs)
        return env, obs

    _, seeded = start(seed=5)
    assert torch.equal(start(seed=[5, 6, 7, 8])[1], seeded) and torch.equal(start(seed=(5,))[1], seeded)
    assert torch.equal(start(default=5)[1], seeded)  # the first reset without a seed uses the make seed
    env, _ = start(default=5, seed=7)
    assert not torch.equal(env.reset()[0], seeded)  # ... and only a first one
    unseeded = [start(seed=s)[1] for s in (None, [], [None])]
    assert all(not torch.equal(u, seeded) for u in unseeded)
    assert not torch.equal(unseeded[0], unseeded[1])  # fresh entropy each time
    env, _ = start(seed=5)
    again, _ = start(seed=5)
    assert np.array_equal(env.action_space.sample(), again.action_space.sample())  # the action space too
    env.reset()  # an unseeded reset continues the generator rather than reseeding it
    assert not torch.equal(env.reset()[0], seeded)


def test_box_actions_are_checked_converted_and_moved_to_the_env():
    env = _Walk([10.0, 10.0], dtype=torch.float64)
    env.reset(seed=0)
    env.step(np.array([0.5, 0.25]))  # one number per sub-env for a one-number action
    assert env.seen[-1].dtype == torch.float64 and env.seen[-1].tolist() == [[0.5], [0.25]]
    env.step(torch.tensor([[1], [2]]))
    assert env.seen[-1].dtype == torch.float64 and env.seen[-1].tolist() == [[1.0], [2.0]]
    with pytest.raises(ValueError, match=r"_Walk: Box actions must be real numbers, got dtype torch.bool"):
        env.step(torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"Box actions must be real numbers, got dtype torch.complex64"):
        env.step(torch.ones(2, 1, dtype=torch.complex64))
    with pytest.raises(ValueError, match=r"shape \(2, 1\) \(num_envs, \*action_shape\), got \(3,\)"):
        env.step(torch.zeros(3))
    with pytest.raises(ValueError, match=r"actions contain NaN or inf \(sub-envs \[1\]\); refusing to step"):
        env.step(torch.tensor([[0.0], [float("inf")]]))
    wide = _Walk([10.0, 10.0, 10.0], action_dim=2)
    wide.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected actions of shape \(3, 2\)"):
        wide.step(torch.zeros(3))  # one number per sub-env is not enough for two
    with pytest.raises(ValueError, match=r"\(sub-envs \[0, 2\]\)"):
        wide.step(torch.tensor([[float("nan"), 0.0], [0.0, 0.0], [0.0, -float("inf")]]))
    many = _Walk([10.0] * 7)
    many.reset(seed=0)
    with pytest.raises(ValueError, match=r"\(sub-envs \[0, 1, 2, 3, 4\]\); refusing"):  # the first five
        many.step(torch.full((7, 1), float("nan")))
    trusting = _Walk([10.0], validate_actions=False)
    trusting.reset(seed=0)
    trusting.step(torch.tensor([[float("nan")]]))  # not checked: actions valid by construction
    assert trusting.seen[-1].isnan().all()


def test_discrete_actions_may_come_as_a_column_and_the_range_check_can_be_turned_off():
    env = CartPoleVecEnv(num_envs=3)
    env.reset(seed=0)
    env.step(torch.tensor([[0], [1], [1]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"CartPoleVecEnv has Discrete\(2\) actions: expected an integer tensor of "):
        env.step(torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"expected actions of shape \(3,\) for 3 sub-envs, got \(3, 2\)"):
        env.step(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"discrete actions must be in \[0, 1\], got values in \[0, 2\]"):
        env.step(torch.tensor([0, 2, 1]))
    trusting = CartPoleVecEnv(num_envs=3, validate_actions=False)
    trusting.reset(seed=0)
    trusting.step(torch.tensor([0, 1, 1]))


class _CpuPosingAsAccelerator(str):
    """A device that torch reads as ``"cpu"`` but whose ``type`` is not: set as ``env.device`` after construction,
    it makes a TensorVecEnv take its accelerator auto-reset (branch-free, ``torch.where``) on the CPU, so that a
    CPU-only run checks that path too."""

    type = "cuda"


@pytest.mark.parametrize("auto_reset", ["index", "branch-free"])
def test_episodes_that_end_at_different_steps_report_their_own_statistics_and_restart(auto_reset):
    """Goals 1, 3 and 100 at one unit a step, time limit 4: sub-env 0 terminates every step, sub-env 1 at
    step 3, sub-env 2 is truncated at step 4. Both auto-resets: the CPU's and the accelerators'."""
    env = _Walk([1.0, 3.0, 100.0], max_episode_steps=4)
    if auto_reset == "branch-free":
        env.device = _CpuPosingAsAccelerator("cpu")
    obs, _ = env.reset(seed=1)
    ones = torch.ones(3, 1)
    for t in range(1, 5):
        previous = obs
        obs, reward, terminated, truncated, info = env.step(ones)
        assert torch.equal(reward, torch.ones(3)) and reward.dtype == torch.float32
        assert torch.equal(info["final_obs"][:, 0], previous[:, 0] + 1)  # the step, before any reset
        assert torch.equal(info["position"], previous[:, 0] + 1)
        assert info["_position"].dtype == torch.bool and info["_position"].all()
        ended = terminated | truncated
        assert torch.equal(info["_final_obs"], ended) and torch.equal(info["_episode_return"], ended)
        assert torch.equal(info["_episode_length"], ended)
        fresh = obs[ended]  # a new episode in the same step: a start in [0, 1), nothing walked
        assert (fresh[:, 1] == 0).all() and ((fresh[:, 0] >= 0) & (fresh[:, 0] < 1)).all()
        assert torch.equal(obs[~ended], info["final_obs"][~ended])
        assert terminated[0] and info["episode_return"][0] == 1.0 and info["episode_length"][0] == 1
        assert terminated[1] == (t == 3) and not truncated[:2].any()
        assert truncated[2] == (t == 4) and not terminated[2]
        if t == 3:
            assert info["episode_return"][1] == 3.0 and info["episode_length"][1] == 3
    assert info["episode_length"].tolist() == [1, 1, 4] and info["episode_return"].tolist() == [1.0, 1.0, 4.0]
    assert env.episode_length.tolist() == [0, 1, 0] and env.episode_return.tolist() == [0.0, 1.0, 0.0]
    env.step(ones)
    assert env.episode_length.tolist() == [0, 2, 1] and env.episode_return.tolist() == [0.0, 2.0, 1.0]
    env.reset(seed=1)  # a reset starts every statistic again
    assert env.episode_length.tolist() == [0, 0, 0] and env.episode_return.tolist() == [0.0, 0.0, 0.0]


def test_the_cpu_auto_reset_draws_starts_only_for_the_sub_envs_that_end_and_the_accelerator_one_for_all():
    env = _Walk([100.0, 2.0, 100.0, 2.0])
    env.reset(seed=0)
    before = env.generator.get_state()
    env.step(torch.ones(4, 1))
    assert torch.equal(env.generator.get_state(), before)  # no episode ended: nothing drawn
    expected = torch.empty(1, 2).uniform_(0.0, 1.0, generator=torch.Generator().set_state(before))
    obs, _, terminated, _, _ = env.step(torch.ones(4, 1))
    assert terminated.tolist() == [False, True, False, True]
    assert obs[[1, 3], 0].tolist() == expected[0].tolist()  # two starts, in sub-env order
    env.device = _CpuPosingAsAccelerator("cpu")  # the branch-free auto-reset draws a start for every sub-env
    before = env.generator.get_state()
    _, _, terminated, _, _ = env.step(torch.ones(4, 1))
    assert not terminated.any() and not torch.equal(env.generator.get_state(), before)


def test_returns_and_statistics_stay_float32_under_a_float64_default_dtype():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        env = _Walk([1.0, 5.0])
        env.reset(seed=0)
        obs, reward, _, _, info = env.step(torch.ones(2, 1))
    finally:
        torch.set_default_dtype(default)
    assert obs.dtype == reward.dtype == info["episode_return"].dtype == env.episode_return.dtype == torch.float32
    assert info["episode_return"].tolist() == [1.0, 1.0] and info["_episode_return"].tolist() == [True, False]


def test_an_env_built_without_make_draws_a_fresh_seed_on_its_first_unseeded_reset_only():
    built = [_Walk([1.0]) for _ in range(8)]
    for env in built:
        assert env.default_seed is None
        env.reset()
    seeds = [env.generator.initial_seed() for env in built]
    assert len(set(seeds)) == 8 and max(seeds) >= 2**32  # from the full 63 bits of fresh entropy
    built[0].reset()
    assert built[0].generator.initial_seed() == seeds[0]  # later unseeded resets continue the generator


def test_a_cuda_device_gets_an_index_that_exists_and_mps_is_taken_where_available(monkeypatch):
    from podium.envs.base import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)  # no index: the current device
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"^device 'cuda:2' does not exist: this machine has 2 CUDA device\(s\)$"):
        resolve_device("cuda:2")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("mps") == torch.device("mps")


def test_a_step_that_terminates_at_the_time_limit_is_a_termination():
    env = _Walk([2.0, 5.0], max_episode_steps=2)
    env.reset(seed=0)
    env.step(torch.ones(2, 1))
    _, _, terminated, truncated, info = env.step(torch.ones(2, 1))
    assert terminated.tolist() == [True, False] and truncated.tolist() == [False, True]
    assert info["_episode_length"].tolist() == [True, True] and info["episode_length"].tolist() == [2, 2]
    unlimited = _Walk([10.0])
    unlimited.reset(seed=0)
    for _ in range(20):
        _, _, terminated, truncated, _ = unlimited.step(torch.zeros(1, 1))
    assert not terminated.any() and not truncated.any() and unlimited.episode_length.item() == 20


def test_set_state_needs_a_one_part_state_after_reset():
    env = _Walk([1.0, 1.0])
    with pytest.raises(ValueError, match=r"_Walk has a 0-part state \(or reset\(\) was not called\)"):
        env.set_state(torch.zeros(2, 2))
    env.reset(seed=0)
    env.set_state(torch.tensor([[3.0, 0.0], [4.0, 0.5]], dtype=torch.float64))
    assert env.state[0].dtype == torch.float32 and env.state[0].tolist() == [[3.0, 4.0], [0.0, 0.5]]
    with pytest.raises(ValueError, match=r"_Walk.set_state expects shape \(2, 2\), got \(2, 3\)"):
        env.set_state(torch.zeros(2, 3))


def test_observations_are_the_callers_and_actions_bring_no_autograd_graph():
    """Observations were views of CartPole's and MountainCar's state (an in-place change of one changed the
    physics), and actions straight from a network pulled its autograd graph into the env's state."""
    for env_id, n_actions in (("CartPole-v1", 2), ("MountainCar-v0", 3), ("MountainCarContinuous-v0", None)):
        env = envs.make(env_id, num_envs=4)
        obs, _ = env.reset(seed=0)
        before = env._observe(env.state).clone()
        obs.zero_()
        assert torch.equal(env._observe(env.state), before), env_id
        net = torch.nn.Linear(obs.shape[1], n_actions or 1)
        out = net(env._observe(env.state))
        actions = out.argmax(-1) if n_actions else out.tanh()
        obs, reward, *_ = env.step(actions)
        assert not obs.requires_grad and not reward.requires_grad and not env.episode_return.requires_grad, env_id
        assert all(not t.requires_grad for t in env.state), env_id


def test_a_list_of_seeds_is_one_per_sub_env_as_in_gymnasium():
    """A list used to be read for its first entry alone: [0, 5, 9] gave [0, 1, 2]'s batch, and a list of
    the wrong length was taken."""
    env = envs.make("CartPole-v1", num_envs=3)
    consecutive, as_int = env.reset(seed=[4, 5, 6])[0], env.reset(seed=4)[0]
    assert torch.equal(consecutive, as_int)  # gymnasium makes [s, s+1, ...] of an int seed s
    other, again = env.reset(seed=[4, 9, 2])[0], env.reset(seed=[4, 9, 2])[0]
    assert not torch.equal(other, as_int) and torch.equal(other, again)
    with pytest.raises(ValueError, match="a list of 2 for 3 sub-envs"):
        env.reset(seed=[4, 5])
