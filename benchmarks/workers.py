"""Pipelined rollout workers: a pod with W worker processes against the same pod stepping its env itself.

For envs that cannot be tensor-batched (gymnasium's own envs through the adapter), a pod with ``workers: W``
runs W processes that collect the next rollout while the learner learns on the previous one. This script
trains the same pod (``podium.train(env, algo, target=..., native_env=False)``, podium's defaults) with
``workers`` = 0 (no worker process: the pod steps its env between learning phases) and each W in
``--workers``, over ``--seeds``, round-robin so that a drifting machine affects every setting alike, and
prints per setting:

* env steps per second over the whole run (``report.steps / report.wall_time``, evaluation included);
* how many runs confirmed ``--target`` (the pod's own confirmation: the policy re-scored on 100 fresh
  episodes), and the median and worst confirmed time to it (a run that did not confirm counts as the
  whole budget in the worst column).

    python benchmarks/workers.py                               # PPO on gymnasium's Pendulum-v1, W = 0, 1
    python benchmarks/workers.py --algo sac --workers 1,2
    python benchmarks/workers.py --env HalfCheetah-v5 --algo sac --target 3000 --seconds 1800 \
        --num-envs 8 --workers 1,2,4,8
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from podium.machine import describe


def run(args: argparse.Namespace, workers: int, seed: int) -> dict[str, float | None]:
    import podium

    with tempfile.TemporaryDirectory() as tmp:
        report = podium.train(
            args.env,
            args.algo,
            target=args.target,
            seconds=args.seconds,
            workers=workers,
            native_env=False,
            **({"num_envs": args.num_envs} if args.num_envs else {}),
            seed=seed,
            tensorboard=False,
            run_dir=os.path.join(tmp, "pod"),
            progress=False,
        )
    return {
        "steps_per_s": report.steps / report.wall_time,
        "time_to_target": report.time_to_target if report.reached_target else None,
        "score": report.score_mean,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--seconds", type=float, default=60.0, help="budget of each run")
    parser.add_argument("--workers", default="1", help="rollout-worker counts to compare with 0")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--num-envs", type=int, default=None, help="sub-envs (default: the preset's)")
    args = parser.parse_args()
    settings = [0, *(int(w) for w in args.workers.split(",") if int(w) > 0)]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"machine: {describe()}")
    print(f"{args.algo} on gymnasium's {args.env}, target {args.target}, {args.seconds:g} s per run, seeds {seeds}")
    rows: dict[int, list[dict[str, float | None]]] = {w: [] for w in settings}
    for seed in seeds:
        for workers in settings:
            result = run(args, workers, seed)
            rows[workers].append(result)
            print(f"  workers={workers} seed {seed}: {result}", flush=True)
    print("\n| workers | env steps/s | speed-up | confirmed | median time to target (s) | worst (s) |")
    print("|---:|---:|---:|---:|---:|---:|")
    base = statistics.median(r["steps_per_s"] for r in rows[0])
    for workers in settings:
        runs = rows[workers]
        rate = statistics.median(r["steps_per_s"] for r in runs)
        times = [r["time_to_target"] for r in runs]
        hit = [t for t in times if t is not None]
        med = f"{statistics.median(hit):.1f}" if hit else "-"
        worst = f"{max(t if t is not None else args.seconds for t in times):.1f}" + (
            "" if len(hit) == len(times) else " (miss)"
        )
        print(f"| {workers} | {rate:,.0f} | {rate / base:.2f}x | {len(hit)}/{len(times)} | {med} | {worst} |")


if __name__ == "__main__":
    main()
