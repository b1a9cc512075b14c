"""The evaluator: exact episode scores with sub-envs that end at different times, and the evaluator
service beside training (a slow evaluation does not slow training, only a confirmed target stops a pod,
a crash in evaluation fails the pod cleanly)."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium
from podium.config import PodSpec
from podium.envs.base import VecEnv
from podium.pod import EvaluationError, Evaluator, Pod
from podium.pod.evaluator import EvalResult
from podium.rundir import PodDir
from podium.store import load_checkpoint

FAST = {"tensorboard": False, "eval_episodes": 8}


class _Countdown(VecEnv):
    """Sub-env ``i`` terminates after ``i + 1`` steps; reward 1 per step, then 100 per step after a reset
    (so a score that counted a sub-env's second episode would be far off)."""

    def __init__(self, num_envs: int = 5, device: str = "cpu") -> None:
        space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        super().__init__(num_envs, space, gym.spaces.Discrete(2), device=device, max_episode_steps=50)
        self.t = torch.zeros(num_envs, device=self.device)
        self.episode = torch.zeros(num_envs, device=self.device)

    def reset(self, *, seed=None, options=None):
        self.t.zero_()
        self.episode.zero_()
        return torch.zeros(self.num_envs, 1, device=self.device), {}

    def step(self, actions):
        self.t += 1
        reward = torch.where(self.episode > 0, 100.0, 1.0)
        ends = self.t >= torch.arange(1, self.num_envs + 1, device=self.device)
        self.episode += ends.float()
        self.t[ends] = 0
        obs = torch.zeros(self.num_envs, 1, device=self.device)
        false = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return obs, reward, ends, false, {}


class _AnyPolicy:
    def act(self, obs, deterministic=True):
        return torch.zeros(obs.shape[0], dtype=torch.long)


def test_each_sub_env_scores_only_its_first_episode():
    result = Evaluator(_Countdown(5)).evaluate(_AnyPolicy())
    assert result.returns == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert result.mean == 3.0 and result.std == pytest.approx(np.std([1, 2, 3, 4, 5]))
    assert result.episodes == 5


def test_routine_seeds_advance_and_an_explicit_seed_does_not():
    seen = []

    class Recorder(_Countdown):
        def reset(self, *, seed=None, options=None):
            seen.append(seed)
            return super().reset(seed=seed)

    evaluator = Evaluator(Recorder(2), seed=10)
    evaluator.evaluate(_AnyPolicy())
    evaluator.evaluate(_AnyPolicy(), seed=999)
    evaluator.evaluate(_AnyPolicy())
    assert seen == [10, 999, 11]


# ----------------------------------------------------------------- the service, inside a pod
def _slow(monkeypatch, seconds: float, routine: float | None = None, confirmation: float | None = None):
    """Make every evaluation take ``seconds`` and, optionally, return fixed scores."""
    original = Evaluator.evaluate
    threads = set()

    def evaluate(self, agent, seed=None):
        threads.add(threading.current_thread().name)
        threading.Event().wait(seconds)
        result = original(self, agent, seed)
        fixed = confirmation if self.env.num_envs == 100 else routine  # confirmations: 100 episodes
        if fixed is None:
            return result
        return EvalResult(fixed, 1.0, result.episodes, result.seconds, (fixed,) * result.episodes)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate)
    return threads


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_slow_evaluation_does_not_hold_training_back(tmp_path, monkeypatch, mode):
    threads = _slow(monkeypatch, 0.5)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=40_960, eval_every=1, eval_mode=mode, **FAST)
    report = Pod(spec, tmp_path / "beside", progress=False).run()
    rollout = 1024  # the CartPole preset's rollout
    rows = report.curve
    assert threads == ({"podium-evaluator"} if mode == "thread" else set())  # a child process's own memory
    # training went on while each snapshot was scored: the next snapshot is several rollouts later
    gaps = [b["step"] - a["step"] for a, b in itertools.pairwise(rows)]
    assert len(rows) < report.steps // rollout and max(gaps[:-1]) >= 3 * rollout
    assert all(r["scored_at"] - r["wall_time"] >= 0.5 for r in rows)
    assert report.eval_time >= 0.5 * len(rows)
    # the same slow evaluator inline: training waits for it at every evaluation point
    threads.clear()
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=4 * rollout, eval_every=1, eval_mode="inline", **FAST)
    inline = Pod(spec, tmp_path / "inline", progress=False).run()
    assert threads == {"MainThread"}
    assert [r["step"] for r in inline.curve] == [rollout, 2 * rollout, 3 * rollout, 4 * rollout]


