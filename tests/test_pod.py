"""The pod: worker -> learner -> evaluator, checkpoints, resume after SIGKILL, logging, bad input."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import podium
from podium.algos import get_algo
from podium.config import ConfigError, PodSpec
from podium.pod import Pod, TrainingDivergedError, average_agents, build_agent
from podium.store import CheckpointError, load_checkpoint, save_checkpoint

FAST = {"tensorboard": False, "eval_episodes": 8}


def _curve(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "curve.csv").open() as f:
        return list(csv.DictReader(f))


def test_ppo_solves_cartpole_and_writes_its_outputs(tmp_path):
    report = podium.train(
        "CartPole-v1", "ppo", target=475, seconds=120, eval_every=2500, run_dir=tmp_path, seed=0, tensorboard=True
    )
    assert report.reached_target and report.score_mean >= 475
    assert report.stop_reason == "target" and report.time_to_target is not None
    for name in ["spec.yaml", "curve.csv", "curve.png", "metrics.csv", "checkpoints/best.pt", "checkpoints/last.pt"]:
        assert (tmp_path / name).is_file(), name
    assert any((tmp_path / "tb").iterdir())
    rows = _curve(tmp_path)
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and float(rows[-1]["eval_mean"]) >= 475
    names = {row[1] for row in csv.reader((tmp_path / "metrics.csv").open())}
    assert {"charts/SPS", "charts/episodic_return", "loss/policy", "loss/value", "eval/mean_return"} <= names
    # the saved policy is as good when loaded again, and works on gymnasium's own env
    policy = podium.load(tmp_path)
    mean, _ = policy.evaluate(episodes=8)
    assert mean >= 475


def test_ppo_continuous_with_normalisation_keeps_the_statistics_of_what_it_saw(tmp_path):
    """The running observation and reward statistics are those of the data training saw; they are saved and
    restored with the checkpoint, and the loaded policy acts exactly as the trained agent."""
    hp = {"normalize_obs": True, "normalize_reward": True, "clip_vloss": True, "anneal_lr": True}
    # short episodes, so that the reward scaler's discounted returns restart several times in the run
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=3000, hparams=hp, env_kwargs={"max_episode_steps": 24}, **FAST)
    pod = Pod(spec, tmp_path)
    agent = pod.agent
    seen_obs, seen_rewards, seen_dones = [], [], []
    explore, record = agent.explore, agent.record

    def spy_explore(obs):
        seen_obs.append(obs.clone())
        return explore(obs)

    def spy_record(buffer, obs, actions, extras, reward, next_obs, terminated, truncated, final_obs):
        seen_rewards.append(reward.clone())
        seen_dones.append(terminated | truncated)
        record(buffer, obs, actions, extras, reward, next_obs, terminated, truncated, final_obs)

    agent.explore, agent.record = spy_explore, spy_record
    report = pod.run()
    assert report.steps >= 3000 and math.isfinite(report.last_mean)
    # observations: mean and (population) variance of every observation the worker explored from
    seen = torch.cat(seen_obs).double()
    assert agent.obs_rms.count.item() == pytest.approx(len(seen))
    torch.testing.assert_close(agent.obs_rms.mean, seen.mean(0), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(agent.obs_rms.var, seen.var(0, unbiased=False), rtol=1e-6, atol=1e-9)
    # rewards: statistics of each sub-env's running discounted return, reset where an episode ended
    gamma, ret, returns = agent.config.gamma, torch.zeros(agent.num_envs, dtype=torch.float64), []
    for reward, done in zip(seen_rewards, seen_dones, strict=True):
        ret = gamma * ret + reward.double()
        returns.append(ret)
        ret = ret.masked_fill(done, 0.0)
    returns = torch.cat(returns)
    assert torch.stack(seen_dones).sum() >= 2 * agent.num_envs
    stats = agent.reward_scaler.stats
    assert stats.count.item() == pytest.approx(len(returns))
    torch.testing.assert_close(stats.mean, returns.mean(), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(stats.var, returns.var(unbiased=False), rtol=1e-6, atol=1e-9)
    # the checkpoint holds the same statistics, and the loaded policy acts as the trained agent
    loaded = podium.load(tmp_path / "checkpoints" / "last.pt").agent
    for name in ("obs_rms", "reward_scaler.stats"):
        got, want = loaded.obs_rms, agent.obs_rms
        if name == "reward_scaler.stats":
            got, want = loaded.reward_scaler.stats, agent.reward_scaler.stats
        for key in ("mean", "var", "count"):  # the count too: training resumes with the statistics' weight
            assert torch.equal(getattr(got, key), getattr(want, key)), f"{name}.{key}"
    obs = torch.randn(64, 3) * 5
    assert torch.equal(loaded.act(obs), agent.act(obs))
    loaded.obs_rms.mean.zero_()
    loaded.obs_rms.var.fill_(1.0)
    assert not torch.equal(loaded.act(obs), agent.act(obs))  # so the statistics matter to those actions


def test_checkpoint_round_trip_gives_identical_actions(tmp_path):
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=1024, **FAST)
    pod = Pod(spec, tmp_path)
    pod.run()
    payload = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    fresh = build_agent(spec, pod.env.single_observation_space, pod.env.single_action_space, 4, torch.device("cpu"))
    fresh.load_state_dict(payload["agent"])
    obs = torch.randn(32, 3)
    assert torch.equal(fresh.act(obs), pod.agent.act(obs))
    for agent in (fresh, pod.agent):  # the stochastic policy too (its learned log_std)
        agent.generator.manual_seed(3)
    assert torch.equal(fresh.act(obs, deterministic=False), pod.agent.act(obs, deterministic=False))
    assert payload["counters"]["steps"] == pod.steps
    policy = podium.load(tmp_path)  # any dtype in, one observation or a batch, numpy or torch
    one = np.array([0.1, -0.2, 0.3])
    expected = policy.act(one.astype(np.float32))
    for given in (one, torch.from_numpy(one), torch.from_numpy(one).float()):
        assert np.allclose(np.asarray(policy.act(given)), expected, atol=1e-6), given
    assert torch.allclose(policy.act(torch.from_numpy(np.stack([one, one])))[1], torch.as_tensor(expected))


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_the_agents_random_stream_is_not_the_envs(tmp_path, algo):
    """The agent's generator and the first training reset's must differ: with one seed for both, an off-policy
    pod's first random actions were a function of its envs' initial states (both draw uniforms)."""
    from podium.pod.worker import Worker

    pod = Pod(PodSpec(env="Pendulum-v1", algo=algo, seed=3, steps=1000, **FAST), tmp_path / "run", progress=False)
    n = pod.env.num_envs
    Worker(pod.env, pod.agent, seed=pod.spec.seed + pod.iterations)  # resets the envs as a run does
    theta = pod.env.state[0][0]  # drawn uniform in [-pi, pi)
    env_uniforms = theta / math.pi
    agent_uniforms = torch.rand(n, generator=pod.agent.generator) * 2 - 1
    assert not torch.allclose(env_uniforms, agent_uniforms, atol=1e-4)
    # and the stream is still the seed's: the same spec gives the same draws
    again = Pod(PodSpec(env="Pendulum-v1", algo=algo, seed=3, steps=1000, **FAST), tmp_path / "again", progress=False)
    first = torch.rand(n, generator=again.agent.generator)
    assert torch.equal(first * 2 - 1, agent_uniforms)


def test_corrupt_and_foreign_checkpoints_are_refused(tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        podium.load(broken)
    with pytest.raises(CheckpointError, match="does not exist"):
        podium.load(tmp_path / "missing.pt")
    podium.train("CartPole-v1", "ppo", steps=512, run_dir=tmp_path / "run", **FAST)
    payload = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    payload["algo"] = "sac"
    save_checkpoint(tmp_path / "foreign.pt", {k: v for k, v in payload.items() if k != "format"})
    with pytest.raises(CheckpointError, match="sac"):
        podium.load(tmp_path / "foreign.pt")
    # a truncated file (a writer killed mid-way without the atomic rename) is refused too
    data = (tmp_path / "run" / "checkpoints" / "last.pt").read_bytes()
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        podium.load(tmp_path / "truncated.pt")
    # bytes flipped inside a weight tensor (a bad disk, a broken copy): torch.load alone reads them as weights
    with zipfile.ZipFile(tmp_path / "run" / "checkpoints" / "last.pt") as archive:
        weights = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        start = weights.header_offset + 30 + len(weights.filename.encode()) + len(weights.extra)
    flipped = bytearray(data)
    flipped[start + 8 : start + 16] = bytes(b ^ 0xFF for b in flipped[start + 8 : start + 16])
    (tmp_path / "flipped.pt").write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match=r"corrupt .*CRC"):
        podium.load(tmp_path / "flipped.pt")


def test_init_checkpoint_of_another_algorithm_is_refused(tmp_path):
    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=tmp_path / "a", **FAST)
    payload = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    payload["algo"] = "td3"
    save_checkpoint(tmp_path / "td3.pt", {k: v for k, v in payload.items() if k != "format"})
    with pytest.raises(CheckpointError, match="td3"):
        Pod(PodSpec(env="Pendulum-v1", algo="ppo", steps=10, init_checkpoint=str(tmp_path / "td3.pt")), tmp_path / "c")


def test_a_child_pod_keeps_its_own_learning_rates_and_its_parents_weights(tmp_path):
    podium.train("Pendulum-v1", "td3", steps=2_048, run_dir=tmp_path / "parent", **FAST)
    # last.pt, not the best snapshot: the best may predate the first update (no optimiser state yet).
    parent_checkpoint = str(tmp_path / "parent" / "checkpoints" / "last.pt")
    spec = PodSpec(
        env="Pendulum-v1",
        algo="td3",
        steps=10,
        init_checkpoint=parent_checkpoint,
        hparams={"actor_lr": 1.234e-4, "critic_lr": 5.678e-4},
    )
    child = Pod(spec, tmp_path / "child")
    assert [g["lr"] for g in child.agent.actor_optimizer.param_groups] == [1.234e-4]
    assert [g["lr"] for g in child.agent.critic_optimizer.param_groups] == [5.678e-4]
    saved = load_checkpoint(parent_checkpoint)["agent"]
    assert child.agent.actor_optimizer.state_dict()["state"][0]["step"] == saved["optim.actor"]["state"][0]["step"]
    for key, value in child.agent.actor.state_dict().items():
        assert torch.equal(value, saved["module.actor"][key])


def test_replay_buffer_is_saved_and_continues_in_a_resumed_pod_and_in_a_child(tmp_path, monkeypatch):
    parent = podium.train("Pendulum-v1", "sac", steps=2_048, run_dir=tmp_path / "parent", **FAST)
    replay = load_checkpoint(tmp_path / "parent" / "checkpoints" / "replay.pt")
    assert replay["algo"] == "sac" and replay["replay"]["rewards"].shape[0] == parent.steps == 2_048
    with pytest.raises(CheckpointError, match=r"replay.pt is a pod's replay buffer, not a policy: load .*best.pt"):
        podium.load(tmp_path / "parent" / "checkpoints" / "replay.pt")
    loaded = []
    original = Pod.run

    def spy(self):  # what the buffer held when training began
        loaded.append(None if self._replay is None else self._replay["rewards"].shape[0])
        return original(self)

    monkeypatch.setattr(Pod, "run", spy)
    resumed = podium.train(resume=tmp_path / "parent", steps=3_072)
    assert resumed.steps >= 3_072 and loaded[-1] == 2_048
    grown = load_checkpoint(tmp_path / "parent" / "checkpoints" / "replay.pt")["replay"]["rewards"].shape[0]
    assert grown == resumed.steps  # the resumed pod added to the old experience, it did not start over
    child = Pod(
        PodSpec(env="Pendulum-v1", algo="sac", steps=64, init_checkpoint=parent.checkpoint, **FAST), tmp_path / "child"
    )
    child.run()
    assert loaded[-1] == grown  # a tournament child starts with its parent's experience
    off = PodSpec(env="Pendulum-v1", algo="sac", steps=64, save_replay_buffer=False, **FAST)
    Pod(off, tmp_path / "off").run()
    assert not (tmp_path / "off" / "checkpoints" / "replay.pt").exists()
    ppo = podium.train("Pendulum-v1", "ppo", steps=2_048, run_dir=tmp_path / "ppo", **FAST)
    assert ppo.steps >= 2_048 and not (tmp_path / "ppo" / "checkpoints" / "replay.pt").exists()


def test_a_corrupt_replay_buffer_is_ignored_with_a_warning(tmp_path):
    podium.train("Pendulum-v1", "td3", steps=1_024, run_dir=tmp_path / "r", **FAST)
    (tmp_path / "r" / "checkpoints" / "replay.pt").write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="ignoring the replay buffer .*empty buffer"):
        pod = Pod.resume(tmp_path / "r", steps=2_048)
    assert pod.run().steps >= 2_048


def test_snapshots_are_kept_at_the_requested_interval_and_survive_resume(tmp_path):
    report = podium.train("CartPole-v1", "ppo", seconds=1.5, snapshot_every=0.3, run_dir=tmp_path / "r", **FAST)
    snaps = sorted((tmp_path / "r" / "checkpoints" / "snapshots").glob("step*.pt"))
    assert len(snaps) >= 3
    times = [load_checkpoint(p)["counters"]["wall_time"] for p in snaps]
    assert times == sorted(times) and times[-1] <= report.wall_time
    steps = [load_checkpoint(p)["counters"]["steps"] for p in snaps]
    assert [int(p.stem[4:]) for p in snaps] == steps
    podium.train(resume=tmp_path / "r", seconds=2.5)
    later = sorted((tmp_path / "r" / "checkpoints" / "snapshots").glob("step*.pt"))
    assert later[: len(snaps)] == snaps and len(later) > len(snaps)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"env": "CartPole-v1", "algo": "ppo", "stepz": 10}, "stepz: unknown field"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": "many"}, "steps"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": -5}, "steps"),
        ({"env": "CartPole-v1", "algo": "pop", "steps": 10}, "ppo"),
        ({"env": "CartPole-v1", "algo": "ppo"}, "steps, seconds or target"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"gama": 0.9}}, "gama: unknown field"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"gamma": "high"}}, "gamma"),
        # values that used to crash with a bare traceback (ZeroDivisionError, IndexError) or train nonsense
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"num_minibatches": 0}}, "num_minibatches"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"update_epochs": -1}}, "update_epochs"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"learning_rate": -1}}, "learning_rate"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"gamma": 5}}, "gamma"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"gae_lambda": 3}}, "gae_lambda"),
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"clip_coef": -0.5}}, "clip_coef"),
        ({"env": "Pendulum-v1", "algo": "sac", "steps": 10, "hparams": {"actor_lr": 0}}, "actor_lr"),
        ({"env": "CartPole-v1", "algo": "dqn", "steps": 10, "hparams": {"learning_rate": -1e-3}}, "learning_rate"),
        # a zero-width layer trained a policy blind to its observation (PPO, DQN) or divided by zero (SAC)
        ({"env": "CartPole-v1", "algo": "ppo", "steps": 10, "hparams": {"hidden_sizes": [64, 0]}}, "hidden_sizes.1"),
        ({"env": "Pendulum-v1", "algo": "sac", "steps": 10, "hparams": {"hidden_sizes": [0]}}, "hidden_sizes.0"),
        ({"env": "Pendulum-v1", "algo": "td3", "steps": 10, "hparams": {"hidden_sizes": [-4]}}, "greater than 0"),
        ({"env": "CartPole-v1", "algo": "dqn", "steps": 10, "hparams": {"hidden_sizes": [0]}}, "hidden_sizes.0"),
        (
            {"env": "Pendulum-v1", "algo": "sac", "steps": 10, "hparams": {"log_std_min": 2, "log_std_max": -2}},
            r"hparams: log_std_min \(2\) must be below log_std_max \(-2\)[^{]*$",  # (not the whole input again)
        ),
    ],
)
def test_bad_configs_name_the_field(tmp_path, fields, match):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(fields))
    with pytest.raises(ConfigError, match=match):
        podium.train(config=path, run_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_train_without_an_env_is_refused_not_cartpole(tmp_path):
    """``podium.train(algo="sac")`` trained PodSpec's default env (CartPole-v1), or failed on its actions."""
    for call in ({"algo": "ppo", "steps": 300}, {"algo": "sac", "steps": 300}, {"steps": 300}):
        with pytest.raises(ConfigError, match=r"give the environment to train on: podium.train\('CartPole-v1'"):
            podium.train(**call, run_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_env_object_is_refused_with_how_to_register_it(tmp_path):
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    for given in (env, lambda: env):
        with pytest.raises(ConfigError, match=r"give an environment id, not a .*gymnasium.register\('MyEnv-v0'"):
            podium.train(given, "ppo", steps=300, run_dir=tmp_path / "out")
    env.close()
    assert not (tmp_path / "out").exists()


def test_init_checkpoint_may_be_a_run_directory_as_for_load(tmp_path):
    parent = podium.train("CartPole-v1", "ppo", steps=512, run_dir=tmp_path / "parent", **FAST)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=10, init_checkpoint=str(tmp_path / "parent"), **FAST)
    child = Pod(spec, tmp_path / "child")
    saved = load_checkpoint(parent.checkpoint)["agent"]["module.actor"]  # best.pt, what podium.load reads
    assert all(torch.equal(v, saved[k]) for k, v in child.agent.actor.state_dict().items())
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"is a folder without checkpoints/best\.pt"):
        Pod(spec.model_copy(update={"init_checkpoint": str(tmp_path / "empty")}), tmp_path / "child2")


