"""GymVecEnv: any gymnasium env (Box/Discrete actions; Box or Discrete observations) as a podium VecEnv."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium
import podium.envs as envs
from podium.envs import GymVecEnv, gym_adapter
from podium.envs.gym_adapter import choose_vectorization
from podium.machine import local_cpus


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


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_adapter_matches_gymnasium_over_many_episodes_that_end_at_different_steps(vectorization):
    """Copy i is gymnasium's own env seeded with seed + i, stepped by hand and reset (unseeded) when its
    episode ends: final_obs, the next episode's first obs and the episode statistics all agree."""
    n, seed, limit = 3, 11, 25
    actions = np.random.default_rng(0).integers(0, 2, size=(150, n))
    env = GymVecEnv("CartPole-v1", num_envs=n, vectorization=vectorization, max_episode_steps=limit)
    refs = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)]
    try:
        obs, _ = env.reset(seed=seed)
        expected = np.stack([ref.reset(seed=seed + i)[0] for i, ref in enumerate(refs)]).astype(np.float32)
        np.testing.assert_array_equal(obs.numpy(), expected)
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        ends = {"terminated": np.zeros(n, dtype=int), "truncated": np.zeros(n, dtype=int)}
        end_steps: list[set[int]] = [set() for _ in range(n)]
        for t, action in enumerate(actions):
            obs, reward, terminated, truncated, info = env.step(torch.as_tensor(action))
            for i, ref in enumerate(refs):
                ref_obs, ref_r, ref_term, ref_trunc, _ = ref.step(int(action[i]))
                returns[i] += ref_r
                lengths[i] += 1
                done = ref_term or ref_trunc
                where = f"copy {i}, step {t}"
                assert float(reward[i]) == ref_r, where
                assert bool(terminated[i]) == ref_term, where
                assert bool(truncated[i]) == (ref_trunc and not ref_term), where  # termination wins
                for key in ("_final_obs", "_episode_return", "_episode_length"):
                    assert bool(info[key][i]) == done, f"{key}, {where}"
                np.testing.assert_array_equal(info["final_obs"][i].numpy(), ref_obs.astype(np.float32), where)
                if done:
                    assert float(info["episode_return"][i]) == returns[i], where
                    assert int(info["episode_length"][i]) == lengths[i], where
                    ends["terminated" if ref_term else "truncated"][i] += 1
                    end_steps[i].add(t)
                    returns[i], lengths[i] = 0.0, 0
                    ref_obs, _ = ref.reset()  # same-step auto-reset: obs is the next episode's first one
                np.testing.assert_array_equal(obs[i].numpy(), ref_obs.astype(np.float32), where)
    finally:
        env.close()
    # the comparison covered what it claims: several terminated and truncated episodes per copy, not in step
    assert (ends["terminated"] >= 2).all() and ends["truncated"].sum() >= 2
    assert len({frozenset(s) for s in end_steps}) == n


def _rollout(env: GymVecEnv, actions: np.ndarray, seed: int) -> list[tuple]:
    """Every tensor the adapter returns (and the episode statistics in ``info``), step by step."""
    out = [tuple(env.reset(seed=seed)[:1])]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(torch.as_tensor(a))
        stats = [info[k] for k in ("final_obs", "_final_obs", "episode_return", "_episode_return")]
        out.append((obs, reward, terminated, truncated, *stats, info["episode_length"], info["_episode_length"]))
    return out


def test_ctrl_c_does_not_end_the_async_env_subprocesses():
    """Ctrl-C reaches the whole process group; gymnasium's env subprocesses ended on it, so the pod's next step
    raised ``BrokenPipeError`` before it could stop and save as a signal asks it to."""
    env = GymVecEnv("Pendulum-v1", num_envs=2, vectorization="async")
    try:
        env.reset(seed=0)
        for process in env.vector_env.processes:
            os.kill(process.pid, signal.SIGINT)
        time.sleep(0.5)
        _, reward, *_ = env.step(torch.zeros(2, 1))
        assert reward.shape == (2,) and all(p.is_alive() for p in env.vector_env.processes)
        assert all(os.getpgid(p.pid) != os.getpgid(0) for p in env.vector_env.processes)  # nor a group's SIGTERM
    finally:
        env.close()