def test_a_killed_evaluator_process_fails_the_pod_cleanly(tmp_path, monkeypatch):
    original = Evaluator.evaluate

    def dies(self, agent, seed=None):
        if threading.current_thread() is threading.main_thread() and multiprocessing.parent_process() is not None:
            os.kill(os.getpid(), signal.SIGKILL)  # the evaluator's process dies mid-evaluation
        return original(self, agent, seed)

    monkeypatch.setattr(Evaluator, "evaluate", dies)
    spec = PodSpec(env="CartPole-v1", algo="ppo", seconds=60, eval_every=1024, eval_mode="process", **FAST)
    with pytest.raises(EvaluationError, match="ended unexpectedly"):
        Pod(spec, tmp_path, progress=False).run()
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("mode", ["process", "thread", "inline"])
def test_evaluation_modes_score_the_same_snapshots_alike(tmp_path, mode):
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=4096, eval_every=1024, eval_mode="inline", **FAST)
    reference = Pod(spec, tmp_path / "inline", progress=False).run()
    spec = spec.model_copy(update={"eval_mode": mode})
    report = Pod(spec, tmp_path / f"{mode}-again", progress=False).run()
    assert report.steps == reference.steps
    # training is the same whatever the evaluator does; snapshots of the same step score the same
    same = {r["step"]: r["eval_mean"] for r in reference.curve}
    assert all(same[r["step"]] == r["eval_mean"] for r in report.curve if r["step"] in same)
    assert report.curve[-1]["step"] == 4096 and report.curve[-1]["eval_mean"] == same[4096]


def test_only_a_confirmed_score_stops_a_pod_at_its_target(tmp_path, monkeypatch):
    _slow(monkeypatch, 0.0, routine=600.0, confirmation=100.0)  # lucky routine scores that do not hold up
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=8192, target=475, eval_every=1024, **FAST)
    report = Pod(spec, tmp_path / "lucky", progress=False).run()
    assert not report.reached_target and report.stop_reason == "steps" and report.time_to_target is None
    assert report.score_mean == 100.0  # ranked by the confirmation, not the lucky routine score
    assert all(r["confirm_mean"] == 100.0 for r in report.curve)

    _slow(monkeypatch, 0.0, routine=600.0, confirmation=480.0)
    report = Pod(spec, tmp_path / "real", progress=False).run()
    assert report.reached_target and report.stop_reason == "target"
    assert report.confirmed_mean == 480.0 and report.confirmed_episodes == 100
    assert report.steps < 8192  # stopped at the first confirmed snapshot
    best = load_checkpoint(PodDir(tmp_path / "real").best)
    assert best["counters"]["steps"] == report.steps_to_target and best["counters"]["best_mean"] == 480.0


@pytest.mark.parametrize("mode", ["process", "thread", "inline"])
def test_a_crash_in_evaluation_fails_the_pod_cleanly(tmp_path, monkeypatch, mode):
    def broken(self, agent, seed=None):
        raise RuntimeError("the evaluation env fell over")

    monkeypatch.setattr(Evaluator, "evaluate", broken)
    before = threading.active_count()
    spec = PodSpec(env="CartPole-v1", algo="ppo", seconds=60, eval_every=1024, eval_mode=mode, **FAST)
    with pytest.raises(EvaluationError, match="the evaluation env fell over"):
        Pod(spec, tmp_path, progress=False).run()
    assert threading.active_count() == before  # no evaluator thread left behind
    assert multiprocessing.active_children() == []  # nor process
    saved = load_checkpoint(PodDir(tmp_path).last)  # the training state is saved: resume can go on
    assert saved["counters"]["steps"] >= 1024


def test_confirmation_needs_a_meaningful_number_of_episodes():
    with pytest.raises(ValueError, match=r"standard error.*at least 30"):
        PodSpec(env="CartPole-v1", target=475, steps=10, confirm_episodes=5)
    PodSpec(env="CartPole-v1", target=475, steps=10, confirm_episodes=0)  # off, explicitly


def test_a_target_no_policy_can_reach_is_refused_at_start(tmp_path):
    with pytest.raises(podium.config.ConfigError, match=r"target 200 can never be reached.*did you mean -200"):
        podium.train("Pendulum-v1", "sac", target=200, seconds=5, run_dir=tmp_path, **FAST)


def test_a_selection_score_is_a_fresh_evaluation_of_the_best_snapshot(tmp_path):
    from podium.api import load
    from podium.envs import make
    from podium.pod.pod import SELECT_SEED_OFFSET

    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=4096, eval_every=1024, select_episodes=40, seed=3, **FAST)
    report = Pod(spec, tmp_path / "a", progress=False).run()
    assert report.selection_episodes == 40
    # the same number, computed independently from the saved best snapshot on the selection seeds
    policy = load(report.checkpoint)
    fresh = Evaluator(make("Pendulum-v1", num_envs=40)).evaluate(policy.agent, seed=3 + SELECT_SEED_OFFSET)
    assert report.selection_mean == pytest.approx(fresh.mean) and report.selection_std == pytest.approx(fresh.std)
    assert report.selection_mean != report.score_mean  # not the best routine evaluation again
    # a confirmation on at least as many fresh episodes already is a selection score
    spec = spec.model_copy(update={"target": -1e4, "select_episodes": 40})
    confirmed = Pod(spec, tmp_path / "b", progress=False).run()
    assert confirmed.selection_episodes == confirmed.confirmed_episodes == 100
    assert confirmed.selection_mean == confirmed.confirmed_mean