def test_unknown_env_in_train_suggests_a_close_match(tmp_path):
    with pytest.raises(KeyError, match="Pendulum-v1"):
        podium.train("Pendulum-v2x", "ppo", steps=10, run_dir=tmp_path)


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        podium.train(config=path)


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=50_000, checkpoint_every=0, **FAST)
    pod = Pod(spec, tmp_path)
    real_learn = pod.agent.learn
    calls = {"n": 0}

    def learn(buffer, next_obs):
        calls["n"] += 1
        out = real_learn(buffer, next_obs)
        if calls["n"] == 3:
            out["loss/value"] = float("nan")
        return out

    monkeypatch.setattr(pod.agent, "learn", learn)
    per_iteration = pod.env.num_envs * pod.agent.rollout_steps
    with pytest.raises(TrainingDivergedError, match=rf"loss/value became nan at step {3 * per_iteration}\b"):
        pod.run()
    payload = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert payload["counters"]["steps"] == 2 * per_iteration  # the last good state, intact and loadable
    assert all(torch.isfinite(v).all() for v in payload["agent"]["module.actor"].values())


def test_a_divergence_names_the_checkpoint_that_exists_and_blames_nan_training_data(tmp_path):
    """Diverged before its first checkpoint, a pod does not point at a last.pt that is not there; and where
    the rollout itself holds NaN or inf (the env's rewards), the advice is about the env, not the learning
    rate."""
    from types import SimpleNamespace

    from podium.pod.pod import _divergence_advice
    from podium.rundir import PodDir

    run = PodDir(tmp_path)
    clean = SimpleNamespace(rewards=torch.zeros(4), obs=torch.zeros(4, 3))
    assert (
        _divergence_advice(run, clean)
        == "No checkpoint was saved before it. Lower the learning rate or enable normalisation."
    )
    run.checkpoints.mkdir()
    run.best.write_bytes(b"")
    assert _divergence_advice(run, clean).startswith(f"The last good checkpoint is {run.best}.")
    run.last.write_bytes(b"")
    assert _divergence_advice(run, clean).startswith(f"The last good checkpoint is {run.last}.")
    tainted = SimpleNamespace(
        rewards=torch.tensor([0.0, float("inf")]), obs=torch.zeros(2, 3), next_obs=torch.zeros(2, 3)
    )
    advice = _divergence_advice(run, tainted)
    assert "holds NaN or inf (rewards)" in advice and "env's rewards" in advice and "learning rate" not in advice