def test_a_program_that_never_closes_its_async_env_still_exits():
    """The subprocesses once ignored SIGTERM too: multiprocessing stops them with it at exit, then waits for
    them, so a program that never closed its env hung at exit for ever."""
    script = (
        "from podium.envs import GymVecEnv; env = GymVecEnv('CartPole-v1', num_envs=2, vectorization='async'); "
        "env.reset(seed=0); print('ready', flush=True)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ready" in done.stdout, done.stderr[-2000:]


def test_async_vectorization_gives_the_same_tensors_as_sync():
    """Subprocess copies see the same seeds and actions as in-process ones: identical results, resets included."""
    actions = np.random.default_rng(1).integers(0, 2, size=(120, 3))
    sync = GymVecEnv("CartPole-v1", num_envs=3, vectorization="sync", max_episode_steps=25)
    env = GymVecEnv("CartPole-v1", num_envs=3, vectorization="async", max_episode_steps=25)
    try:
        assert env.vectorization == "async"
        got, want = _rollout(env, actions, seed=5), _rollout(sync, actions, seed=5)
    finally:
        env.close()
        sync.close()
    assert sum(int(step[2].sum() + step[3].sum()) for step in want[1:]) >= 10  # several episodes per copy
    for t, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y), f"step {t}"


class _Steps(gym.Env):
    """Episodes of a random length (3 to 30 steps, from the env's seed); counts every step it takes."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float64)
    action_space = gym.spaces.Discrete(2)
    taken = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(3, 31))
        return np.array([0.0, self.length]), {}

    def step(self, action):
        _Steps.taken += 1
        self.t += 1
        return np.array([self.t, self.length]), float(action) + 1.0, self.t >= self.length, False, {}


def test_step_active_steps_only_the_active_copies_exactly_as_step_would():
    """Active copies match a full step's results to the bit (resets included); the others do not move,
    and pick up where they stopped once active again."""
    n, seed = 4, 3
    actions = np.random.default_rng(2).integers(0, 2, size=(80, n))
    masks = np.random.default_rng(3).random((80, n)) < 0.6
    env = GymVecEnv(_Steps, num_envs=n, vectorization="sync")
    refs = [GymVecEnv(_Steps, num_envs=1, vectorization="sync") for _ in range(n)]
    try:
        obs, _ = env.reset(seed=seed)
        for i, ref in enumerate(refs):
            assert torch.equal(ref.reset(seed=seed + i)[0][0], obs[i])
        ends = 0
        for t, (action, mask) in enumerate(zip(actions, masks, strict=True)):
            before = _Steps.taken
            obs, reward, terminated, truncated, info = env.step_active(torch.as_tensor(action), torch.as_tensor(mask))
            assert _Steps.taken - before == mask.sum(), f"step {t}: only the active copies step"
            for i in np.flatnonzero(mask):
                r_obs, r_reward, r_term, r_trunc, r_info = refs[i].step(torch.as_tensor(action[i : i + 1]))
                where = f"copy {i}, step {t}"
                assert torch.equal(obs[i], r_obs[0]) and float(reward[i]) == float(r_reward[0]), where
                assert bool(terminated[i]) == bool(r_term[0]) and bool(truncated[i]) == bool(r_trunc[0]), where
                for key in ("final_obs", "_final_obs", "episode_return", "_episode_return", "episode_length"):
                    assert torch.equal(info[key][i], r_info[key][0]), f"{key}, {where}"
                ends += int(r_term[0])
            for i in np.flatnonzero(~mask):  # left alone: the last observation, no reward, no flags
                assert float(reward[i]) == 0.0 and not bool(terminated[i] | truncated[i] | info["_final_obs"][i])
        assert ends >= 2 * n  # the comparison covered several resets per copy
        with pytest.raises(ValueError, match="one flag per sub-env"):
            env.step_active(torch.zeros(n, dtype=torch.long), torch.ones(n + 1, dtype=torch.bool))
    finally:
        env.close()
        for ref in refs:
            ref.close()


def test_a_list_of_seeds_seeds_each_copy_with_its_own():
    """reset(seed=[5, 9, 2]) seeded the copies with 5, 6 and 7: only the first entry was kept."""
    env = GymVecEnv("CartPole-v1", num_envs=3, vectorization="sync")
    obs, _ = env.reset(seed=[5, 9, 2])
    for i, seed in enumerate([5, 9, 2]):
        expected, _ = gym.make("CartPole-v1").reset(seed=seed)
        np.testing.assert_allclose(obs[i].numpy(), expected, rtol=0, atol=0)
    by_int, _ = env.reset(seed=5)  # an int still seeds copy i with seed + i
    np.testing.assert_allclose(by_int[1].numpy(), gym.make("CartPole-v1").reset(seed=6)[0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="2 seeds for 3 copies"):
        env.reset(seed=[1, 2])
    env.close()


def test_a_numpy_integer_seed_works_as_with_a_native_env():
    """reset(seed=np.int64(3)) reached gymnasium's vector env as a numpy integer, which it refuses (len() of
    it); the native env took it."""
    env = GymVecEnv("CartPole-v1", num_envs=2, vectorization="sync")
    obs, _ = env.reset(seed=np.int64(3))
    np.testing.assert_allclose(obs[1].numpy(), gym.make("CartPole-v1").reset(seed=4)[0], rtol=0, atol=0)
    env.close()


def test_a_partial_reset_keeps_the_running_copies_episode_statistics():
    """reset(options={"reset_mask": ...}) resets only some copies (gymnasium 1.x); the adapter zeroed every
    copy's return and length, so a copy left running later reported a shorter episode."""
    env = GymVecEnv("CartPole-v1", num_envs=2, vectorization="sync")
    env.reset(seed=0)
    for _ in range(5):
        env.step(torch.tensor([0, 1]))
    env.reset(options={"reset_mask": np.array([True, False])})
    length = 5
    for _ in range(500):
        *_, info = env.step(torch.tensor([0, 0]))
        length += 1
        if info["_final_obs"][1]:
            break
    assert int(info["episode_length"][1]) == length
    env.close()


