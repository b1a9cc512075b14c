"""Scaling: what more pods (a tournament's pool) and more learners (inside one pod) buy on this machine.

Two tables, each row a median over ``--seeds``:

* **pods** — a tournament (process backend, one algorithm, rounds of ``--round`` seconds) with a pool of
  exactly P pods, P in ``--pods`` (default 1, 2, 4, ... up to the cores): env steps per second of all pods
  together (the steps of every finished round over the tournament's wall-clock), the speed-up and
  efficiency (``steps/s(P) / (P * steps/s(1))``) against P = 1, and the time until the leaderboard holds a
  policy at or above ``--target`` (its selection score: the best snapshot re-scored on fresh episodes; the
  tournament stops there).
* **learners** — one pod (``podium.train`` with podium's defaults) with K learners, K in ``--learners``:
  each learner has its own workers and sub-envs and the learners average their parameters after every
  update epoch, so K learners learn from K times the samples. Reported: samples learned per second
  (``steps / wall``: the pod's steps count every learner's), the speed-up over K = 1, and the confirmed
  time to ``--target`` (``report.time_to_target``; a run that did not confirm counts as not reached).

Every run uses podium's public defaults apart from the pool size, the learner count and the budget. On a
GPU machine, ``--device cuda`` runs the pods there (``pool.gpus_per_pod = 1 / P``: they share the GPU).

    python benchmarks/scaling.py                                   # SAC on Pendulum, both tables
    python benchmarks/scaling.py --part learners --algo ppo --learners 1,2
    python benchmarks/scaling.py --pods 1,2,4,8,16 --device cuda   # the GPU machine (16 cores, one GPU)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time

from podium.machine import describe


def pods_row(args: argparse.Namespace, pods: int, seed: int) -> dict[str, float | None]:
    from podium.tournament import tournament

    pod = {"seconds": args.round, "tensorboard": False, "device": args.device}
    pool = {"min": pods, "max": pods, "cpus_per_pod": 1}
    if args.device != "cpu":
        pool["gpus_per_pod"] = 1.0 / pods
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        report = tournament(
            run_dir=os.path.join(tmp, "t"),
            progress=False,
            env=args.env,
            algos={args.algo: 1},
            seconds=args.seconds,
            target=args.target,
            pod=pod,
            pool=pool,
            backend="process",
            seed=seed,
        )
        wall = time.perf_counter() - start
        return {
            "steps_per_s": report.total_steps / wall,
            "time_to_target": report.time_to_target if report.reached_target else None,
            "best": report.champion.score_mean if report.champion else None,
        }


def learners_row(args: argparse.Namespace, learners: int, seed: int) -> dict[str, float | None]:
    import podium

    with tempfile.TemporaryDirectory() as tmp:
        report = podium.train(
            args.env,
            args.algo,
            target=args.target,
            seconds=args.seconds,
            learners=learners,
            seed=seed,
            device=args.device,
            tensorboard=False,
            run_dir=os.path.join(tmp, "pod"),
            progress=False,
        )
        return {
            "steps_per_s": report.steps / report.wall_time,  # report.steps counts every learner's samples
            "time_to_target": report.time_to_target if report.reached_target else None,
            "best": report.score_mean,
        }


def table(name: str, sizes: list[int], rows: dict[int, list[dict[str, float | None]]]) -> None:
    what = "env steps/s (all pods)" if name == "pods" else "samples learned/s"
    print(f"\n| {name} | {what} | speed-up | efficiency | reached | median time to target (s) | worst (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for size in sizes:
        runs = rows[size]
        rate = statistics.median(r["steps_per_s"] for r in runs)
        base = base or rate / sizes[0]
        times = [r["time_to_target"] for r in runs]
        hit = [t for t in times if t is not None]
        counted = sorted(math.inf if t is None else t for t in times)  # a miss is never reached, not the budget
        middle = statistics.median(counted)
        med = f"{middle:.1f}" if math.isfinite(middle) else "not reached"
        worst = f"{counted[-1]:.1f}" if math.isfinite(counted[-1]) else "not reached"
        print(
            f"| {size} | {rate:,.0f} | {rate / (base * sizes[0]):.2f}x | {rate / (base * size):.2f} | "
            f"{len(hit)}/{len(times)} | {med} | {worst} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = len(os.sched_getaffinity(0))
    doubling = [p for p in (1, 2, 4, 8, 16) if p <= cores]
    parser.add_argument("--part", choices=("pods", "learners", "both"), default="both")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--algo", default="sac")
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--seconds", type=float, default=60.0, help="budget of each run")
    parser.add_argument("--round", type=float, default=10.0, help="seconds per tournament round")
    parser.add_argument("--pods", default=",".join(map(str, doubling)))
    parser.add_argument("--learners", default=",".join(map(str, [k for k in (1, 2, 4) if k <= cores])))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"machine: {describe()}")
    print(f"{args.algo} on {args.env}, target {args.target}, {args.seconds:g} s per run, seeds {seeds}")
    for part, sizes_text, run in (("pods", args.pods, pods_row), ("learners", args.learners, learners_row)):
        if args.part not in (part, "both"):
            continue
        sizes = [int(s) for s in sizes_text.split(",")]
        rows: dict[int, list[dict[str, float | None]]] = {size: [] for size in sizes}
        for seed in seeds:  # round-robin over sizes: a machine that drifts affects every size alike
            for size in sizes:
                result = run(args, size, seed)
                rows[size].append(result)
                print(f"  {part}={size} seed {seed}: {result}", flush=True)
        table(part, sizes, rows)


if __name__ == "__main__":
    main()
