"""What evaluation costs a pod, by evaluator mode and core budget (same pod, same run).

For each core budget (the process's CPU affinity: 1 core, then all of them) and each ``eval_mode``
(``inline``, ``thread``, ``process``), one pod trains a fixed number of env steps with an evaluation
every ``--eval-every`` steps, and one without any evaluation during training (``none``: only the final
one) gives the baseline. Reported: wall-clock seconds, training throughput (env steps/s) and the
slow-down against the baseline on the same budget, evaluations done and seconds the evaluator spent.

    python benchmarks/evaluator.py                                   # PPO on CartPole, 100k steps
    python benchmarks/evaluator.py --env Pendulum-v1 --algo sac --steps 20000 --eval-every 2000
    python benchmarks/evaluator.py --eval-every 0      # each mode's default cadence (process: continuous)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from podium.machine import describe


def run(env: str, algo: str, steps: int, eval_every: int | None, mode: str) -> tuple[float, int, float]:
    from podium.config import PodSpec
    from podium.pod import Pod

    every = steps * 10 if mode == "none" else eval_every
    with tempfile.TemporaryDirectory() as tmp:
        spec = PodSpec(
            env=env,
            algo=algo,
            steps=steps,
            eval_every=every,
            eval_mode="inline" if mode == "none" else mode,
            tensorboard=False,
            seed=0,
        )
        pod = Pod(spec, tmp, progress=False)
        start = time.perf_counter()
        report = pod.run()
        return time.perf_counter() - start, len(report.curve), report.eval_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument(
        "--eval-every", type=int, default=5_000, help="env steps between evaluations; 0: the pod's default cadence"
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs per cell, round-robin; the median is reported")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    budgets = [cores[:1]] + ([cores] if len(cores) > 1 else [])
    print(f"machine: {describe()}")
    every = args.eval_every or None
    cadence = f"every {every:,} steps" if every else "at each mode's default cadence"
    print(f"{args.algo} on {args.env}: {args.steps:,} env steps, evaluation {cadence}")
    print(f"{'cores':>5} {'eval_mode':<9} {'wall s':>8} {'steps/s':>9} {'x baseline':>10} {'evals':>6} {'eval s':>7}")
    modes = ("none", "inline", "thread", "process")
    for budget in budgets:
        os.sched_setaffinity(0, budget)
        results: dict[str, list[tuple[float, int, float]]] = {m: [] for m in modes}
        for _ in range(args.repeats):  # round-robin: a machine that drifts affects every mode alike
            for mode in modes:
                results[mode].append(run(args.env, args.algo, args.steps, every, mode))
        base = sorted(results["none"])[args.repeats // 2][0]
        for mode in modes:
            wall, evals, eval_s = sorted(results[mode])[args.repeats // 2]  # the median run
            print(
                f"{len(budget):>5} {mode:<9} {wall:>8.2f} {args.steps / wall:>9,.0f} {wall / base:>9.2f}x "
                f"{evals:>6} {eval_s:>7.2f}",
                flush=True,
            )
    os.sched_setaffinity(0, cores)


if __name__ == "__main__":
    main()
