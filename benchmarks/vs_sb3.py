"""Time to a *confirmed* threshold: podium vs Stable-Baselines3, same machine, same run, 5 seeds.

Tasks (threshold on the mean return of the deterministic policy):
  * ``ppo-cartpole``  CartPole-v1 >= 475 with PPO,
  * ``ppo-pendulum``  Pendulum-v1 >= -200 with PPO,
  * ``sac-pendulum``  Pendulum-v1 >= -200 with SAC.

Contestants, per task and seed, one after another in this process:
  * ``sb3``         SB3 with rl-baselines3-zoo's tuned hyperparameters, gymnasium envs in a DummyVecEnv
                    with rl-zoo's number of envs, on each torch thread count of ``--threads`` (default 1
                    and 2; each ratio column compares with SB3's better setting for it: the faster
                    median, the better worst seed). After every policy update (PPO: every rollout; SAC,
                    which updates every step: every 100 steps) it is evaluated on 10 episodes
                    (``evaluate_policy``); when that mean reaches the threshold the clock stops and the
                    model is confirmed on 100 episodes of its own (the k-th try: seeds
                    ``SB3_CONFIRM_SEED + 100 k``, apart from the yardstick's); if their mean reaches the
                    threshold the run is done, else the clock restarts and training goes on. SB3's time
                    is its **training time only**:
                    its evaluations and confirmations are not counted (a free evaluator that looks after
                    every update: a favourable reading for SB3).
  * ``podium``      exactly what ``podium.train(env, algo, target=threshold, seed=seed)`` does, with
                    podium's public defaults (presets, evaluation cadence, evaluator service, its own
                    confirmation on 100 episodes), on podium's tensor-native env. Its time is
                    everything from building the pod to the confirmation that stops it.
  * ``podium-gym``  the same on gymnasium's own env through ``GymVecEnv`` with SB3's number of envs.

Every run that stops is then scored once by this script on 100 episodes of gymnasium's own env with
seeds 10,000-10,099, which no contestant's training, evaluation or confirmation uses (SB3: its model;
podium: the saved policy ``podium.load(run_dir)``). Only a run whose policy scores at or above the
threshold there counts; any other run (or one that hits ``--cap``) counts as not reached.

Reported per task and contestant: success count, median and worst time to the confirmed threshold,
median env steps, and the ratios SB3 / contestant (median to median, worst to worst). Usage::

    python benchmarks/vs_sb3.py                               # 5 seeds, all tasks
    python benchmarks/vs_sb3.py --seeds 0,1,2 --tasks ppo-cartpole --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from podium.machine import describe

FRESH_SEED = 10_000
FRESH_EPISODES = 100
SB3_CONFIRM_SEED = 20_000
"""SB3's k-th confirmation plays seeds ``SB3_CONFIRM_SEED + 100 k`` onwards: never the yardstick's
(``FRESH_SEED``), which would make the final score the very test it had already passed."""


@dataclass
class Run:
    contestant: str
    task: str
    seed: int
    reached: bool
    seconds: float | None  # time to the confirmed threshold (see the module docstring)
    steps: int | None  # env steps of the policy that confirmed
    fresh_score: float | None  # this script's score of that policy on 100 fresh gymnasium episodes
    note: str = ""


# task: (env id, algorithm, threshold, SB3's evaluation interval in env steps)
TASKS = {  # env, algorithm, threshold, env steps between two screens of SB3 (one per policy update)
    "ppo-cartpole": ("CartPole-v1", "ppo", 475.0, 256),  # rl-zoo: 8 envs x 32 steps per rollout
    "ppo-pendulum": ("Pendulum-v1", "ppo", -200.0, 4_096),  # 4 envs x 1,024
    "sac-pendulum": ("Pendulum-v1", "sac", -200.0, 100),  # an update every step: screened every 100
}
SB3_NUM_ENVS = {"ppo-cartpole": 8, "ppo-pendulum": 4, "sac-pendulum": 1}  # rl-zoo's n_envs


# ----------------------------------------------------------------------------- the common yardstick
def fresh_score(act: Callable[[np.ndarray], np.ndarray], env_id: str, first_seed: int = FRESH_SEED) -> float:
    """Mean return of ``act`` (batched numpy in, numpy out) over ``FRESH_EPISODES`` episodes of
    gymnasium's ``env_id``, episode ``i`` reset with seed ``first_seed + i``; one episode per env."""
    import gymnasium as gym

    envs = [gym.make(env_id) for _ in range(FRESH_EPISODES)]
    obs = np.stack([env.reset(seed=first_seed + i)[0] for i, env in enumerate(envs)])
    returns = np.zeros(len(envs))
    active = np.ones(len(envs), dtype=bool)
    while active.any():
        idx = np.flatnonzero(active)
        actions = act(obs[idx])
        for j, i in enumerate(idx):
            o, r, terminated, truncated, _ = envs[i].step(actions[j])
            obs[i], returns[i] = o, returns[i] + r
            active[i] = not (terminated or truncated)
    for env in envs:
        env.close()
    return float(returns.mean())