def test_killed_training_resumes_without_losing_steps(tmp_path):
    config = tmp_path / "run.yaml"
    spec = {"env": "CartPole-v1", "algo": "ppo", "steps": 400_000, "eval_every": 1024, "checkpoint_every": 0, **FAST}
    config.write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "podium.cli",
        "train",
        "--config",
        str(config),
        "--run-dir",
        str(run_dir),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if (run_dir / "curve.csv").exists() and len(_curve(run_dir)) >= 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("training produced no curve within 120 s")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = load_checkpoint(run_dir / "checkpoints" / "last.pt")["counters"]["steps"]
    rows_before = [r for r in _curve(run_dir) if int(r["step"]) <= killed_at]
    target_steps = killed_at + 4096
    report = podium.train(resume=run_dir, steps=target_steps)
    assert report.steps == target_steps  # continued from the checkpoint: nothing lost, nothing counted twice
    rows = _curve(run_dir)
    steps = [int(r["step"]) for r in rows]
    assert rows[: len(rows_before)] == rows_before  # history kept
    assert steps == sorted(set(steps))  # no step counted twice
    assert steps[len(rows_before)] > killed_at and steps[-1] >= target_steps  # continued, not restarted
    assert float(rows[-1]["wall_time"]) > float(rows_before[-1]["wall_time"])


