"""Continuous PPO still learns: a short Pendulum run in the default suite (the full -200 run is ``slow``).

Pendulum's preset (64 sub-envs, rollouts of 2,048 steps) takes the return at the first evaluation (4,096
steps: about -860 to -1,320 on seeds 0-3) to between -116 and -174 in 32,768 steps (2 to 4 s on one CPU
core). The first evaluation comes after two rollouts because the preset learns fast: after four, seed 0
already scored -901. The thresholds below leave a wide margin: a policy that no longer learns stays near
-1,000 or below.
"""

from __future__ import annotations

import podium

STEPS = 32_768


def test_ppo_learns_pendulum_in_a_short_run(tmp_path):
    report = podium.train(
        "Pendulum-v1",
        "ppo",
        steps=STEPS,
        seed=0,
        run_dir=tmp_path,
        eval_every=STEPS // 8,
        eval_episodes=16,
        tensorboard=False,
        progress=False,
        torch_threads=1,
    )
    first, last = report.curve[0]["eval_mean"], report.curve[-1]["eval_mean"]
    assert report.steps == STEPS and len(report.curve) == 8
    assert first < -900  # it started from a policy that cannot swing up
    assert last > -500 and last - first > 500, [round(row["eval_mean"]) for row in report.curve]


def test_ppo_preset_swings_mountain_car_continuous_up_to_the_flag(tmp_path):
    """The task PPO had no setting for: its preset (gSDE with sigma 1 held for 256-step rollouts on 64
    sub-envs) reaches the flag in the first rollout or two on every seed measured (BENCHMARKS.md), so a run
    with a target stops at a *confirmed* 90 within 4 rollouts. A PPO that explores with white noise, or
    forgets the preset, stays at "do nothing" (return about 0) for far longer than that."""
    report = podium.train(
        "MountainCarContinuous-v0",
        "ppo",
        target=90,
        steps=4 * 64 * 256,
        seed=0,
        run_dir=tmp_path,
        tensorboard=False,
        progress=False,
    )
    assert report.reached_target, [round(row["eval_mean"], 1) for row in report.curve]
    assert report.steps_to_target <= 4 * 64 * 256
