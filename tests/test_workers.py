"""Pipelined rollout workers (``workers: W``): what the learner receives, the one-phase lag, failures."""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from podium.config import ConfigError, PodSpec
from podium.envs import GymVecEnv
from podium.pod import Pod, build_agent
from podium.pod.pod import _worker_parts
from podium.pod.worker import WORKER_SEED_STRIDE, WorkerError, WorkerGroup

GYM_PENDULUM = {"env": "Pendulum-v1", "native_env": False, "tensorboard": False}


def _learner(spec: PodSpec, num_envs: int):
    env = GymVecEnv(spec.env, num_envs=1)
    return build_agent(spec, env.single_observation_space, env.single_action_space, num_envs, env.device)


def _group(spec: PodSpec, agent, workers: int, seed: int = 0, start_method: str = "fork") -> WorkerGroup:
    build = functools.partial(_worker_parts, spec, agent.config)
    return WorkerGroup(agent, build, workers, seed=seed, start_method=start_method)


def _one_rollout(hparams: dict, num_envs: int, workers: int = 2, seed: int = 5):
    """A TD3 learner on Pendulum and the buffer of one rollout its ``workers`` collected: ``(agent, buffer)``."""
    spec = PodSpec(algo="td3", steps=1000, hparams=hparams, **GYM_PENDULUM)
    agent = _learner(spec, num_envs)
    buffer = agent.make_buffer()
    group = _group(spec, agent, workers, seed=seed)
    try:
        group.collect(buffer)
    finally:
        group.close()
    return agent, buffer


def _descendants(root: int) -> dict[int, int]:
    """Every living process below ``root``: pid -> parent pid (from /proc; zombies excluded)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
            if fields[0] != "Z":
                parents[int(stat.parent.name)] = int(fields[1])
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found[child] = parent
                frontier.append(child)
    return found


@contextlib.contextmanager
def _every_descendant():
    """Inside: note every process below this one (four times a second) that was not there on entry (e.g.
    multiprocessing's resource tracker, once a test has spawned). Yields what it saw, pid -> parent pid; a
    process orphaned while inside is reparented away from us, so only this record tells it exists."""
    seen: dict[int, int] = {}
    done = threading.Event()
    there = set(_descendants(os.getpid()))

    def watch() -> None:
        while not done.wait(0.25):
            seen.update((pid, parent) for pid, parent in _descendants(os.getpid()).items() if pid not in there)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


def _alive(pids: set[int], wait: float = 10.0) -> list[int]:
    """Which of ``pids`` still run (zombies count as gone) after up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        running = []
        for pid in pids:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    running.append(pid)
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.2)


def _podium_children() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name.startswith("podium-worker")]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_the_learner_receives_every_sub_env_in_order_with_the_seeds_of_one_process(start_method):
    """Two workers of 3 sub-envs each fill the learner's 6 columns: copy i starts from the observation seed+i
    gives in one process, each step continues where the last left off (across rollouts too), and the
    learner's step counter saw every step (``explored``). Spawned workers (a GPU pod's: a process that has
    started CUDA must not fork) do the same."""
    spec = PodSpec(algo="td3", steps=1000, hparams={"learning_starts": 10_000, "train_freq": 4}, **GYM_PENDULUM)
    agent = _learner(spec, 6)
    buffer = agent.make_buffer()
    group = _group(spec, agent, 2, seed=5, start_method=start_method)
    try:
        stats = group.collect(buffer)
        assert stats.steps == 4 * 6 and buffer.size == 24
        first, _ = GymVecEnv("Pendulum-v1", num_envs=6).reset(seed=5)
        obs = buffer.obs[:24].reshape(4, 6, -1)  # the ring holds rows in step order, 6 sub-envs per step
        next_obs = buffer.next_obs[:24].reshape(4, 6, -1)
        torch.testing.assert_close(obs[0], first)
        torch.testing.assert_close(obs[1:], next_obs[:-1])  # Pendulum's 200-step episodes do not end here
        torch.testing.assert_close(group.obs, next_obs[-1])
        for rank in range(2):  # warm-up actions from each worker's own generator, seeded as documented
            gen = torch.Generator().manual_seed(5 + WORKER_SEED_STRIDE * (rank + 1))
            expected = torch.stack([torch.rand(3, 1, generator=gen) * 2 - 1 for _ in range(4)])
            torch.testing.assert_close(buffer.actions[:24].reshape(4, 6, 1)[:, 3 * rank : 3 * rank + 3], expected)
        group.collect(buffer)
        torch.testing.assert_close(buffer.obs[24:30], next_obs[-1])
        assert agent.env_steps == 48
    finally:
        group.close()
    assert not _podium_children()


