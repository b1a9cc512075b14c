"""The evaluator: exact episode scores with sub-envs that end at different times, and the evaluator
service beside training (a slow evaluation does not slow training, only a confirmed target stops a pod,
a crash in evaluation fails the pod cleanly)."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
import time
import warnings
from dataclasses import astuple

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium
from podium.algos.ppo import PPO, PPOConfig
from podium.algos.sac import SAC, SACConfig
from podium.config import PodSpec
from podium.envs.base import VecEnv
from podium.pod import EvaluationError, Evaluator, Pod, PodInterrupted
from podium.pod import pod as pod_module
from podium.pod.evaluator import EvalResult, EvaluatorService, Snapshot, confirms, margin_for
from podium.pod.pod import (
    AGENT_SEED_OFFSET,
    CONFIRM_SEED_OFFSET,
    LEARNER_SEED_STRIDE,
    SELECT_SEED_OFFSET,
    WIDE_MATMUL,
    eval_seed,
    inline_eval_gap,
    plan_cpu,
)
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


class _Endless(VecEnv):
    """No time limit: sub-env 0 terminates after 3 steps, the others never; reward 1 per step."""

    def __init__(self, num_envs: int = 5) -> None:
        space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        super().__init__(num_envs, space, gym.spaces.Discrete(2), max_episode_steps=None)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return torch.zeros(self.num_envs, 1), {}

    def step(self, actions):
        self.t += 1
        ends = torch.zeros(self.num_envs, dtype=torch.bool)
        ends[0] = self.t == 3
        return torch.zeros(self.num_envs, 1), torch.ones(self.num_envs), ends, torch.zeros_like(ends), {}


def test_episodes_cut_off_by_the_step_cap_of_an_env_without_a_time_limit_are_warned_about_once(monkeypatch):
    """An env without a time limit was scored under a 10,000-step cap without a word: its unfinished episodes
    counted with their partial return."""
    from podium.pod import evaluator as evaluator_module
    from podium.pod.evaluator import EvaluationCutWarning

    monkeypatch.setattr(evaluator_module, "DEFAULT_MAX_STEPS", 20)
    evaluator = Evaluator(_Endless(5))
    with pytest.warns(EvaluationCutWarning, match=r"^4 of 5 evaluation episodes were still running after 20 steps"):
        result = evaluator.evaluate(_AnyPolicy())
    assert result.returns == (3.0, 20.0, 20.0, 20.0, 20.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluator.evaluate(_AnyPolicy())  # once per evaluator
        Evaluator(_Endless(5), max_steps=20).evaluate(_AnyPolicy())  # a cap the caller chose
        Evaluator(_Countdown(5)).evaluate(_AnyPolicy())  # episodes that end in the env's own time limit


class _Uneven(gym.Env):
    """Episodes of 2 to 60 steps (from the env's seed), reward 1 per step; counts every step it takes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    taken = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(2, 61))
        return np.zeros(1, np.float32), {}

    def step(self, action):
        _Uneven.taken += 1
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.length, False, {}


def test_an_evaluation_steps_each_gymnasium_episode_only_until_it_ends(monkeypatch):
    """Scoring N episodes of a stepped-one-by-one gymnasium env costs the sum of their lengths, not N times
    the longest, and gives the same scores as stepping every copy to the end."""
    from podium.envs import GymVecEnv

    env = GymVecEnv(_Uneven, num_envs=16, vectorization="sync")
    try:
        _Uneven.taken = 0
        result = Evaluator(env).evaluate(_AnyPolicy(), seed=7)
        assert _Uneven.taken == sum(result.returns)  # one step per step of a counted episode
        assert max(result.returns) > 2 * min(result.returns)  # (episodes of different lengths)
        monkeypatch.setattr(GymVecEnv, "step_active", lambda self, actions, active: self.step(actions))
        _Uneven.taken = 0
        every_copy = Evaluator(env).evaluate(_AnyPolicy(), seed=7)
        assert _Uneven.taken == 16 * max(result.returns)
    finally:
        env.close()
    assert every_copy.returns == result.returns


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


@pytest.mark.parametrize("steps", [0, 1024, 10**6, 499_999_000, 5 * 10**8, 9 * 10**8, 10**12 + 7])
def test_a_pods_routine_evaluations_never_reset_with_its_other_seeds(steps):
    """Evaluation seeds grew with the env steps: after 499M steps (minutes for a GPU pod) they were the
    confirmations' seeds, then the selection's and the agent's; and learner 10 trained on the first ones."""
    episodes = 100_000  # a gymnasium env's sub-env i resets with seed + i
    first = eval_seed(3, steps) - 3
    last = first + episodes - 1
    training = 1000 * LEARNER_SEED_STRIDE  # a thousand learners, each resumed a hundred thousand times
    assert training <= first and last < CONFIRM_SEED_OFFSET < SELECT_SEED_OFFSET < AGENT_SEED_OFFSET


# ----------------------------------------------------------------- the service, inside a pod
def _slow(
    monkeypatch, seconds: float, routine: float | None = None, confirmation: float | None = None, std: float = 1.0
):
    """Make every evaluation take ``seconds`` and, optionally, return fixed scores (mean, ``std``)."""
    original = Evaluator.evaluate
    threads = set()

    def evaluate(self, agent, seed=None):
        threads.add(threading.current_thread().name)
        threading.Event().wait(seconds)
        result = original(self, agent, seed)
        fixed = confirmation if self.env.num_envs == 100 else routine  # confirmations: 100 episodes
        if fixed is None:
            return result
        return EvalResult(fixed, std, result.episodes, result.seconds, (fixed,) * result.episodes)

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


@pytest.mark.parametrize("mode", ["thread", "process", "inline"])
def test_ctrl_c_during_the_final_evaluation_stops_the_pod_and_resume_scores_what_is_left(tmp_path, monkeypatch, mode):
    """One SIGINT while the final evaluation runs stops the pod (it used to be noted and ignored: the pod scored
    on and finished as if nobody had asked). Beside training, the pod stops at once and a resumed run scores
    the final policy; inline, the score being taken is kept and the pod stops after it."""
    started, release = tmp_path / "scoring", threading.Event()
    original = Evaluator.evaluate

    def evaluate(self, agent, seed=None):  # the final evaluation takes until the test releases it (or 20 s)
        started.touch()
        release.wait(20.0 if mode != "inline" else 1.0)
        return original(self, agent, seed)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=2048, eval_every=10**9, eval_mode=mode, **FAST)
    pod = Pod(spec, tmp_path / "run", progress=False)

    def interrupt_when_scoring() -> None:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt_when_scoring, daemon=True)
    begin = time.monotonic()
    thread.start()
    try:
        with pytest.raises(PodInterrupted) as info:
            pod.run()
    finally:
        release.set()
        thread.join()
    assert time.monotonic() - begin < 10 and info.value.steps == 2048
    assert load_checkpoint(PodDir(tmp_path / "run").last)["counters"]["steps"] == 2048
    monkeypatch.undo()
    report = podium.train(resume=tmp_path / "run", progress=False)
    assert [r["step"] for r in report.curve] == [2048] and report.steps == 2048


