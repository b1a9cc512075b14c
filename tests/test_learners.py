"""Learner parallelism: K learner processes fuse networks, normalisers and optimiser moments by averaging
(torch.distributed, gloo on the loopback interface), and a pod with two learners still learns."""

from __future__ import annotations

import csv
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import podium
from podium.algos import get_algo
from podium.algos.normalization import RunningMeanStd
from podium.config import PodSpec
from podium.envs import make
from podium.pod import Pod
from podium.pod.learner import FusionGroup, Learner, average_agents, fusable_tensors, step_counters
from podium.pod.pod import LearnerError, _LearnerGroup
from podium.pod.worker import Worker

FAST = {"tensorboard": False, "eval_episodes": 8}


def _agent(algo: str, seed: int):
    """An agent after two real learning phases (moments, normalisers, counters moved), seeded."""
    torch.manual_seed(seed)
    env = make("Pendulum-v1", num_envs=4)
    cls = get_algo(algo)
    hparams = {"num_steps": 16, "normalize_obs": True, "normalize_reward": True} if algo == "ppo" else {}
    if algo == "sac":
        hparams = {"learning_starts": 16, "batch_size": 16, "gradient_steps": 2}
    agent = cls(env.single_observation_space, env.single_action_space, cls.Config(**hparams), 4, torch.device("cpu"))
    agent.generator.manual_seed(seed)
    worker, buffer = Worker(env, agent, seed=seed), agent.make_buffer()
    for _ in range(2):
        worker.collect(buffer, 16)
        agent.learn(buffer, worker.obs)
    return agent