def warm_up() -> None:
    """Pay the one-time imports before any timed run, for every contestant alike: the first optimiser
    built in a process imports ``torch._dynamo`` (about 1.5 s here), the first plot matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


# ----------------------------------------------------------------------------- SB3
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


def sb3_confirmed(
    model,
    task: str,
    seed: int,
    env_id: str,
    threshold: float,
    budget: int,
    eval_every: int,
    cap: float,
    screen: Callable[[], float],
    act: Callable[[np.ndarray], np.ndarray],
    start: float,
) -> Run:
    """Train an SB3 ``model`` until a *confirmed* threshold: when a rollout starts (right after a policy
    update) and ``eval_every`` steps have passed since the last screen, ``screen()`` scores it; at or above
    ``threshold`` the policy ``act`` is confirmed on 100 episodes of its own (``SB3_CONFIRM_SEED``), and
    training ends if they do; the yardstick (:func:`fresh_score`) then scores that policy once, and only a
    score at or above ``threshold`` there counts. The clock (from ``start``) excludes evaluations and
    confirmations; training stops at ``budget`` steps or ``cap`` seconds of training."""
    from stable_baselines3.common.callbacks import BaseCallback

    class ConfirmedThreshold(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.paused = 0.0  # seconds of evaluation and confirmation, not counted
            self.next_eval = eval_every
            self.result: tuple[float, int] | None = None
            self.tries = 0
            self.last_confirmation: float | None = None

        def _on_rollout_start(self) -> None:  # SB3 calls it after each update, before collecting again
            if self.result is not None or self.num_timesteps < self.next_eval:
                return
            while self.next_eval <= self.num_timesteps:
                self.next_eval += eval_every
            t0 = time.perf_counter()
            if screen() >= threshold:
                score = fresh_score(act, env_id, SB3_CONFIRM_SEED + FRESH_EPISODES * self.tries)
                self.tries += 1
                self.last_confirmation = score
                if score >= threshold:
                    self.result = (t0 - start - self.paused, self.num_timesteps)
                    return
            self.paused += time.perf_counter() - t0

        def _on_step(self) -> bool:
            return self.result is None and time.perf_counter() - start - self.paused < cap

    callback = ConfirmedThreshold()
    model.learn(total_timesteps=budget, callback=callback)
    if callback.result is None:
        last = callback.last_confirmation
        note = f"last failed confirmation {last:.1f}" if last is not None else ""
        return Run("sb3", task, seed, False, None, None, None, note)
    seconds, steps = callback.result
    score = fresh_score(act, env_id)
    if score < threshold:
        return Run("sb3", task, seed, False, None, steps, score, f"fresh {score:.1f}")
    return Run("sb3", task, seed, True, seconds, steps, score)


def run_sb3(task: str, seed: int, cap: float) -> Run:
    import gymnasium as gym
    from stable_baselines3.common.evaluation import evaluate_policy

    env_id, _, threshold, eval_every = TASKS[task]
    start = time.perf_counter()
    model, budget = sb3_model(task, seed)
    eval_env = gym.make(env_id)
    eval_env.reset(seed=seed + 5_000)  # routine evaluations: seeds apart from the fresh ones

    def screen() -> float:
        return evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)[0]

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    return sb3_confirmed(model, task, seed, env_id, threshold, budget, eval_every, cap, screen, act, start)


# ----------------------------------------------------------------------------- podium
def run_podium(
    task: str,
    seed: int,
    cap: float,
    gym_env: bool,
    n_envs: int | None,
    device: str = "cpu",
    num_envs: int | None = None,
) -> Run:
    """podium on ``task``: gymnasium's env with ``n_envs`` copies (``gym_env``), else podium's tensor env with
    the preset's sub-envs or ``num_envs``; on ``device`` (benchmarks/gpu_pods.py: ``cuda``)."""
    import podium
    from podium.api import make_spec
    from podium.pod import Pod

    env_id, algo, threshold, _ = TASKS[task]
    name = "podium-gym" if gym_env else "podium"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        start = time.perf_counter()
        # exactly what podium.train(env_id, algo, target=threshold, seed=seed, seconds=cap) does
        fields: dict[str, object] = {"native_env": False, "num_envs": n_envs} if gym_env else {}
        if num_envs and not gym_env:
            fields["num_envs"] = num_envs
        if device != "cpu":
            fields["device"] = device
        spec = make_spec(None, env=env_id, algo=algo, target=threshold, seed=seed, seconds=cap, **fields)
        pod = Pod(spec, run_dir, progress=False)
        setup = time.perf_counter() - start
        report = pod.run()
        if not report.reached_target or report.time_to_target is None:
            return Run(name, task, seed, False, None, None, None, f"best {report.score_mean:.1f} in {cap:.0f} s")
        policy = podium.load(run_dir)
        score = fresh_score(policy.act, env_id)
    seconds = setup + report.time_to_target
    if score < threshold:
        return Run(name, task, seed, False, None, report.steps_to_target, score, f"fresh {score:.1f}")
    return Run(name, task, seed, True, seconds, report.steps_to_target, score)