def test_inline_evaluations_keep_to_their_share_of_the_wall_clock(tmp_path, monkeypatch):
    # every evaluation takes 0.3 s; with eval_share 0.2 the next one waits for 4 x 0.3 s of training
    _slow(monkeypatch, 0.3)
    rollout = 1024
    common = {"env": "CartPole-v1", "algo": "ppo", "eval_every": 1, "eval_mode": "inline"}
    spec = PodSpec(**common, seconds=6, eval_share=0.2, **FAST)
    shared = Pod(spec, tmp_path / "share", progress=False).run()
    training = shared.wall_time - shared.eval_time
    # the evaluations took about a fifth of the run: at most one per 1.2 s of training (+ the last one)
    assert len(shared.curve) <= training / 1.2 + 2
    assert shared.eval_time <= 0.35 * shared.wall_time
    gaps = [b["step"] - a["step"] for a, b in itertools.pairwise(shared.curve)]
    assert min(gaps) > rollout  # wider than eval_every: the rule spaced them, the final evaluation included
    every = Pod(PodSpec(**common, steps=8 * rollout, **FAST), tmp_path / "every", progress=False).run()
    assert len(every.curve) == 8  # without a share: after every learning phase, however long it takes


@pytest.mark.parametrize(
    ("every", "seconds", "sps", "share", "expected"),
    [
        (5_000, 1.0, 10_000.0, 0.2, 40_000),  # 1 s of evaluation, then 4 s of training at 10k steps/s
        (5_000, 0.1, 10_000.0, 0.2, 5_000),  # a cheap evaluation: the cadence decides
        (5_000, 1.0, 10_000.0, None, 5_000),  # no share
        (5_000, 1.0, 10_000.0, 1.0, 5_000),  # a share of everything
        (5_000, 1.0, 10_000.0, 0.5, 10_000),
    ],
)
def test_inline_eval_gap(every, seconds, sps, share, expected):
    assert inline_eval_gap(every, seconds, sps, share) == expected


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