def test_unsupported_spaces_are_refused_with_a_fix():
    with pytest.raises(ValueError, match="FlattenObservation"):
        envs.make("Blackjack-v1")  # Tuple observations


class _Poisoned(_Unknown):
    """_Unknown whose copy 1 returns a NaN reward (``what="reward"``) or an inf observation on its third step,
    or a NaN last observation where its episode ends (``"final"``)."""

    def __init__(self, what: str = "reward") -> None:
        self.what = what

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if getattr(self, "copy", None) == 1 and self.t == (5 if self.what == "final" else 3):
            if self.what == "reward":
                reward = float("nan")
            else:
                obs = obs.copy()
                obs[2] = float("inf") if self.what == "observation" else float("nan")
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(
    ("what", "named"),
    [
        ("reward", "reward (nan)"),
        ("observation", "observation (inf)"),
        ("final", "last observation of an episode (nan)"),
    ],
)
def test_a_non_finite_reward_or_observation_is_refused_naming_the_copy(what, named):
    """A NaN reward or observation from the user's env is named where it appears, not steps later as a
    diverged loss or a NaN action."""
    made = []

    def factory():  # (the adapter's first call builds its probe of the spaces; copy 0 is the second)
        env = _Poisoned(what)
        env.copy = len(made) - 1
        made.append(env)
        return env

    env = GymVecEnv(factory, num_envs=3, vectorization="sync")
    env.reset(seed=0)
    env.step(torch.zeros(3, 2))
    env.step(torch.zeros(3, 2))
    if what == "final":
        env.step(torch.zeros(3, 2))
        env.step(torch.zeros(3, 2))
    step = 5 if what == "final" else 3
    with pytest.raises(ValueError, match=rf"non-finite {re.escape(named)} in copy 1, {step} steps into its episode"):
        env.step(torch.zeros(3, 2))
    env.close()