def _fuse_in_child(algo: str, rank: int, store: str, out: str) -> None:
    torch.set_num_threads(1)  # a forked child must stay out of the parent's OpenMP pool
    agent = _agent(algo, seed=rank)
    group = FusionGroup(store, rank, 2)
    asked = group.fuse(agent, stop=rank == 1)
    torch.save({"tensors": fusable_tensors(agent), "steps": step_counters(agent), "asked": asked}, out)
    group.close()
    os._exit(0)


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_after_a_fusion_every_learner_holds_exactly_the_average(tmp_path, algo):
    torch.set_num_threads(1)  # the same arithmetic as in the children
    expected = [_agent(algo, seed=0), _agent(algo, seed=1)]
    before = [t.clone() for t in fusable_tensors(expected[0])]
    average_agents(expected)  # the in-process fusion is the reference
    assert any(not torch.equal(a, b) for a, b in zip(before, fusable_tensors(expected[0]), strict=True))
    context = multiprocessing.get_context("fork")
    outs = [tmp_path / f"rank{r}.pt" for r in (0, 1)]
    procs = [
        context.Process(target=_fuse_in_child, args=(algo, r, str(tmp_path / "store"), str(outs[r]))) for r in (0, 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    reference = fusable_tensors(expected[0])
    for out in outs:
        result = torch.load(out, weights_only=True)
        assert result["asked"]  # learner 1 asked to stop: every learner hears it
        assert len(result["tensors"]) == len(reference)
        for got, want in zip(result["tensors"], reference, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        for got, want in zip(result["steps"], step_counters(expected[0]), strict=True):
            assert torch.equal(got, want)  # learner 0's step counts


def test_fused_normalisers_hold_the_statistics_of_every_learners_data():
    # two learners share their statistics, then each sees its own data (different means and spreads); after a
    # fusion both must hold the statistics of the shared data and of both learners' data, as one normaliser
    # that saw it all would, and a second fusion (from the first one's base) must stay exact
    torch.manual_seed(0)
    env = make("Pendulum-v1", num_envs=4)
    cls = get_algo("ppo")
    agents = [
        cls(env.single_observation_space, env.single_action_space, cls.Config(), 4, torch.device("cpu"))
        for _ in range(2)
    ]
    reference = RunningMeanStd((3,))
    shared = torch.randn(500, 3, dtype=torch.float64)
    for norm in [reference, *(a.obs_rms for a in agents)]:
        norm.update(shared)
    agents[1].load_state_dict(agents[0].state_dict())  # a learner starts from learner 0's state
    for agent in agents:
        Learner(agent)  # as a pod's learners start
    for rounds in range(2):
        chunks = [torch.randn(300 + 200 * k, 3, dtype=torch.float64) * (1 + 2 * k) + 3 * k - rounds for k in (0, 1)]
        for agent, chunk in zip(agents, chunks, strict=True):
            agent.obs_rms.update(chunk[:100])
            agent.obs_rms.update(chunk[100:])
            reference.update(chunk)
        average_agents(agents)
        for agent in agents:
            for name in ("count", "mean", "var"):
                torch.testing.assert_close(getattr(agent.obs_rms, name), getattr(reference, name), rtol=1e-12, atol=0)


def test_fusion_covers_moments_and_normalisers_but_not_step_counts():
    agent = _agent("ppo", seed=0)
    fused = {t.data_ptr() for t in fusable_tensors(agent)}  # the very storage that fusion overwrites
    assert agent.obs_rms.mean.data_ptr() in fused and agent.obs_rms.count.data_ptr() in fused  # normalisers
    assert agent.log_std.data_ptr() in fused  # the learned exploration level
    state = agent.optimizer.state[agent.actor[0].weight]
    assert state["exp_avg"].data_ptr() in fused and state["exp_avg_sq"].data_ptr() in fused
    assert state["step"].data_ptr() not in fused


@pytest.mark.parametrize(
    ("algo", "steps", "threshold"),
    [("ppo", 61_440, -700.0), ("sac", 16_000, -500.0)],
)
def test_a_pod_with_two_learners_learns_pendulum(tmp_path, algo, steps, threshold):
    # (seeds 0-2 measured: PPO ends at -173..-205 from about -1,200; SAC at -110..-175 from about -1,600)
    report = podium.train(
        "Pendulum-v1", algo, steps=steps, learners=2, run_dir=tmp_path, seed=0, eval_every=steps // 4, **FAST
    )
    assert report.steps >= steps
    first = report.curve[0]["eval_mean"] if len(report.curve) > 1 else -1600.0
    assert report.last_mean > threshold and report.last_mean > first + 200
    assert multiprocessing.active_children() == []  # the extra learner is gone


def test_a_budget_fraction_schedule_ends_on_time_with_two_learners(tmp_path):
    """DQN's epsilon decays over ``exploration_fraction`` of the budget; each learner counts its own env steps,
    so with two learners it used to reach its final value only at the end of the budget, not half-way."""
    hparams = {"exploration_fraction": 0.5, "learning_starts": 500}
    podium.train("CartPole-v1", "dqn", steps=8000, learners=2, run_dir=tmp_path, seed=0, hparams=hparams, **FAST)
    with (tmp_path / "metrics.csv").open() as f:
        eps = [(int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["name"] == "losses/epsilon"]
    final = get_algo("dqn").Config().final_eps
    assert eps and all(value == pytest.approx(final) for step, value in eps if step >= 0.6 * 8000)
    assert any(value > 0.5 for step, value in eps if step <= 0.2 * 8000)  # still exploring early on


def test_extra_learners_start_with_the_replay_buffer_learner_0_resumes_with(tmp_path, monkeypatch):
    """A resumed (or inherited) off-policy pod with two learners gave learner 1 an empty buffer: its counters
    said the warm-up was over, so it took no gradient step until the buffer refilled while every fusion halved
    learner 0's progress."""
    import podium.pod.pod as pod_module

    run_dir, seen = tmp_path / "run", tmp_path / "learner1.txt"
    podium.train("Pendulum-v1", "sac", steps=512, run_dir=run_dir, hparams={"learning_starts": 100}, **FAST)
    original = pod_module._extra_learner

    def extra_learner(rank, spec, config, num_envs, state, replay, *rest):  # runs in learner 1's process
        seen.write_text(str(0 if replay is None else replay["obs"].shape[0]))
        original(rank, spec, config, num_envs, state, replay, *rest)

    monkeypatch.setattr(pod_module, "_extra_learner", extra_learner)
    pod = Pod.resume(run_dir, progress=False, steps=1024, learners=2)
    assert pod._replay is not None and pod._replay["obs"].shape[0] == 512
    assert pod.run().steps == 1024
    assert seen.read_text() == "512"


def test_a_dying_learner_fails_the_pod_cleanly(tmp_path, monkeypatch):
    import podium.pod.pod as pod_module

    original = pod_module.Learner.learn

    def dies(self, buffer, next_obs):
        if multiprocessing.parent_process() is not None and self.updates == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, buffer, next_obs)

    monkeypatch.setattr(pod_module.Learner, "learn", dies)
    spec = PodSpec(env="Pendulum-v1", algo="ppo", seconds=60, learners=2, **FAST)
    with pytest.raises(LearnerError, match="learner 1 ended with exit code -9"):
        Pod(spec, tmp_path, progress=False).run()
    assert multiprocessing.active_children() == []


def test_a_learner_that_raises_says_why(tmp_path, monkeypatch):
    """The pod read the failed learner's message twice; the first read took it, so the pod only ever said
    'learner 1 ended with exit code 1'."""
    import podium.pod.pod as pod_module

    original = pod_module.Learner.learn

    def raises(self, buffer, next_obs):
        if multiprocessing.parent_process() is not None and self.updates == 3:
            raise RuntimeError("the simulated cause")
        return original(self, buffer, next_obs)

    monkeypatch.setattr(pod_module.Learner, "learn", raises)
    spec = PodSpec(env="Pendulum-v1", algo="ppo", seconds=60, learners=2, **FAST)
    with pytest.raises(LearnerError, match=r"learner 1 failed: .*the simulated cause"):
        Pod(spec, tmp_path, progress=False).run()
    assert multiprocessing.active_children() == []


def test_a_learner_that_fails_while_it_is_built_is_named_at_once(tmp_path, monkeypatch, capfd):
    """A learner that raised before it joined the fusion group (a CUDA OOM, a bad env) left learner 0 waiting
    out the 15-minute rendezvous, then failing with "Wait timeout", naming nobody; its traceback was lost."""
    import podium.pod.pod as pod_module

    original = pod_module.make

    def make(*args, **kwargs):
        if multiprocessing.parent_process() is not None:
            raise RuntimeError("no room for the env")
        return original(*args, **kwargs)

    monkeypatch.setattr(pod_module, "make", make)
    spec = PodSpec(env="Pendulum-v1", algo="ppo", seconds=60, learners=2, **FAST)
    start = time.monotonic()
    with pytest.raises(LearnerError, match=r"learner 1 failed: RuntimeError: no room for the env"):
        Pod(spec, tmp_path, progress=False).run()
    assert time.monotonic() - start < 30
    assert "Traceback" in capfd.readouterr().err  # the learner printed where it failed
    assert multiprocessing.active_children() == []


def test_nothing_outlives_a_pod_whose_setup_fails(tmp_path):
    """A mistake found after the extra learners started (here: an evaluation env option that does not exist)
    left them running and torch.distributed's group open, so the next pod with learners in this process
    failed to form its own."""
    import torch.distributed as dist

    bad = {"eval_env_kwargs": {"nope": 1}, "eval_mode": "inline"}  # inline: the evaluation env is built at start
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=4096, learners=2, **bad, **FAST)
    with pytest.raises(ValueError, match="nope"):
        Pod(spec, tmp_path / "bad", progress=False).run()
    assert multiprocessing.active_children() == [] and not dist.is_initialized()
    good = spec.model_copy(update={"eval_env_kwargs": {}})
    assert Pod(good, tmp_path / "good", progress=False).run().steps >= 4096


def test_learners_talk_only_over_the_loopback_interface(tmp_path):
    code = (
        "import podium\n"
        f"podium.train('Pendulum-v1', 'ppo', seconds=3, learners=2, run_dir={str(tmp_path)!r}, tensorboard=False)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        listening = _wait_for_listeners(proc.pid)
    finally:
        proc.wait(60)
    assert listening, "the learners never opened their connections"
    assert all(addr.startswith(("127.", "[::1]", "::1")) for addr in listening), listening


def _wait_for_listeners(pid: int, timeout: float = 30.0) -> list[str]:
    """Local addresses the process ``pid`` and its children listen on (TCP), once there are any."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
        family = {str(pid)} | set(_children(pid))
        addrs = [line.split()[3] for line in out.splitlines() if any(f"pid={p}," in line for p in family)]
        if addrs:
            return addrs
        time.sleep(0.2)
    return []


def _children(pid: int) -> list[str]:
    try:
        return open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return []


def test_children_stuck_together_are_given_one_timeout_not_one_each():
    """With learners: K, a learner 0 that failed waited 5 s for each extra learner stuck in a fusion."""
    from podium.pod._child import reap

    waits = []

    class Stuck:
        def join(self, timeout=None):
            if timeout is not None:
                waits.append(timeout)
                time.sleep(timeout)

        def is_alive(self):
            return True

        def kill(self):
            pass

    reap([Stuck(), Stuck(), Stuck()], [], timeout=0.2)
    assert waits[0] == pytest.approx(0.2, abs=0.01) and waits[1:] == [0.0, 0.0]


def test_learner_0_forks_its_workers_and_evaluator_before_the_fusion_starts_threads(tmp_path, monkeypatch):
    """Joining the fusion group starts gloo's threads; learner 0 then forked its rollout workers and its
    evaluator, copying threads that may hold a lock (the extra learners fork theirs before joining)."""
    import podium.pod.pod as pod_module
    from podium.pod.evaluator import EvaluatorService

    order: list[str] = []
    for owner, name, label in (
        (pod_module, "_make_worker", "worker"),
        (pod_module.FusionGroup, "__init__", "fusion"),
        (EvaluatorService, "__init__", "evaluator"),
    ):
        original = getattr(owner, name)

        def recorded(*args, _original=original, _label=label, **kwargs):
            if multiprocessing.parent_process() is None:  # learner 0, the pod's own process
                order.append(_label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, recorded)
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=2048, learners=2, eval_mode="process", **FAST)
    Pod(spec, tmp_path, progress=False).run()
    assert order[:3] == ["worker", "evaluator", "fusion"], order


def test_a_killed_learner_not_yet_reaped_is_named_not_its_peers_connection_error(tmp_path):
    """A SIGKILLed learner's pipe closes before the kernel reports its exit; on a busy machine learner 0's
    fusion failed first ("connection reset by peer") and the pod's error named no learner."""

    class Dying:  # killed: its pipe is closed, its exit code comes a moment later (once it is reaped)
        exitcode = None

        def join(self, timeout=None):
            self.exitcode = -signal.SIGKILL

    parent, child = multiprocessing.Pipe()
    child.close()
    group = _LearnerGroup([Dying()], [parent], tmp_path, 2)
    assert group.failure() == f"learner 1 ended with exit code {-signal.SIGKILL}"