def test_an_inline_pod_stops_at_the_learning_phase_whose_snapshot_confirmed(tmp_path, monkeypatch):
    """Inline, a snapshot is scored after its phase's budget check: the target it confirms ends the run there,
    not after one more learning phase (whose policy last.pt would then hold, and whose time the user waits)."""
    _slow(monkeypatch, 0.0, routine=600.0, confirmation=480.0)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=8192, target=475, eval_every=1024, eval_mode="inline", **FAST)
    report = Pod(spec, tmp_path, progress=False).run()
    assert report.reached_target and report.stop_reason == "target"
    assert report.steps == report.steps_to_target < 8192
    assert load_checkpoint(PodDir(tmp_path).last)["counters"]["steps"] == report.steps_to_target


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_confirmed_target_ends_the_learning_phase_it_arrives_in(tmp_path, monkeypatch, mode):
    """Beside training, the confirmation of the first snapshot arrives while the next phase learns (200
    epochs of 4 minibatches, about a second here; the confirmation takes a fraction of that): PPO ends that
    phase at its next epoch and the pod stops then, not a whole phase later. A score that does not reach the
    target cuts nothing short: every phase runs all its epochs."""
    updates = 0
    update = PPO.update

    def counted(self, batch):
        nonlocal updates
        updates += 1
        return update(self, batch)

    monkeypatch.setattr(PPO, "update", counted)
    full_phase = 200 * 4
    common = {"env": "CartPole-v1", "algo": "ppo", "eval_every": 1024, "eval_mode": mode, **FAST}
    spec = PodSpec(steps=8192, target=475, hparams={"update_epochs": 200}, **common)
    _slow(monkeypatch, 0.0, routine=600.0, confirmation=480.0)
    pod = Pod(spec, tmp_path / "stops", progress=False)
    report = pod.run()
    assert report.reached_target and report.stop_reason == "target" and report.steps_to_target == 1024
    assert report.steps == 2048  # the phase the confirmation arrived in counts its rollout
    assert full_phase < updates < 2 * full_phase  # ... and learned only part of its epochs
    assert load_checkpoint(PodDir(tmp_path / "stops").last)["counters"]["steps"] == 2048
    assert pod.agent.stop_early is None  # the pod's hook does not outlive its run

    updates = 0
    _slow(monkeypatch, 0.0, routine=600.0, confirmation=100.0)  # confirmations that fail
    spec = PodSpec(steps=3072, target=475, hparams={"update_epochs": 20}, **common)
    report = Pod(spec, tmp_path / "runs-on", progress=False).run()
    assert not report.reached_target and report.steps == 3072 and updates == 3 * 20 * 4


def test_a_confirmation_just_above_the_target_is_not_enough(tmp_path, monkeypatch):
    # 476 +- 30 over 100 episodes: a standard error of 3, so the true mean may well be under 475
    _slow(monkeypatch, 0.0, routine=600.0, confirmation=476.0, std=30.0)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=4096, target=475, eval_every=1024, **FAST)
    report = Pod(spec, tmp_path / "margin", progress=False).run()
    assert not report.reached_target and report.stop_reason == "steps"
    assert report.score_mean == 476.0  # still the pod's best, ranked by its confirmation
    spec = spec.model_copy(update={"confirm_margin": 0.0})  # the mean alone decides
    report = Pod(spec, tmp_path / "no-margin", progress=False).run()
    assert report.reached_target and report.stop_reason == "target"


def test_each_later_confirmation_asks_for_a_wider_margin(tmp_path, monkeypatch):
    """A policy near the target gets a confirmation at every routine score that reaches it; with a fixed
    margin one of many would pass by luck. Scores 476, 482, 484 +- 30 over 100 episodes (SE 3): 482 would
    pass a first try (2 SE: 476) but not a second (2.53 SE: 474.4); 484 passes the third (2.80 SE: 475.6)."""
    original = Evaluator.evaluate
    scores = iter([476.0, 482.0, 484.0])

    def evaluate(self, agent, seed=None):
        result = original(self, agent, seed)
        fixed = next(scores, 490.0) if self.env.num_envs == 100 else 600.0  # confirmations: 100 episodes
        return EvalResult(fixed, 30.0, result.episodes, result.seconds, (fixed,) * result.episodes)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=8192, target=475, eval_every=1024, eval_mode="inline", **FAST)
    report = Pod(spec, tmp_path / "tries", progress=False).run()
    assert report.reached_target and report.confirmed_mean == 484.0
    assert [r["confirm_mean"] for r in report.curve][:3] == [476.0, 482.0, 484.0]
    tried = sum(r["confirm_mean"] is not None for r in report.curve)  # the final policy's score is one too
    assert load_checkpoint(PodDir(tmp_path / "tries").last)["counters"]["confirmations"] == tried >= 3
    assert [round(margin_for(2.0, k), 2) for k in (1, 2, 3, 10)] == [2.0, 2.53, 2.80, 3.51]
    assert margin_for(0.0, 10) == 0.0  # no margin asked: none grows
    assert margin_for(50.0, 3) == 50.0 and margin_for(8.0, 10**6) > 8.0  # far tails stay finite


def test_best_pt_holds_the_snapshot_that_reached_the_target(tmp_path, monkeypatch):
    """A first confirmation of 482 +- 60 fails (SE 6: 470 < 475) although its mean is the higher; the second,
    478 +- 10, passes (2.53 SE of 1: 475.5). The policy the pod hands back is the one that passed."""
    original = Evaluator.evaluate
    scores = iter([(482.0, 60.0), (478.0, 10.0)])

    def evaluate(self, agent, seed=None):
        result = original(self, agent, seed)
        mean, std = next(scores, (499.0, 0.0)) if self.env.num_envs == 100 else (600.0, 0.0)
        return EvalResult(mean, std, result.episodes, result.seconds, (mean,) * result.episodes)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate)
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=8192, target=475, eval_every=1024, eval_mode="inline", **FAST)
    report = Pod(spec, tmp_path / "best", progress=False).run()
    assert report.reached_target and report.confirmed_mean == 478.0 and report.score_mean == 478.0
    best = load_checkpoint(PodDir(tmp_path / "best").best)["counters"]
    assert best["best_mean"] == 478.0 and best["steps"] == report.steps_to_target


