"""Time to threshold: podium vs Stable-Baselines3, same machine, same run, median over seeds.

Tasks (threshold on the deterministic evaluation mean):
  * CartPole-v1 >= 475 with PPO,
  * Pendulum-v1 >= -200 with PPO,
  * Pendulum-v1 >= -200 with SAC.
Contestants per task and seed:
  * ``sb3``          SB3 with rl-zoo's tuned hyperparameters, gymnasium envs in a DummyVecEnv,
                     evaluated with ``evaluate_policy`` (10 episodes) every ``eval_every`` env steps;
  * ``podium``       podium's defaults on its tensor-native env, evaluated on 32 parallel episodes
                     every ``eval_every`` env steps (podium's own evaluator);
  * ``podium-gym``   podium's defaults on gymnasium's own env through ``GymVecEnv`` with the SAME
                     number of envs as SB3 (the algorithm's efficiency, apples to apples).
Each run stops when an evaluation reaches the threshold or at the time cap. Reported: wall-clock time
to threshold including evaluation time (``total``) and excluding it (``train``), env steps, and the
ratios SB3 / podium. Usage::

    python benchmarks/vs_sb3.py                      # 3 seeds, all tasks
    python benchmarks/vs_sb3.py --seeds 0,1,2,3,4 --tasks ppo-cartpole --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

import torch


@dataclass
class Run:
    contestant: str
    task: str
    seed: int
    reached: bool
    total: float | None  # wall-clock seconds to threshold, evaluations included
    train: float | None  # the same without evaluation time
    steps: int | None


TASKS = {
    "ppo-cartpole": ("CartPole-v1", "ppo", 475.0, 2_500),
    "ppo-pendulum": ("Pendulum-v1", "ppo", -200.0, 2_500),
    "sac-pendulum": ("Pendulum-v1", "sac", -200.0, 500),
}


SB3_NUM_ENVS = {"ppo-cartpole": 8, "ppo-pendulum": 4, "sac-pendulum": 1}  # rl-zoo's n_envs


def _linear(start: float):
    return lambda progress_remaining: progress_remaining * start


def sb3_model(task: str, seed: int):
    """SB3 with rl-baselines3-zoo's hyperparameters for the task (hyperparams/ppo.yml, sac.yml)."""
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env

    if task == "ppo-cartpole":
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=_linear(1e-3),
            clip_range=_linear(0.2),
            seed=seed,
            device="cpu",
        )
        return model, 100_000
    if task == "ppo-pendulum":
        env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=1024,
            gae_lambda=0.95,
            gamma=0.9,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            use_sde=True,
            sde_sample_freq=4,
            seed=seed,
            device="cpu",
        )
        return model, 100_000
    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    model = SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, device="cpu")
    return model, 20_000


def run_sb3(task: str, seed: int, cap: float) -> Run:
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    env_id, _, threshold, eval_every = TASKS[task]
    model, budget = sb3_model(task, seed)
    eval_env = gym.make(env_id)

    class ThresholdCallback(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = time.perf_counter()
            self.eval_time = 0.0
            self.next_eval = eval_every
            self.result: tuple[float, float, int] | None = None

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += eval_every
                t0 = time.perf_counter()
                mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=10, deterministic=True)
                self.eval_time += time.perf_counter() - t0
                total = time.perf_counter() - self.start
                if mean >= threshold:
                    self.result = (total, total - self.eval_time, self.num_timesteps)
                    return False
            return time.perf_counter() - self.start < cap

    callback = ThresholdCallback()
    model.learn(total_timesteps=budget, callback=callback)
    if callback.result is None:
        return Run("sb3", task, seed, False, None, None, None)
    total, train, steps = callback.result
    return Run("sb3", task, seed, True, total, train, steps)