def test_the_warm_up_ends_when_the_pods_sub_envs_together_reach_learning_starts():
    """learning_starts counts all sub-envs together, but a worker counted only its own: with two workers of
    three sub-envs and learning_starts 8, its third step was still random (6 of its own steps counted, where the
    pod had taken 12)."""
    agent, buffer = _one_rollout({"learning_starts": 8, "train_freq": 4, "exploration_noise": 0.0}, num_envs=6)
    obs, actions = buffer.obs[:24].reshape(4, 6, -1), buffer.actions[:24].reshape(4, 6, -1)
    with torch.no_grad():
        policy = agent.actor(obs)
    # A worker's actor runs on its 3 rows, this one on 6: the float results differ by up to ~1e-7, more than
    # allclose's default atol (1e-8) where an action is near 0. A random warm-up action is off by ~0.1 or more.
    for t, random in enumerate([True, True, False, False]):  # the pod's count before step t: 0, 6, 12, 18
        assert torch.allclose(actions[t], policy[t], rtol=0.0, atol=1e-5) != random, t


def test_a_workers_exploration_noise_follows_its_own_generator_and_restarts_when_an_episode_is_cut_off():
    """TD3's OU noise in a rollout worker, replayed by hand from the worker's documented seed: the noise of a
    sub-env restarts from 0 when its episode ends, here by Pendulum's 200-step time limit (truncation)."""
    hp = {"learning_starts": 0, "train_freq": 210, "noise_type": "ou", "exploration_noise": 0.5, "ou_dt": 0.05}
    agent, buffer = _one_rollout(hp, num_envs=2)
    obs, actions = buffer.obs[:420].reshape(210, 2, -1), buffer.actions[:420].reshape(210, 2, -1)
    scale = 0.5 * math.sqrt(0.05)
    for rank in range(2):
        gen = torch.Generator().manual_seed(5 + WORKER_SEED_STRIDE * (rank + 1))
        noise = torch.zeros(1, 1)
        for t in range(210):
            noise = noise * (1 - 0.15 * 0.05) + scale * torch.randn(1, 1, generator=gen)
            with torch.no_grad():
                expected = (agent.actor(obs[t, rank : rank + 1]) + noise).clamp(-1, 1)
            torch.testing.assert_close(actions[t, rank : rank + 1], expected, msg=f"worker {rank}, step {t}")
            if t == 199:  # the 200th step was cut off by the time limit: a new episode, new noise
                noise = torch.zeros(1, 1)