def _pooled(stats: list[dict[str, torch.Tensor]], n0: float = 1e-8) -> dict[str, torch.Tensor]:
    """The statistics of the data behind several normalisers that started from the same fresh state (``n0``
    pseudo-samples of mean 0 and variance 1), from their raw moments: the base once, each one's data once."""
    count = n0 + sum(s["count"] - n0 for s in stats)
    first = sum(s["count"] * s["mean"] for s in stats)
    second = n0 + sum(s["count"] * (s["var"] + s["mean"].square()) - n0 for s in stats)
    mean = first / count
    return {"count": count, "mean": mean, "var": second / count - mean.square()}


@pytest.mark.parametrize(
    ("algo", "updates"),
    [
        ("ppo", (2, 2, 2)),
        pytest.param("sac", (2, 2, 2), id="sac-log_alpha-moments"),  # a 0-dim parameter's moments are fused
        pytest.param("ppo", (3, 1, 2), id="ppo-unequal-steps"),  # the first agent's step count for all
    ],
)
def test_parameter_fusion_averages_networks_and_optimizer_moments(algo, updates):
    """Every floating parameter and buffer of every module (networks, log_std, target critics, log_alpha) and
    every Adam moment of every optimiser becomes the agents' mean, and every normaliser the statistics of all
    the agents' data pooled; Adam's step is the first's, also when the agents took different numbers of steps
    (PPO's target_kl stops learners' epochs early)."""
    from podium.envs import make

    env = make("Pendulum-v1", num_envs=2)
    spec = PodSpec(env="Pendulum-v1", algo=algo, steps=10)
    agents = []
    for seed, count in enumerate(updates):  # three agents, so that "the mean of the first two" is wrong
        torch.manual_seed(seed)
        agent = build_agent(spec, env.single_observation_space, env.single_action_space, 2, torch.device("cpu"))
        agent.generator.manual_seed(seed)
        if algo == "ppo":  # normaliser statistics (and counts) differ between the agents too
            agent.obs_rms.update(torch.randn(8 + seed, 3) * (seed + 1))
            with torch.no_grad():  # and the plain Gaussian's log_std, which the preset's gSDE does not train
                agent.log_std.fill_(-0.1 * seed)
            for _ in range(seed + 1):
                agent.reward_scaler.scale(torch.randn(2), torch.tensor([False, seed == 1]))
        for _ in range(count):  # real updates so that every optimiser has moments
            batch = {"obs": torch.randn(16, 3), "actions": torch.rand(16, 1) * 2 - 1}
            if algo == "ppo":
                batch |= {k: torch.randn(16) for k in ("logprobs", "values", "advantages", "returns")}
            else:
                batch |= {"rewards": torch.randn(16), "next_obs": torch.randn(16, 3), "terminated": torch.zeros(16)}
            agent.update(batch)
        agents.append(agent)

    def optimiser_states(agent):
        return {
            (name, g, i): {k: v.clone() for k, v in opt.state[p].items()}
            for name, opt in agent.optimizers().items()
            for g, group in enumerate(opt.param_groups)
            for i, p in enumerate(group["params"])
        }

    modules = [{n: {k: v.clone() for k, v in m.state_dict().items()} for n, m in a.modules().items()} for a in agents]
    moments = [optimiser_states(a) for a in agents]
    average_agents(agents)

    names = list(modules[0])
    assert set(names) >= (
        {"actor", "critic", "log_std", "obs_rms", "reward_scaler"} if algo == "ppo" else {"log_alpha"}
    )
    checked = 0
    for name in names:
        for key, first in modules[0][name].items():
            before = [m[name][key] for m in modules]
            assert first.is_floating_point(), f"{name}.{key}"  # (no integer state in these modules)
            assert not torch.equal(before[0], before[1]), f"{name}.{key} was equal before fusion: a weak test"
            mean = torch.stack(before).mean(0)
            if name in ("obs_rms", "reward_scaler"):  # normalisers: one normaliser over every agent's data
                prefix = key[: -len(key.split(".")[-1])]
                mean = _pooled([{k: m[name][prefix + k] for k in ("count", "mean", "var")} for m in modules])[
                    key.split(".")[-1]
                ]
            for agent in agents:
                torch.testing.assert_close(agent.modules()[name].state_dict()[key], mean, msg=f"{name}.{key}")
            checked += 1
    assert checked == sum(len(m) for m in modules[0].values())
    after = [optimiser_states(a) for a in agents]
    params = sum(len(g["params"]) for opt in agents[0].optimizers().values() for g in opt.param_groups)
    assert len(moments[0]) == params  # every trained tensor of every optimiser (SAC: two, one with two groups)
    for slot, first in moments[0].items():
        assert set(first) == {"step", "exp_avg", "exp_avg_sq"}, slot
        for key in ("exp_avg", "exp_avg_sq"):
            assert not torch.equal(first[key], moments[1][slot][key]), f"{slot} {key} was equal before fusion"
            mean = torch.stack([m[slot][key] for m in moments]).mean(0)
            for state in after:
                torch.testing.assert_close(state[slot][key], mean, msg=f"{slot} {key}")
        for state in after:
            assert torch.equal(state[slot]["step"], first["step"]), f"{slot} step"
    obs = torch.randn(32, 3)
    assert all(torch.equal(a.act(obs), agents[0].act(obs)) for a in agents[1:])  # one policy now