@pytest.mark.parametrize(
    ("mean", "std", "margin", "expected"),
    [(480.0, 0.0, 2.0, True), (476.0, 30.0, 2.0, False), (481.0, 30.0, 2.0, True), (476.0, 30.0, 0.0, True),
     (474.9, 0.0, 0.0, False), (-94.0, 25.0, 2.0, True), (-96.0, 25.0, 2.0, False)],
)  # fmt: skip
def test_confirms_takes_the_standard_error_off_the_mean(mean, std, margin, expected):
    target = 475.0 if mean > 0 else -100.0
    assert confirms(EvalResult(mean, std, 100, 1.0, ()), target, margin) is expected


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
    with pytest.raises(podium.config.ConfigError, match=r"target 0 can never be reached on MountainCar-v0.* is -1"):
        podium.train("MountainCar-v0", "dqn", target=0, seconds=5, run_dir=tmp_path, **FAST)  # -1 a step, 1 at least


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


# ----------------------------------------------------------------- the evaluator and its service, alone
class _SeedEcho(VecEnv):
    """One-step episodes whose reward is the action plus the sub-env's seed (``seed + i``), so that a
    score shows which seeds it was run on; ``gate`` (an event) holds every reset until it is set, and
    ``started`` is set when a reset begins (so that a test knows a snapshot is being scored)."""

    def __init__(self, num_envs: int, gate=None, started=None, fail: str | None = None) -> None:
        space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        super().__init__(num_envs, space, space, max_episode_steps=1)
        self.gate, self.started, self.fail = gate, started, fail
        self.base = torch.zeros(num_envs)

    def reset(self, *, seed=None, options=None):
        if self.started is not None:
            self.started.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT), "the test never opened the gate"
        if self.fail is not None:
            raise RuntimeError(self.fail)
        self.base = seed + torch.arange(self.num_envs, dtype=torch.float32)
        return torch.zeros(self.num_envs, 1), {}

    def step(self, actions):
        reward = actions[:, 0].float() + self.base
        done = torch.ones(self.num_envs, dtype=torch.bool)
        return torch.zeros(self.num_envs, 1), reward, done, torch.zeros_like(done), {}


class _WeightPolicy:
    """Acts with the weight ``w`` of the modules it was last loaded with (``module.policy``)."""

    def __init__(self) -> None:
        self.w = 0.0

    def load_modules(self, state):
        self.w = float(state["module.policy"]["w"])

    def act(self, obs, deterministic=True):
        return torch.full((obs.shape[0], 1), self.w)


WAIT = 30.0
"""How long the service tests wait for anything (scoring takes milliseconds)."""


def _snapshot(w: float, seed: int, **extra) -> Snapshot:
    state = {"module.policy": {"w": torch.tensor(w)}, "optimizer.policy": {"lr": 0.1}}
    return Snapshot(state, steps=int(w), wall_time=w / 10, seed=seed, extra=extra)


def _build(episodes: int = 3, confirm: int | None = 4, **env_kwargs):
    def build():
        confirmer = Evaluator(_SeedEcho(confirm)) if confirm else None
        return _WeightPolicy(), Evaluator(_SeedEcho(episodes, **env_kwargs)), confirmer

    return build


class _Steps(VecEnv):
    """Sub-env ``i`` ends after ``lengths[i]`` steps (terminated, or truncated where ``truncate``), reward 1
    per step, then 100 per step; counts the steps it was asked for. No ``lengths``: never ends."""

    def __init__(self, lengths=None, num_envs: int = 2, truncate=(), limit: int | None = None) -> None:
        n = len(lengths) if lengths else num_envs
        space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        super().__init__(n, space, space, max_episode_steps=limit)
        self.lengths = torch.tensor(lengths if lengths else [10**9] * n)
        self.truncate = torch.tensor([i in truncate for i in range(n)])
        self.steps = 0
        self.reward = torch.ones(n)

    def reset(self, *, seed=None, options=None):
        self.steps, self.reward = 0, torch.ones(self.num_envs)
        return torch.zeros(self.num_envs, 1), {}

    def step(self, actions):
        self.steps += 1
        reward = self.reward.clone()
        ends = self.lengths == self.steps
        self.reward[ends] = 100.0
        return torch.zeros(self.num_envs, 1), reward, ends & ~self.truncate, ends & self.truncate, {}


def test_an_evaluation_steps_until_the_last_sub_env_ends_whether_terminated_or_truncated():
    env = _Steps([3, 1, 2], truncate=(0,))
    result = Evaluator(env).evaluate(_WeightPolicy())
    assert result.returns == (3.0, 1.0, 2.0) and env.steps == 3  # not one step more
    assert isinstance(result.returns, tuple) and result.episodes == 3 and result.seconds > 0
    assert result.mean == 2.0 and result.std == pytest.approx(np.std([3, 1, 2]))
    env = _Steps([2, 2])
    assert Evaluator(env).evaluate(_WeightPolicy()).returns == (2.0, 2.0) and env.steps == 2


def test_an_evaluation_stops_at_its_step_cap_and_counts_the_partial_returns():
    env = _Steps(num_envs=2)  # never ends
    result = Evaluator(env, max_steps=7).evaluate(_WeightPolicy())
    assert result.returns == (7.0, 7.0) and env.steps == 7 and result.std == 0.0
    assert Evaluator(_Steps(num_envs=2, limit=50)).max_steps == 50  # the env's time limit by default
    assert Evaluator(_Steps(num_envs=2, limit=50), max_steps=9).max_steps == 9
    assert Evaluator(_Steps(num_envs=2)).max_steps == 10_000  # no limit: a safety cap