def test_bad_actions_through_the_adapter():
    env = envs.make("Pendulum-v1", num_envs=2, native=False)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.tensor([[0.0], [float("nan")]]))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(3, 1))


class _Slow(_Unknown):
    """An env whose step is slow enough that "auto" picks a subprocess per copy."""

    def step(self, action):
        import time

        time.sleep(0.002)
        return super().step(action)


def _vectorization_in_a_daemon(queue) -> None:
    queue.put(GymVecEnv(_Slow, num_envs=2).vectorization)


def test_auto_vectorization_stays_in_process_inside_a_daemonic_process(monkeypatch):
    import multiprocessing

    monkeypatch.delenv("PODIUM_CPUS", raising=False)
    env = GymVecEnv(_Slow, num_envs=2)
    assert env.vectorization == "async"  # in a normal process: subprocesses
    env.close()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    proc = context.Process(target=_vectorization_in_a_daemon, args=(queue,), daemon=True)  # e.g. an evaluator
    proc.start()
    assert queue.get(timeout=60) == "sync"  # a daemonic process may not start subprocesses
    proc.join(30)


def test_auto_vectorization_needs_a_slow_step_and_two_cores():
    assert choose_vectorization(1e-3, num_envs=8, cores=2) == "async"
    assert choose_vectorization(1e-3, num_envs=8, cores=1) == "sync"  # e.g. a tournament pod on one core
    assert choose_vectorization(1e-3, num_envs=1, cores=16) == "sync"
    assert choose_vectorization(5e-5, num_envs=8, cores=16) == "sync"  # a cheap env: in-process


def test_a_pod_held_to_one_core_steps_a_slow_env_in_process(monkeypatch):
    if local_cpus() < 2:
        pytest.skip("needs two cores: with one, every env steps in-process anyway")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # users set this for every process: it says nothing about envs
    env = GymVecEnv(_Slow, num_envs=4)
    assert env.vectorization == "async"
    env.close()
    monkeypatch.setenv("PODIUM_CPUS", "1")  # what the tournament's backends set for a 1-core pod
    env = GymVecEnv(_Slow, num_envs=4)
    assert env.vectorization == "sync"  # four subprocesses would take cores that other pods were given
    env.close()


class _Interrupted(_Unknown):
    """A cheap env whose step now and then takes long, as when other processes hold the core."""

    calls = 0

    def step(self, action):
        import time

        type(self).calls += 1
        if type(self).calls % 4 == 0:
            time.sleep(0.005)
        return super().step(action)


def test_auto_vectorization_judges_the_typical_step_not_the_interrupted_ones(monkeypatch):
    # on a busy machine a cheap env's steps are sometimes held up; an average over them (1.25 ms here) once made
    # "auto" start a subprocess per copy, at random, for LunarLander in a tournament on two cores
    if local_cpus() < 2:
        pytest.skip("needs two cores: with one, every env steps in-process anyway")
    monkeypatch.delenv("PODIUM_CPUS", raising=False)
    # a threshold of 1 ms, far above a cheap step even on a slow VM (where a step of this env through gymnasium's
    # wrappers took about 0.2 ms, the real threshold), and below the mean with a 5 ms pause every fourth step
    monkeypatch.setattr(gym_adapter, "_ASYNC_THRESHOLD_S", 1e-3)
    env = GymVecEnv(_Interrupted, num_envs=4)
    try:
        assert env.vectorization == "sync"
    finally:  # a subprocess left behind would fail every later test that checks for none
        env.close()