# ----------------------------------------------------------------------------- summary
def summarise(values: list[float | None]) -> tuple[float | None, float | None]:
    """(median, worst) where a run that did not reach the threshold counts as +inf (None when infinite)."""
    vals = sorted(float("inf") if v is None else v for v in values)
    med, worst = statistics.median(vals), vals[-1]
    return (None if med == float("inf") else med), (None if worst == float("inf") else worst)


def sb3_bases(peers: dict[str, list[Run]]) -> tuple[float | None, float | None, str, str]:
    """The ratios' bases from SB3's runs at each thread count (``{contestant: runs}``): each column against
    SB3's better setting for it, the faster median and the better worst seed (they may differ; a miss counts
    as never). Returns ``(median, worst, contestant of the median, contestant of the worst)``."""
    stats = {c: [math.inf if v is None else v for v in summarise([r.seconds for r in rs])] for c, rs in peers.items()}
    by_median = min(stats, key=lambda c: stats[c])
    by_worst = min(stats, key=lambda c: stats[c][::-1])
    med, worst = stats[by_median][0], stats[by_worst][1]
    return (None if med == math.inf else med), (None if worst == math.inf else worst), by_median, by_worst


def _f(v: float | None, fmt: str = ".2f") -> str:
    return format(v, fmt) if v is not None else "—"


def main() -> None:
    if importlib.util.find_spec("stable_baselines3") is None:
        raise SystemExit('error: this benchmark needs Stable-Baselines3, the "bench" extra: pip install -e ".[bench]"')
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--cap", type=float, default=180.0, help="wall-clock cap per run, seconds")
    parser.add_argument(
        "--threads", default="1,2", help="torch intra-op thread counts to run SB3 with (the faster one is compared)"
    )
    parser.add_argument("--skip-gym", action="store_true", help="skip the podium-on-gymnasium-env runs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    warm_up()
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"error: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    import stable_baselines3

    threads = [int(t) for t in args.threads.split(",")]
    sb3 = f"SB3 {stable_baselines3.__version__} on {' and '.join(map(str, threads))} threads"
    machine = f"{describe()}, {sb3}; podium pods: their defaults"
    print(f"machine: {machine}", flush=True)
    peers = [f"sb3-{t}t" for t in threads]
    contestants = [*peers, "podium"] + ([] if args.skip_gym else ["podium-gym"])
    runs: list[Run] = []
    for task in tasks:
        for seed in seeds:
            for contestant in contestants:
                if contestant in peers:
                    torch.set_num_threads(threads[peers.index(contestant)])  # a pod sets its own count
                    run = replace(run_sb3(task, seed, args.cap), contestant=contestant)
                else:
                    run = run_podium(task, seed, args.cap, contestant == "podium-gym", SB3_NUM_ENVS[task])
                runs.append(run)
                shown = f"{run.seconds:.2f} s, {run.steps} steps" if run.reached else "not reached"
                fresh = f", fresh {run.fresh_score:.1f}" if run.fresh_score is not None else ""
                print(f"  {task:<13} seed {seed} {contestant:<11} {shown}{fresh} {run.note}", flush=True)
    print()
    header = (
        f"{'task':<13} {'contestant':<11} {'reached':>7} {'median s':>9} {'worst s':>9} {'median steps':>12} "
        f"{'SB3/x median':>12} {'SB3/x worst':>11}"
    )
    print(header)
    summary = []
    for task in tasks:
        rows = {c: [r for r in runs if r.task == task and r.contestant == c] for c in contestants}
        base_med, base_worst, by_median, by_worst = sb3_bases({c: rows[c] for c in peers})
        print(f"{task}: SB3's faster median is {by_median}'s, its better worst seed {by_worst}'s")
        for contestant, rs in rows.items():
            med, worst = summarise([r.seconds for r in rs])
            steps, _ = summarise([r.steps if r.reached else None for r in rs])
            ratio_med = base_med / med if base_med and med else None
            ratio_worst = base_worst / worst if base_worst and worst else None
            reached = f"{sum(r.reached for r in rs)}/{len(rs)}"
            print(
                f"{task:<13} {contestant:<11} {reached:>7} {_f(med):>9} {_f(worst):>9} {_f(steps, '.0f'):>12} "
                f"{_f(ratio_med, '.1f') + 'x':>12} {_f(ratio_worst, '.1f') + 'x':>11}"
            )
            summary.append(
                {
                    "task": task,
                    "contestant": contestant,
                    "reached": reached,
                    "median_s": med,
                    "worst_s": worst,
                    "median_steps": steps,
                    "sb3_over_median": ratio_med,
                    "sb3_over_worst": ratio_worst,
                }
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine, "runs": [asdict(r) for r in runs], "summary": summary}, fh, indent=2)


if __name__ == "__main__":
    main()