def test_one_episode_has_no_spread_and_a_nan_score_is_an_error():
    result = Evaluator(_Steps([4])).evaluate(_WeightPolicy())
    assert result.returns == (4.0,) and result.mean == 4.0 and result.std == 0.0

    class NaNs(_Steps):
        def step(self, actions):
            obs, reward, terminated, truncated, info = super().step(actions)
            return obs, reward * float("nan"), terminated, truncated, info

    with pytest.raises(FloatingPointError, match="NaN scores"):
        Evaluator(NaNs([1, 1])).evaluate(_WeightPolicy())


def test_the_evaluator_acts_deterministically_unless_told_otherwise():
    seen = []

    class Recorder(_WeightPolicy):
        def act(self, obs, deterministic=True):
            seen.append(deterministic)
            return super().act(obs)

    Evaluator(_Steps([1])).evaluate(Recorder())
    Evaluator(_Steps([1]), deterministic=False).evaluate(Recorder())
    assert seen == [True, False]


def test_the_best_result_is_the_highest_mean_then_the_smallest_spread_and_the_first_of_equals():
    evaluator = Evaluator(_SeedEcho(2))
    policy = _WeightPolicy()
    assert evaluator.best is None
    first = evaluator.evaluate(policy, seed=0)  # returns (0, 1)
    assert evaluator.best is first
    policy.w = -1.0
    evaluator.evaluate(policy, seed=0)  # a lower mean
    assert evaluator.best is first
    policy.w = 0.0
    again = evaluator.evaluate(policy, seed=0)  # exactly as good: the first stays
    assert again.returns == first.returns and evaluator.best is first
    policy.w = 1.0
    better = evaluator.evaluate(policy, seed=0)
    assert better.mean == 1.5 and evaluator.best is better

    class Spread(_SeedEcho):
        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed)
            self.base = torch.arange(self.num_envs) * seed  # seed 1: (0, 1) plus the action; 0: (0, 0); -1: (0, -1)
            return obs, info

    evaluator = Evaluator(Spread(2))
    policy = _WeightPolicy()
    wide = evaluator.evaluate(policy, seed=1)  # mean 0.5, std 0.5
    policy.w = 0.5
    narrow = evaluator.evaluate(policy, seed=0)  # mean 0.5, std 0
    assert wide.mean == narrow.mean and narrow.std < wide.std and evaluator.best is narrow
    policy.w = 1.0
    evaluator.evaluate(policy, seed=-1)  # mean 0.5 again, wider
    assert evaluator.best is narrow


@pytest.mark.parametrize("mode", ["inline", "thread", "process"])
def test_the_service_scores_each_snapshot_on_its_seed_and_confirms_a_score_at_the_target(mode):
    with EvaluatorService(_build(), target=12.0, confirm_seed=1000, mode=mode) as service:
        assert not service.busy and service.results() == []
        low = _snapshot(1.0, seed=10, tag="low")  # returns (11, 12, 13): mean 12, at the target
        service.submit(low)
        scored = service.wait()  # (the pod waits without a timeout)
        assert [s.snapshot for s in scored] == [low] and scored[0].snapshot.extra == {"tag": "low"}
        assert scored[0].result.returns == (11.0, 12.0, 13.0) and scored[0].result.episodes == 3
        confirmation = scored[0].confirmation  # on 4 episodes from seed 1000
        assert confirmation is not None and confirmation.returns == (1001.0, 1002.0, 1003.0, 1004.0)
        assert scored[0].score == confirmation.mean == 1002.5
        for k in (1, 2):  # each next confirmation starts 4 seeds later
            service.submit(_snapshot(2.0, seed=20))
            start = time.monotonic()
            scored += service.wait(timeout=0.9)  # scoring takes milliseconds: well within a short timeout
            assert time.monotonic() - start < 0.8  # and wait returns as soon as it is scored
            assert scored[k].confirmation.returns == tuple(1002.0 + 4 * k + i for i in range(4))
        service.submit(_snapshot(1.0, seed=9.5))  # returns (10.5, 11.5, 12.5): just below the target
        (unconfirmed,) = service.wait(timeout=WAIT)
        assert unconfirmed.confirmation is None and unconfirmed.score == unconfirmed.result.mean == 11.5
        assert not service.busy and service.results() == []
        scored.append(unconfirmed)
        assert all(0 < s.seconds < WAIT for s in scored)
        assert service.seconds == pytest.approx(sum(s.seconds for s in scored))


def test_a_closed_thread_service_gives_up_the_evaluation_it_is_running_and_closes_its_envs():
    """A pod that stopped left its evaluator thread scoring on, unheard (a 100-episode confirmation beside the
    next pod of a tournament, or beside the pod's own selection), and its envs open."""

    class Endless(_Steps):
        closed = False

        def step(self, actions):
            time.sleep(0.001)
            return super().step(actions)

        def close(self):
            Endless.closed = True

    def build():
        return _WeightPolicy(), Evaluator(Endless(num_envs=2), max_steps=10**7), None

    service = EvaluatorService(build, mode="thread")
    service.submit(_snapshot(1.0, seed=0))
    deadline = time.monotonic() + WAIT
    while service._working is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.busy
    start = time.monotonic()
    service.close()
    assert time.monotonic() - start < 2 and not service._thread.is_alive() and Endless.closed