class _ImageEnv(gym.Env):
    """An env with image observations, which podium's agents refuse."""

    observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def test_a_refused_env_is_closed_before_the_error_reaches_the_user(tmp_path):
    """The env's subprocesses used to live on while the error was handled, then die at exit with hundreds
    of lines of BrokenPipeError that buried the one line saying what was wrong."""
    gym.register("PodiumTestImage-v0", entry_point=_ImageEnv, max_episode_steps=10)
    try:
        podium.train("PodiumTestImage-v0", "ppo", steps=100, num_envs=2, env_kwargs={"vectorization": "async"},
                     run_dir=tmp_path / "r")  # fmt: skip
    except ValueError as exc:  # while the error is handled (printed), as the command line does
        assert "flat Box observation space" in str(exc)
        assert multiprocessing.active_children() == []
    else:
        pytest.fail("an image env was accepted")
    finally:
        gym.registry.pop("PodiumTestImage-v0", None)


class _Drawn(gym.Env):
    """An env that renders a frame (its step count) in rgb_array mode."""

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012 (gymnasium's own convention)
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode, self.t = render_mode, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def render(self):
        return np.full((4, 4, 3), self.t, np.uint8)


def test_the_adapter_renders_the_copies_frames():
    """It had no render: render_mode read None and render() raised NotImplementedError."""
    env = GymVecEnv(lambda: _Drawn(render_mode="rgb_array"), num_envs=2, vectorization="sync")
    try:
        assert env.render_mode == "rgb_array" and env.metadata["render_modes"] == ["rgb_array"]
        env.reset(seed=0)
        env.step(torch.zeros(2, dtype=torch.int64))
        frames = env.render()
        assert len(frames) == 2 and all(f.shape == (4, 4, 3) and f[0, 0, 0] == 1 for f in frames)
    finally:
        env.close()


def test_a_seed_list_may_leave_copies_unseeded_as_in_gymnasium():
    env = GymVecEnv("CartPole-v1", num_envs=2, vectorization="sync")
    try:
        first, _ = env.reset(seed=[None, 3])  # gymnasium takes it; podium's tensor-env rule once refused it
        again, _ = env.reset(seed=[None, 3])
        assert torch.equal(first[1], again[1])  # the seeded copy repeats
    finally:
        env.close()


def _stuck_step_env():
    class Stuck(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            time.sleep(120)

    return Stuck()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_an_env_subprocess_stuck_in_step_dies_with_its_killed_parent(tmp_path):
    """In a process group of their own, the subprocesses escaped the kill of a stuck pod's group: one stuck
    in ``step`` lived on, orphaned, until its step returned."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time, torch\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_gym_adapter import _stuck_step_env\n"
        "from podium.envs import GymVecEnv\n"
        "env = GymVecEnv(_stuck_step_env, num_envs=2, vectorization='async')\n"
        "env.reset(seed=0)\n"
        "env.vector_env.step_async(torch.zeros(2, dtype=torch.int64).numpy())\n"
        "print(*[p.pid for p in env.vector_env.processes], flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 2
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    alive = [pid for pid in children if _alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has died
    except FileNotFoundError:
        return False


def test_an_env_subprocess_of_a_pods_child_still_ends_on_sigterm():
    """A pod's evaluator process, rollout workers and extra learners ignore SIGTERM (their pod stops them); their
    env subprocesses inherited that, and gymnasium's close(terminate=True) then waited for ever on a stuck one."""
    from podium.pod._child import ignore_stop_signals

    ctx = multiprocessing.get_context("fork")

    def child(queue) -> None:
        ignore_stop_signals()
        env = GymVecEnv("Pendulum-v1", num_envs=2, vectorization="async")
        proc = env.vector_env.processes[0]
        proc.terminate()
        proc.join(5)
        queue.put(proc.is_alive())
        for p in env.vector_env.processes:
            p.kill()

    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    try:
        assert queue.get(timeout=60) is False
    finally:
        process.join(30)
