"""Pods on a GPU: the same ``podium.train`` on ``cuda`` and on the CPU, in one run.

Two tables:

* **target** — time to a *confirmed* threshold (the protocol of benchmarks/vs_sb3.py: podium's own
  confirmation stops the pod, then this script re-scores the saved policy on 100 episodes of gymnasium's env
  with seeds 10,000-10,099 and counts the run only if it holds) for each task of ``--tasks`` (vs_sb3.py's), on
  each device of ``--devices``, at podium's preset number of sub-envs and at each of ``--num-envs``. Nothing
  else differs from ``podium.train(env, algo, target=T, seed=s, device=D[, num_envs=N])``.
* **throughput** — env steps per second of a whole PPO pod (collecting, learning, evaluating beside) on
  Pendulum-v1 with N sub-envs (``--sizes``) for ``--seconds`` seconds on each device: the pod's steps over its
  wall-clock. PPO's preset sets its rollout by total size (2,048), so with N sub-envs a rollout is
  ``max(1, 2048 / N)`` steps of each; a pod of 64k sub-envs learns from a rollout of 64k transitions.

Usage (the GPU machine; ``benchmarks/gpu.sh`` runs it with the other GPU figures)::

    python benchmarks/gpu_pods.py                                   # cuda and cpu, 3 seeds
    python benchmarks/gpu_pods.py --devices cpu --seeds 0 --sizes 64 --tasks ppo-pendulum   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from podium.machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_sb3 import TASKS, run_podium, summarise, warm_up


@dataclass
class TargetRun:
    task: str
    device: str
    num_envs: int | None  # None: the preset's
    seed: int
    reached: bool
    seconds: float | None
    steps: int | None
    fresh: float | None
    note: str = ""


def target_run(task: str, device: str, num_envs: int | None, seed: int, cap: float) -> TargetRun:
    r = run_podium(task, seed, cap, gym_env=False, n_envs=None, device=device, num_envs=num_envs)
    return TargetRun(task, device, num_envs, seed, r.reached, r.seconds, r.steps, r.fresh_score, r.note)


def throughput(device: str, num_envs: int, seconds: float) -> tuple[float, int]:
    """(env steps/s, steps) of a PPO pod on Pendulum-v1 with ``num_envs`` sub-envs for ``seconds``."""
    import podium

    with tempfile.TemporaryDirectory() as tmp:
        report = podium.train(
            "Pendulum-v1", "ppo", seconds=seconds, num_envs=num_envs, device=device, seed=0,
            run_dir=os.path.join(tmp, "run"), progress=False, tensorboard=False,
        )  # fmt: skip
    return report.steps / report.wall_time, report.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="cuda,cpu")
    parser.add_argument("--tasks", default="ppo-pendulum,sac-pendulum,ppo-cartpole")
    parser.add_argument("--num-envs", default="1024", help="sub-envs to try besides the preset's (PPO tasks only)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--cap", type=float, default=60.0, help="wall-clock cap per target run, seconds")
    parser.add_argument("--sizes", default="64,1024,16384,65536", help="throughput: sub-envs of the PPO pod")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput: seconds per pod")
    parser.add_argument("--parts", default="target,throughput")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    devices = [d for d in args.devices.split(",") if d]
    if "cuda" in devices and not torch.cuda.is_available():
        raise SystemExit("error: --devices has cuda but torch sees no GPU here; use --devices cpu")
    seeds = [int(s) for s in args.seeds.split(",")]
    unknown = [t for t in args.tasks.split(",") if t and t not in TASKS]
    if unknown:
        raise SystemExit(f"error: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"machine: {describe()}; GPU: {gpu}", flush=True)
    warm_up()
    if "cuda" in devices:  # CUDA's start-up (context, cuBLAS, the fused Adam kernel) before any timed run
        layer = torch.nn.Linear(8, 8).cuda()
        adam = torch.optim.Adam(layer.parameters(), fused=True)
        layer(torch.randn(64, 8, device="cuda")).square().mean().backward()
        adam.step()
        torch.cuda.synchronize()
    parts = set(args.parts.split(","))
    runs: list[TargetRun] = []
    rates: list[dict[str, float | int | str]] = []

    def save() -> None:  # after every run: a step stopped at its time limit keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                found = {"target": [asdict(r) for r in runs], "throughput": rates}
                json.dump({"machine": describe(), "gpu": gpu, **found}, f)

    if "target" in parts:
        for task in [t for t in args.tasks.split(",") if t]:
            sizes: list[int | None] = [None]
            if TASKS[task][1] == "ppo":
                sizes += [int(n) for n in args.num_envs.split(",") if n]
            for num_envs in sizes:
                for device in devices:
                    for seed in seeds:
                        run = target_run(task, device, num_envs, seed, args.cap)
                        runs.append(run)
                        save()
                        shown = f"{run.seconds:.2f} s, {run.steps} steps" if run.reached else "not reached"
                        fresh = f", fresh {run.fresh:.1f}" if run.fresh is not None else ""
                        print(f"  {task:<13} {device:<5} envs {num_envs or 'preset'!s:<7} seed {seed} "
                              f"{shown}{fresh} {run.note}", flush=True)  # fmt: skip
    if "throughput" in parts:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            for device in devices:
                sps, steps = throughput(device, n, args.seconds)
                rates.append({"device": device, "num_envs": n, "steps_per_s": sps, "steps": steps})
                save()
                print(f"  throughput ppo Pendulum-v1 {device:<5} {n:>7} sub-envs: {sps:,.0f} steps/s", flush=True)
    print()
    if runs:
        print(f"{'task':<13} {'device':<6} {'sub-envs':>8} {'reached':>7} {'median s':>9} {'worst s':>9} {'steps':>9}")
        for key in dict.fromkeys((r.task, r.num_envs, r.device) for r in runs):
            rs = [r for r in runs if (r.task, r.num_envs, r.device) == key]
            med, worst = summarise([r.seconds for r in rs])
            steps = statistics.median([r.steps for r in rs if r.reached] or [0])
            cells = [f"{v:.2f}" if v is not None else "—" for v in (med, worst)]
            print(f"{key[0]:<13} {key[2]:<6} {key[1] or 'preset'!s:>8} {sum(r.reached for r in rs)}/{len(rs):<5} "
                  f"{cells[0]:>9} {cells[1]:>9} {steps:>9,.0f}")  # fmt: skip
    if rates:
        print(f"\n{'PPO pod, Pendulum-v1':<22} " + " ".join(f"{d + ' steps/s':>16}" for d in devices))
        for n in dict.fromkeys(r["num_envs"] for r in rates):
            row = {r["device"]: r["steps_per_s"] for r in rates if r["num_envs"] == n}
            print(f"{n:>13,} sub-envs " + " ".join(f"{row[d]:>16,.0f}" for d in devices))


if __name__ == "__main__":
    main()