def test_without_a_target_or_a_confirmer_nothing_is_confirmed():
    with EvaluatorService(_build(), target=None, mode="inline") as service:
        service.submit(_snapshot(100.0, seed=0))
        assert service.results()[0].confirmation is None
    with EvaluatorService(_build(confirm=None), target=0.0, mode="inline") as service:
        service.submit(_snapshot(100.0, seed=0))
        assert service.results()[0].confirmation is None
    with EvaluatorService(_build(), target=0.0, mode="inline") as service:  # confirmation seeds from 0 by default
        service.submit(_snapshot(100.0, seed=7))
        assert service.results()[0].confirmation.returns == (100.0, 101.0, 102.0, 103.0)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_snapshot_still_waiting_is_replaced_by_a_newer_one(mode):
    context = multiprocessing.get_context("fork")
    gate, started = context.Event(), context.Event()
    with EvaluatorService(_build(gate=gate, started=started), mode=mode) as service:
        first, second, third = (_snapshot(w, seed=0) for w in (1.0, 2.0, 3.0))
        service.submit(first)
        assert started.wait(WAIT) and service.busy
        service.submit(second)
        service.submit(third)  # the second never got its turn
        assert service.wait(timeout=0.2) == [] and service.busy  # still held at the gate
        gate.set()
        scored = service.wait(timeout=WAIT)
        assert [s.snapshot.steps for s in scored] == [1, 3] and not service.busy
        assert [s.result.mean for s in scored] == [2.0, 4.0]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_closing_the_service_drops_the_snapshot_being_scored_at_once(mode):
    context = multiprocessing.get_context("fork")
    gate, started = context.Event(), context.Event()
    service = EvaluatorService(_build(gate=gate, started=started), mode=mode)
    service.submit(_snapshot(1.0, seed=0))
    assert started.wait(WAIT)
    process, thread = service._process, service._thread
    start = time.monotonic()
    service.close()
    assert time.monotonic() - start < 1
    if process is not None:
        assert process.exitcode == -signal.SIGKILL and service._process is None
    if thread is not None:  # the thread finishes the snapshot unheard, then ends
        gate.set()  # (not after a kill: a sleeper killed inside Event.wait would hang Event.set)
        thread.join(10)
        assert not thread.is_alive()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_idle_service_stops_when_closed(mode):
    service = EvaluatorService(_build(), mode=mode)
    service.submit(_snapshot(1.0, seed=0))
    deadline, scored = time.monotonic() + WAIT, []
    while not scored and time.monotonic() < deadline:  # results() alone, never blocking, collects them
        scored = service.results()
        time.sleep(0.01)
    assert len(scored) == 1
    process, thread = service._process, service._thread
    if process is not None:  # the pod's child process, by name; a daemon, so it never outlives the pod
        assert [(p.name, p.daemon) for p in multiprocessing.active_children()] == [("podium-evaluator", True)]
    if thread is not None:
        assert (thread.name, thread.daemon) == ("podium-evaluator", True)
    service.close()
    if process is not None:
        assert process.exitcode == 0 and service._process is None  # told to stop, not killed
    if thread is not None:
        assert not thread.is_alive()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_service_whose_envs_fail_reports_why(mode):
    with EvaluatorService(_build(fail="no evaluation data"), mode=mode) as service:
        service.submit(_snapshot(1.0, seed=0))
        with pytest.raises(EvaluationError, match="the evaluator failed: RuntimeError: no evaluation data"):
            service.wait(timeout=WAIT)
        assert not service.busy
        with pytest.raises(EvaluationError, match="no evaluation data"):
            service.submit(_snapshot(2.0, seed=0))


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_service_that_cannot_be_built_reports_why(mode):
    def build():
        raise RuntimeError("no such env")

    failed = pytest.raises(EvaluationError, match="the evaluator failed: RuntimeError: no such env")
    with EvaluatorService(build, mode=mode) as service, failed:
        service.submit(_snapshot(1.0, seed=0))  # (raises here if the failure is already known)
        service.wait(timeout=WAIT)


def test_an_inline_service_fails_with_an_evaluation_error_and_an_unknown_mode_is_refused():
    failed = pytest.raises(EvaluationError, match="the evaluator failed: RuntimeError: disk full")
    with EvaluatorService(_build(fail="disk full"), mode="inline") as service, failed:
        service.submit(_snapshot(1.0, seed=0))
    with pytest.raises(ValueError, match="eval mode must be 'process', 'thread' or 'inline', got 'fibre'"):
        EvaluatorService(_build(), mode="fibre")