def test_workers_act_with_the_parameters_published_one_learning_phase_earlier():
    """The rollout returned by collect k was collected with the parameters the learner had at collect k-1."""
    hp = {"learning_starts": 0, "exploration_noise": 0.0, "train_freq": 2}
    spec = PodSpec(algo="ddpg", steps=1000, hparams=hp, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    buffer = agent.make_buffer()
    final = agent.actor[-2]  # the last Linear before the Tanh
    group = _group(spec, agent, 2)
    try:
        group.collect(buffer)  # collected with the initial actor; the workers now hold it again
        with torch.no_grad():
            final.weight.zero_()
            final.bias.fill_(0.5)  # the new actor's action is tanh(0.5) everywhere
        group.collect(buffer)  # collected with the initial actor; the workers receive the new one
        group.collect(buffer)  # collected with the new actor
        actions = buffer.actions[: buffer.size].reshape(3, 2, 2, -1)
        new = torch.full_like(actions[2], torch.tanh(torch.tensor(0.5)).item())
        assert not torch.allclose(actions[1], new)
        torch.testing.assert_close(actions[2], new)
    finally:
        group.close()


def test_ppo_normaliser_and_rollout_match_what_one_process_records():
    """PPO's rollout buffer is full after one collect ([T, N] with T the learner's rollout length), and the
    learner's observation statistics counted every observation once."""
    hp = {"rollout_size": 64, "normalize_obs": True}
    spec = PodSpec(algo="ppo", steps=1000, hparams=hp, **GYM_PENDULUM)
    agent = _learner(spec, 4)
    buffer = agent.make_buffer()
    group = _group(spec, agent, 2)
    try:
        stats = group.collect(buffer)
    finally:
        group.close()
    assert stats.steps == 64 and buffer.pos == agent.rollout_steps == buffer.steps == 16
    assert float(agent.obs_rms.count) == pytest.approx(64, abs=1e-6)
    # the stored (normalised) observations are finite and within the normaliser's clip
    assert bool(torch.isfinite(buffer.obs).all()) and float(buffer.obs.abs().max()) <= 10.0


def test_a_worker_that_dies_fails_the_collection_within_seconds():
    spec = PodSpec(algo="td3", steps=1000, hparams={"train_freq": 100_000, "learning_starts": 10**6}, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    group = _group(spec, agent, 2)
    try:
        os.kill(group.processes[1].pid, signal.SIGKILL)
        start = time.perf_counter()
        with pytest.raises(WorkerError, match="rollout worker 1 died"):
            group.collect(agent.make_buffer())
        assert time.perf_counter() - start < 10
    finally:
        group.close()
    assert not _podium_children()


def test_a_worker_that_dies_between_rollouts_is_named():
    """A worker that dies after it finished a rollout (its "ready" is in the pipe) broke the next collection
    with a bare BrokenPipeError, which the pod neither saves on nor names a worker in."""
    spec = PodSpec(algo="td3", steps=1000, hparams={"train_freq": 4, "learning_starts": 10**6}, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    group = _group(spec, agent, 2)
    buffer = agent.make_buffer()
    try:
        group.collect(buffer)
        assert group.conns[1].poll(30)  # worker 1 finished the next rollout
        os.kill(group.processes[1].pid, signal.SIGKILL)
        group.processes[1].join(10)
        with pytest.raises(WorkerError, match=r"rollout worker 1 died .* between rollouts"):
            group.collect(buffer)
    finally:
        group.close()
    assert not _podium_children()


def _failing_parts(spec: PodSpec, config, rank: int, num_envs: int):
    if rank == 1:
        raise RuntimeError("no simulator licence")
    return _worker_parts(spec, config, rank, num_envs)


def test_a_worker_that_fails_reports_why():
    spec = PodSpec(algo="td3", steps=1000, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    group = None
    # said as the group starts (the worker died before it was set collecting) or at the first collect
    with pytest.raises(WorkerError, match="rollout worker 1 failed: RuntimeError: no simulator licence"):
        group = WorkerGroup(agent, functools.partial(_failing_parts, spec, agent.config), 2)
        group.collect(agent.make_buffer())
    if group is not None:
        group.close()


def test_a_pod_with_a_pipelined_worker_learns_pendulum_with_ppo(tmp_path):
    """gymnasium's Pendulum through the adapter, one rollout-worker process: the preset learns as it does
    in one process (random play scores about -1,200)."""
    spec = PodSpec(steps=40_960, algo="ppo", workers=1, seed=0, **GYM_PENDULUM)
    report = Pod(spec, tmp_path, progress=False).run()
    assert report.steps == 40_960 and report.score_mean > -400
    assert not _podium_children()


def test_a_pod_with_workers_stops_cleanly_on_sigint(tmp_path):
    """The worker processes ignore the signal; the pod saves, stops them, and leaves no process behind. (A
    time limit far past the signal: a signal that never arrives fails the test in a minute, not at pytest's
    ten-minute timeout.)"""
    spec = PodSpec(steps=10**7, seconds=60, algo="td3", workers=2, num_envs=2, **GYM_PENDULUM)
    pod = Pod(spec, tmp_path, progress=False)
    timer = threading.Timer(3.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        pod.run()
    assert pod.steps > 0 and (tmp_path / "checkpoints" / "last.pt").is_file()
    assert not _podium_children()


def test_two_learners_each_with_its_own_worker_train_together_and_leave_no_process(tmp_path):
    """``learners: 2, workers: 1``: each learner collects through its own rollout-worker process (the
    extra learner forks its own), both count their steps, and every process is gone afterwards,
    grandchildren too. (That each part learns: the pipelined-worker test above, and tests/test_learners.py.)"""
    spec = PodSpec(steps=16_384, algo="ppo", learners=2, workers=1, seed=0, **GYM_PENDULUM)  # phases of 2 x 2,048
    with _every_descendant() as seen:
        report = Pod(spec, tmp_path, progress=False).run()
    assert report.steps == 16_384  # four phases, both learners counted
    assert any(parent != os.getpid() for parent in seen.values())  # the extra learner's own rollout worker
    assert _alive(set(seen)) == []


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"workers": 2, "num_envs": 3}, "cannot be split evenly over workers: 2"),
    ],
)
def test_bad_worker_settings_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        PodSpec(algo="ppo", steps=100, **GYM_PENDULUM, **fields)


def test_a_preset_num_envs_that_does_not_split_is_refused_before_training(tmp_path):
    spec = PodSpec(algo="ppo", steps=100, workers=3, **GYM_PENDULUM)  # the preset's 64 sub-envs
    with pytest.raises(ConfigError, match=r"64 sub-envs .* cannot be split evenly over workers: 3"):
        Pod(spec, tmp_path)


def test_a_learner_killed_with_its_worker_fails_the_pod_and_leaves_no_process(tmp_path, monkeypatch):
    """Learner 1 (which forked its own rollout worker) is SIGKILLed: the pod fails naming it, and the
    orphaned worker notices that its learner is gone and exits too."""
    import podium.pod.pod as pod_module
    from podium.pod.pod import LearnerError

    original = pod_module.Learner.learn

    def dies(self, buffer, next_obs):
        if multiprocessing.parent_process() is not None and self.updates == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, buffer, next_obs)

    monkeypatch.setattr(pod_module.Learner, "learn", dies)
    spec = PodSpec(seconds=60, algo="ppo", learners=2, workers=1, eval_mode="process", **GYM_PENDULUM)
    with _every_descendant() as seen, pytest.raises(LearnerError, match="learner 1 ended with exit code -9"):
        Pod(spec, tmp_path, progress=False).run()
    assert len(seen) >= 4  # the evaluator, learner 1 and the two rollout workers
    assert _alive(set(seen)) == []