def test_algorithm_registry_suggests_names():
    with pytest.raises(KeyError, match="ppo"):
        get_algo("ppoo")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("env_id", "target"), [("CartPole-v1", 475.0), ("Pendulum-v1", -200.0)])
def test_ppo_reaches_the_standard_score(tmp_path, env_id, target, seed):
    report = podium.train(env_id, "ppo", target=target, seconds=180, seed=seed, run_dir=tmp_path, **FAST)
    assert report.reached_target, f"best {report.score_mean:.1f} after {report.steps} steps"
    # the saved best snapshot scores as well on fresh evaluation episodes (32 of them)
    mean, _ = podium.load(tmp_path).evaluate(episodes=32, seed=123)
    assert mean >= target - (25 if env_id == "CartPole-v1" else 60)


def test_a_policy_trained_on_discrete_observations_acts_on_the_envs_own_integers(tmp_path):
    import gymnasium as gym

    podium.train("FrozenLake-v1", "ppo", steps=512, run_dir=tmp_path, **FAST)
    policy = podium.load(tmp_path)
    env = gym.make("FrozenLake-v1")
    obs, _ = env.reset(seed=0)
    action = policy.act(obs)  # an int, as FrozenLake gives it
    assert isinstance(action, int) and env.action_space.contains(action)
    batch = policy.act(np.array([0, 5, 15]))
    assert batch.shape == (3,)
    one_hot = torch.nn.functional.one_hot(torch.tensor([0, 5, 15]), 16).float()
    assert batch.tolist() == policy.act(one_hot).tolist()  # the same as the one-hot vectors training saw
    as_torch = policy.act(torch.tensor([0, 5, 15]))  # torch integers: encoded too (were fed raw to the network)
    assert as_torch.tolist() == batch.tolist()
    assert policy.act(np.array([0.0, 5.0, 15.0])).tolist() == batch.tolist()  # numpy floats: integers, as before
    with pytest.raises(ValueError, match="Discrete space of 16 values, got \\[16\\]"):
        policy.act(16)
    with pytest.raises(ValueError, match="observations are integers"):
        policy.act(np.zeros((2, 3)))


def test_a_policy_names_a_wrong_observation_shape_and_pickles(tmp_path):
    import pickle

    podium.train("Pendulum-v1", "ppo", steps=512, run_dir=tmp_path, **FAST)
    policy = podium.load(tmp_path)
    with pytest.raises(ValueError, match=r"shape \[3\] or a batch \[B, 3\] for Pendulum-v1, got shape \[4\]"):
        policy.act(np.zeros(4))  # was torch's "mat1 and mat2 shapes cannot be multiplied"
    copy = pickle.loads(pickle.dumps(policy))  # for multiprocessing and Ray: was "Can't pickle local object"
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    assert np.allclose(copy.act(obs), policy.act(obs))
    assert policy.act(torch.as_tensor(obs).bfloat16()).shape == (5, 1)  # any float dtype, as the network's


def test_the_default_run_directory_is_one_name_whatever_the_env_id():
    from podium.pod.pod import default_run_dir

    for env in ("my_module:MyEnv-v0", "ALE/Pong-v5"):
        path = default_run_dir(PodSpec(env=env, steps=1))
        assert path.parent == Path("runs") and ":" not in path.name and "/" not in path.name