def test_a_snapshot_is_a_detached_copy_and_acting_needs_only_its_modules():
    weight = torch.ones(2, requires_grad=True)

    class Agentish:
        def state_dict(self):
            return {"module.actor": {"w": weight, "sizes": [weight, (weight, 3)]}, "optimizer.actor": {"step": 1}}

    snapshot = Snapshot.of(Agentish(), steps=5, wall_time=2.5, seed=7, counters={"best": 1.0})
    assert (snapshot.steps, snapshot.wall_time, snapshot.seed) == (5, 2.5, 7)
    assert snapshot.extra == {"counters": {"best": 1.0}}
    with torch.no_grad():
        weight.mul_(3)
    copy = snapshot.state["module.actor"]
    assert torch.equal(copy["w"], torch.ones(2)) and not copy["w"].requires_grad
    assert isinstance(copy["sizes"], list) and isinstance(copy["sizes"][1], tuple) and copy["sizes"][1][1] == 3
    assert torch.equal(copy["sizes"][1][0], torch.ones(2))
    assert snapshot.modules() == {"module.actor": copy}
    assert Snapshot({}, 0, 0.0).seed == 0 and Snapshot({}, 0, 0.0).extra == {}


def test_an_evaluator_process_that_dies_fails_the_service_with_its_exit_code():
    context = multiprocessing.get_context("fork")
    gate, started = context.Event(), context.Event()
    with EvaluatorService(_build(gate=gate, started=started), mode="process") as service:
        service.submit(_snapshot(1.0, seed=0))
        assert started.wait(WAIT)
        os.kill(service._process.pid, signal.SIGKILL)
        service._process.join(WAIT)
        with pytest.raises(EvaluationError, match=r"the evaluator process ended unexpectedly \(exit code -9\)"):
            service.results()
        assert not service.busy


def test_the_service_runs_in_a_thread_by_default():
    with EvaluatorService(_build()) as service:
        assert service.mode == "thread" and service._thread is not None and service._process is None


# ------------------------------------------------------------------ where the evaluator runs, how many threads
NARROW, WIDE = 1 << 20, 1 << 25  # classic-control and MuJoCo-sized widest matrix products


@pytest.mark.parametrize(
    ("fields", "widest", "cores", "plan"),
    [
        ({}, NARROW, 2, (1, "process")),  # one thread is fastest: the second core is the evaluator's
        ({}, NARROW, 16, (1, "process")),
        ({}, NARROW, 1, (1, "inline")),
        ({}, WIDE, 2, (2, "inline")),  # never two training threads beside an evaluator process on two cores
        ({}, WIDE, 3, (2, "process")),
        ({}, WIDE, 16, (15, "process")),
        ({"torch_threads": 4}, WIDE, 16, (3, "process")),  # torch_threads is the pod's budget of cores
        ({"torch_threads": 2}, WIDE, 16, (2, "inline")),
        ({"torch_threads": 2}, NARROW, 16, (1, "process")),  # set: the budget less the evaluator's core
        ({"torch_threads": 1}, NARROW, 16, (1, "inline")),
        ({"eval_mode": "process"}, WIDE, 2, (1, "process")),  # asked for: it still takes its core
        ({"eval_mode": "inline"}, WIDE, 16, (16, "inline")),
        ({"eval_mode": "thread"}, NARROW, 4, (1, "thread")),
        ({"device": "cuda"}, WIDE, 16, (None, "thread")),  # torch's own threads on an accelerator
        ({"device": "cuda", "torch_threads": 3, "eval_mode": "inline"}, WIDE, 16, (3, "inline")),
        # the pod's own processes take their cores first: a learner and its 2 workers leave none on 3 cores
        ({"workers": 2, "num_envs": 8}, NARROW, 3, (1, "inline")),
        ({"workers": 2, "num_envs": 8}, NARROW, 4, (1, "process")),
        ({"learners": 2}, NARROW, 2, (1, "inline")),
        ({"learners": 2}, NARROW, 3, (1, "process")),
    ],
)
def test_cpu_plan_splits_the_cores_between_training_and_the_evaluator(fields, widest, cores, plan):
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1, **fields)
    assert astuple(plan_cpu(spec, widest, cores)) == plan


def test_without_fork_the_evaluator_runs_inline():
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1)
    assert astuple(plan_cpu(spec, NARROW, 16, fork=False)) == (1, "inline")


def test_an_env_that_a_fork_cannot_use_keeps_every_pod_process_unforked(tmp_path, monkeypatch):
    """An MJX env on a CPU (``fork_safe`` False: a forked child hung at its first JAX compile): the evaluator
    is not a process (``auto`` runs it inline, ``process`` is refused before anything starts), and learners
    and rollout workers start with spawn."""
    from podium.envs.classic.cartpole import CartPoleVecEnv

    monkeypatch.setattr(CartPoleVecEnv, "fork_safe", False)
    threads = torch.get_num_threads()
    try:
        spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1024, torch_threads=4)
        pod = Pod(spec, tmp_path / "auto", progress=False)
        assert pod.cpu_plan.eval_mode == "inline"  # with a fork, four cores give it a process
    finally:
        torch.set_num_threads(threads)
    assert pod_module.start_method(spec, pod.env) == "spawn"  # learners' and rollout workers'
    with pytest.raises(ValueError, match="eval_mode 'process' forks the pod, which is not safe here"):
        Pod(spec.model_copy(update={"eval_mode": "process"}), tmp_path / "process", progress=False)