def _parts_with_a_helper(spec: PodSpec, config, pid_file: Path, rank: int, num_envs: int):
    """Worker 1 starts a helper process first, which inherits the worker's end of its pipe (as a simulator's
    helper might) and outlives it: the worker's death then closes no pipe. Steps take 0.3 s."""
    if rank == 1:
        pid = os.fork()
        if pid == 0:
            time.sleep(20)
            os._exit(0)
        pid_file.write_text(str(pid))
    return _slow_parts(spec, config, 0.3, rank, num_envs)  # (so that a rollout is still running when killed)


def _slow_parts(spec: PodSpec, config, seconds: float, rank: int, num_envs: int):
    env, agent = _worker_parts(spec, config, rank, num_envs)
    step = env.step

    def slow(actions):
        time.sleep(seconds)
        return step(actions)

    env.step = slow
    return env, agent


def test_a_group_needs_an_even_split_and_runs_named_daemon_workers_from_seed_0():
    spec = PodSpec(algo="td3", steps=1000, hparams={"learning_starts": 10_000, "train_freq": 2}, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    build = functools.partial(_worker_parts, spec, agent.config)
    for workers in (0, 3):
        with pytest.raises(ValueError, match=f"2 sub-envs cannot be split evenly over {workers} rollout workers; make"):
            WorkerGroup(agent, build, workers)
    group = WorkerGroup(agent, build, 1)  # one worker is a valid split
    try:
        assert [(p.name, p.daemon) for p in _podium_children()] == [("podium-worker-0", True)]
        # the learner's own parameters stay private: the workers read a shared copy
        own = [t for m in agent.modules().values() for t in m.state_dict().values()]
        shared = [t for m in group.params.values() for t in m.values()]
        assert not any(t.is_shared() for t in own) and all(t.is_shared() for t in shared)
        buffer = agent.make_buffer()
        group.collect(buffer)
        first, _ = GymVecEnv("Pendulum-v1", num_envs=2).reset(seed=0)
        torch.testing.assert_close(buffer.obs[:2], first)
    finally:
        group.close()
    assert not _podium_children()


def test_the_collected_statistics_are_the_episodes_that_ended_in_the_rollout():
    spec = PodSpec(
        algo="ppo", steps=1000, env="CartPole-v1", native_env=False, tensorboard=False, hparams={"rollout_size": 128}
    )
    agent = _learner(spec, 2)
    group = _group(spec, agent, 2)
    try:
        stats = group.collect(agent.make_buffer())  # (the workers may already be writing the next rollout)
    finally:
        group.close()
    assert stats.steps == 128 and 0 < len(stats.episode_lengths) <= 128 // 8  # an episode lasts 8+ steps
    assert all(isinstance(n, int) and 8 <= n <= 64 for n in stats.episode_lengths)
    assert stats.episode_returns == [float(n) for n in stats.episode_lengths]  # CartPole: 1 per step


def test_a_rollout_slower_than_the_death_check_is_waited_for():
    spec = PodSpec(algo="td3", steps=1000, hparams={"learning_starts": 10_000, "train_freq": 4}, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    group = WorkerGroup(agent, functools.partial(_slow_parts, spec, agent.config, 0.35), 2)
    try:
        start = time.perf_counter()
        stats = group.collect(agent.make_buffer())  # 4 steps of 0.35 s: the workers are alive, only slow
        assert time.perf_counter() - start > 1.0 and stats.steps == 8
    finally:
        group.close()


def test_a_worker_that_dies_while_a_process_it_started_holds_its_pipe_is_noticed_within_seconds(tmp_path):
    spec = PodSpec(algo="td3", steps=1000, hparams={"learning_starts": 10**6, "train_freq": 2}, **GYM_PENDULUM)
    agent = _learner(spec, 2)
    pid_file = tmp_path / "helper.pid"
    group = WorkerGroup(agent, functools.partial(_parts_with_a_helper, spec, agent.config, pid_file), 2)
    try:
        buffer = agent.make_buffer()
        group.collect(buffer)  # both workers are built (the helper runs)
        os.kill(group.processes[1].pid, signal.SIGKILL)
        start = time.perf_counter()
        with pytest.raises(WorkerError, match=r"rollout worker 1 died \(exit code -9\) before finishing its rollout"):
            group.collect(buffer)
        assert time.perf_counter() - start < 5  # the pipe stays open: the worker's death itself is noticed
    finally:
        group.close()
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert not _podium_children()


def test_the_in_process_worker_records_every_step_and_reports_the_episodes_that_ended():
    from podium.envs import make
    from podium.pod.worker import Transition, Worker

    spec = PodSpec(algo="dqn", env="CartPole-v1", steps=1000, tensorboard=False, hparams={"learning_starts": 100_000})
    env = make("CartPole-v1", num_envs=3)
    agent = build_agent(spec, env.single_observation_space, env.single_action_space, 3, env.device)
    with pytest.raises(ValueError, match="env has 3 sub-envs but the agent was built for 4"):
        Worker(env, build_agent(spec, env.single_observation_space, env.single_action_space, 4, env.device))
    worker = Worker(env, agent, seed=4)
    torch.testing.assert_close(worker.obs, make("CartPole-v1", num_envs=3).reset(seed=4)[0])
    buffer = agent.make_buffer()
    stats = worker.collect(buffer, steps=60)
    assert stats.steps == 180 and buffer.size == 180
    obs, next_obs = buffer.obs[:180].reshape(60, 3, -1), buffer.next_obs[:180].reshape(60, 3, -1)
    ended = buffer.terminated[:180].reshape(60, 3).bool()  # (no CartPole episode reaches its time limit here)
    assert torch.equal(obs[1:][~ended[:-1]], next_obs[:-1][~ended[:-1]])  # each step goes on from the last
    assert len(stats.episode_lengths) == int(ended.sum())
    # the episodes that ended, in step order: CartPole pays 1 a step, so each return is its length
    assert len(stats.episode_lengths) > 0 and stats.episode_returns == [float(n) for n in stats.episode_lengths]
    assert sum(stats.episode_lengths) <= 180 and all(isinstance(n, int) for n in stats.episode_lengths)
    step = worker.step()
    assert isinstance(step, Transition) and torch.equal(step.next_obs, worker.obs)
    assert torch.equal(step.finished, step.terminated | step.truncated)
    again = Transition.from_tensors(step.tensors())
    assert all(torch.equal(getattr(again, k), v) for k, v in vars(step).items() if k != "extras")
    assert again.extras.keys() == step.extras.keys()
    assert Worker(env, agent).collect(agent.make_buffer()).steps == agent.rollout_steps * 3  # the agent's length


def test_a_worker_that_cannot_start_says_why_and_leaves_no_checkpoint(tmp_path, monkeypatch):
    """A rollout worker whose env failed to build: the pod said "rollout worker 0 died (exit code 1) between
    rollouts" (the reason was left unread in the pipe) and saved a 0-step checkpoint, which was offered for a
    resume that would keep the faulty spec."""
    import podium.pod.pod as pod_module

    def broken(spec, config, rank, num_envs):
        raise RuntimeError("cannot build the env (simulated)")

    monkeypatch.setattr(pod_module, "_worker_parts", broken)
    spec = PodSpec(
        env="Pendulum-v1", algo="ppo", steps=4096, workers=2, num_envs=8, native_env=False, tensorboard=False,
        eval_mode="inline",
    )  # fmt: skip
    with pytest.raises(WorkerError, match=r"rollout worker \d failed: RuntimeError: cannot build the env"):
        Pod(spec, tmp_path / "run", progress=False).run()
    assert not (tmp_path / "run" / "checkpoints" / "last.pt").exists()
    monkeypatch.undo()
    report = Pod(spec, tmp_path / "run", progress=False, overwrite=True).run()  # started again, fixed
    assert report.steps >= 4096