def run_podium(task: str, seed: int, cap: float, gym_env: bool, n_envs: int | None) -> Run:
    import podium

    env_id, algo, threshold, eval_every = TASKS[task]
    with tempfile.TemporaryDirectory() as run_dir:
        report = podium.train(
            env_id,
            algo,
            target=threshold,
            seconds=cap,
            seed=seed,
            eval_every=eval_every,
            run_dir=run_dir,
            tensorboard=False,
            native_env=not gym_env,
            num_envs=n_envs if gym_env else None,
        )
    name = "podium-gym" if gym_env else "podium"
    if not report.reached_target:
        return Run(name, task, seed, False, None, None, None)
    return Run(name, task, seed, True, report.time_to_target, report.train_time_to_target, report.steps_to_target)


def median(values: list[float | None]) -> float | None:
    """Median where a run that never reached the threshold counts as +inf (None if most never did)."""
    vals = sorted(float("inf") if v is None else v for v in values)
    m = statistics.median(vals)
    return None if m == float("inf") else m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--cap", type=float, default=120.0, help="wall-clock cap per run, seconds")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads for SB3 (torch's default here)")
    parser.add_argument("--skip-gym", action="store_true", help="skip the podium-on-gymnasium-env runs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    tasks = args.tasks.split(",")
    import stable_baselines3

    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} (SB3: {args.threads} threads, "
    machine += "podium pods: their default, 1 thread on CPU), "
    machine += f"SB3 {stable_baselines3.__version__}"
    print(f"machine: {machine}")
    runs: list[Run] = []
    for task in tasks:
        sb3_envs = SB3_NUM_ENVS[task]
        for seed in seeds:
            for contestant in ("sb3", "podium", "podium-gym"):
                if contestant == "podium-gym" and args.skip_gym:
                    continue
                if contestant == "sb3":
                    torch.set_num_threads(args.threads)  # a pod sets its own thread count; restore SB3's
                    run = run_sb3(task, seed, args.cap)
                else:
                    run = run_podium(task, seed, args.cap, contestant == "podium-gym", sb3_envs)
                runs.append(run)
                shown = (
                    f"{run.total:.2f} s total / {run.train:.2f} s train, {run.steps} steps"
                    if run.reached
                    else "not reached"
                )
                print(f"  {task:<13} seed {seed} {contestant:<11} {shown}", flush=True)
    print()
    print(
        f"{'task':<13} {'contestant':<11} {'reached':>7} {'median total s':>15} {'median train s':>15} "
        f"{'median steps':>13} {'SB3/x total':>12} {'SB3/x train':>12}"
    )
    summary = []
    for task in tasks:
        rows = {c: [r for r in runs if r.task == task and r.contestant == c] for c in ("sb3", "podium", "podium-gym")}
        base_total = median([r.total for r in rows["sb3"]])
        base_train = median([r.train for r in rows["sb3"]])
        for contestant, rs in rows.items():
            if not rs:
                continue
            total, train = median([r.total for r in rs]), median([r.train for r in rs])
            steps = median([r.steps for r in rs])
            ratio_total = base_total / total if base_total and total else None
            ratio_train = base_train / train if base_train and train else None

            def f(v: float | None, fmt: str = ".2f") -> str:
                return format(v, fmt) if v is not None else "—"

            reached = f"{sum(r.reached for r in rs)}/{len(rs)}"
            print(
                f"{task:<13} {contestant:<11} {reached:>7} {f(total):>15} {f(train):>15} {f(steps, '.0f'):>13} "
                f"{f(ratio_total, '.1f') + 'x':>12} {f(ratio_train, '.1f') + 'x':>12}"
            )
            summary.append(
                {
                    "task": task,
                    "contestant": contestant,
                    "reached": reached,
                    "median_total_s": total,
                    "median_train_s": train,
                    "median_steps": steps,
                    "sb3_over_total": ratio_total,
                    "sb3_over_train": ratio_train,
                }
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine, "runs": [asdict(r) for r in runs], "summary": summary}, fh, indent=2)


if __name__ == "__main__":
    main()