def test_wide_is_the_mujoco_presets_and_not_the_classic_control_defaults():
    """The threshold between them, from the agents' own sizes: SAC's rl-zoo MuJoCo preset (256x256 twin
    critics, batch 256) is wide, SAC's and PPO's defaults on classic control are not."""
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    obs = gym.spaces.Box(-1.0, 1.0, (17,))
    sac_mujoco = SAC(obs, box, SACConfig(hidden_sizes=(256, 256), batch_size=256), 1, torch.device("cpu"))
    assert sac_mujoco.gradient_batch == 256 and sac_mujoco.widest_matmul == 256 * 2 * 256 * 256 >= WIDE_MATMUL
    sac_default = SAC(obs, box, SACConfig(), 1, torch.device("cpu"))
    assert sac_default.widest_matmul == 128 * 2 * 128 * 128 < WIDE_MATMUL
    ppo = PPO(obs, box, PPOConfig(num_steps=128, num_minibatches=4), 8, torch.device("cpu"))
    assert ppo.gradient_batch == 256 and ppo.widest_matmul == 256 * 64 * 64 < WIDE_MATMUL


def test_a_pod_applies_its_plan(tmp_path):
    threads = torch.get_num_threads()
    try:
        spec = PodSpec(
            env="Pendulum-v1",
            algo="sac",
            steps=1,
            torch_threads=3,
            hparams={"hidden_sizes": [256, 256], "batch_size": 256},
        )
        pod = Pod(spec, tmp_path / "run", progress=False)
        assert (pod.cpu_plan.threads, pod.cpu_plan.eval_mode) == (2, "process") and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_a_stochastic_score_depends_on_the_seed_alone(tmp_path):
    """eval_deterministic: false: the evaluator's draws came from a generator that earlier evaluations had
    advanced, so the same snapshot on the same seed scored differently each time (and across modes)."""
    spec = PodSpec(
        env="Pendulum-v1", algo="ppo", steps=512, eval_episodes=8, eval_deterministic=False, tensorboard=False,
        eval_mode="inline",
    )  # fmt: skip
    pod = Pod(spec, tmp_path / "run", progress=False)
    service = pod._evaluator_service(mode="inline")
    try:
        snapshot = Snapshot.of(pod.agent, 0, 0.0, seed=123)
        for _ in range(3):
            service.submit(snapshot)
        scores = {s.result.mean for s in service.results()}
        assert len(scores) == 1
    finally:
        service.close()
        pod._lock.release()


def test_a_stochastic_evaluation_does_not_draw_the_envs_initial_states_as_its_noise():
    """The evaluator seeded the policy's generator with the env's reset seed: CartPole draws its initial
    states as U(-0.05, 0.05) from a generator of that seed, and the policy's first Gumbel uniforms were the
    same numbers, so its first actions were a function of the initial states."""
    from podium.envs import make
    from podium.pod.evaluator import _Scorer

    n = 8
    env = make("CartPole-v1", num_envs=n, device="cpu")
    agent = PPO(env.single_observation_space, env.single_action_space, PPOConfig(), n, torch.device("cpu"))
    seen: dict[str, torch.Tensor] = {}
    act = agent.act

    def spy(obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if not seen:  # the evaluation's first call: obs is the initial state, and the policy draws next
            ahead = torch.Generator()
            ahead.set_state(agent.generator.get_state())
            seen["state"], seen["noise"] = obs.clone(), torch.rand((n, 2), generator=ahead)
        return act(obs, deterministic)

    agent.act = spy  # type: ignore[method-assign]
    scorer = _Scorer(lambda: (agent, Evaluator(env, deterministic=False), None), target=None, confirm_seed=0)
    scorer.score(agent.state_dict(), seed=100_000_777)
    state_as_uniforms = (seen["state"].T.flatten()[: 2 * n] + 0.05) / 0.1
    assert (state_as_uniforms - seen["noise"].flatten()).abs().max() > 0.1


def test_a_sigint_the_process_ignores_does_not_stop_the_pod(tmp_path):
    """`cmd &` in a shell script starts cmd ignoring SIGINT, so that Ctrl-C at the terminal stops the script,
    not its background jobs: a pod stopped on it anyway."""
    import podium.pod.pod as pod_module

    learn = pod_module.Learner.learn
    sent: list[int] = []

    def learn_and_signal(self, buffer, next_obs):  # the signal comes while the pod trains, its handlers set
        if not sent:
            os.kill(os.getpid(), signal.SIGINT)
            sent.append(1)
        return learn(self, buffer, next_obs)

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pod_module.Learner.learn = learn_and_signal
        spec = PodSpec(env="CartPole-v1", algo="ppo", seconds=3, tensorboard=False, eval_mode="inline")
        report = Pod(spec, tmp_path / "run", progress=False).run()
        assert sent and report.wall_time >= 2.5  # ran its budget
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        pod_module.Learner.learn = learn
        signal.signal(signal.SIGINT, previous)


def test_process_evaluation_is_refused_on_a_gpu():
    from podium.pod.pod import plan_cpu

    spec = PodSpec.model_construct(
        env="CartPole-v1", algo="ppo", device="cuda", eval_mode="process", torch_threads=None
    )
    with pytest.raises(ValueError, match="eval_mode 'process' forks the pod"):
        plan_cpu(spec, cores=4, widest_matmul=64, fork=True)
