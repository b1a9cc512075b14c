"""What an evaluation of N episodes costs through gymnasium's adapter: every copy stepped until the longest
episode ends (podium before ``VecEnv.step_active``), or only the copies whose episode goes on (now).

For each saved policy (``best.pt`` under the run directories given: a pod's, or a tournament's, e.g. one kept by
``tournament_vs_single.py --keep``) the script scores ``--episodes`` episodes of the policy's env both ways,
alternating, ``--repeats`` times each, with the same seeds, and counts the env steps each way took. The
scores are the same either way (checked); the steps and seconds are what changes.

    python benchmarks/eval_active.py /tmp/podium-tvs-lunar-tournament-s0-*/run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from podium.machine import describe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", help="directories searched for checkpoints/best.pt")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args()

    import podium
    from podium.envs import GymVecEnv
    from podium.pod import Evaluator

    torch.set_num_threads(1)
    paths = sorted(p for d in args.run_dirs for p in Path(d).glob("**/checkpoints/best.pt"))
    if not paths:
        sys.exit(f"no checkpoints/best.pt under {', '.join(args.run_dirs)}")
    print(f"machine: {describe()}")
    print(f"{args.episodes} episodes per evaluation, {args.repeats} of each way, alternating, 1 torch thread")
    header = ("policy", "algo", "mean", "steps all", "steps active", "s all", "s active")
    print("{:48s} {:5s} {:>8s} {:>10s} {:>12s} {:>6s} {:>8s}".format(*header))
    active_step = GymVecEnv.step_active
    envs: dict[str, GymVecEnv] = {}
    counted = [0]  # gymnasium steps taken, copy by copy

    def counting(step):
        def counted_step(action):
            counted[0] += 1
            return step(action)

        return counted_step

    for path in paths:
        policy = podium.load(path)
        name = policy.spec.env
        if name not in envs:
            envs[name] = GymVecEnv(name, num_envs=args.episodes, vectorization="sync")
            for copy in envs[name].vector_env.envs:
                copy.step = counting(copy.step)
        env = envs[name]
        seconds: dict[str, list[float]] = {"all": [], "active": []}
        steps, scores = {}, {}
        for _ in range(args.repeats):
            for way in ("all", "active"):
                GymVecEnv.step_active = (lambda self, a, m: self.step(a)) if way == "all" else active_step
                counted[0] = 0
                start = time.perf_counter()
                result = Evaluator(env).evaluate(policy.agent, seed=args.seed)
                seconds[way].append(time.perf_counter() - start)
                steps[way], scores[way] = counted[0], result.returns
        GymVecEnv.step_active = active_step
        if scores["all"] != scores["active"]:
            sys.exit(f"{path}: the two ways gave different scores")
        mean = statistics.fmean(scores["all"])
        label = str(path.parent.parent)[-48:]
        print(
            f"{label:48s} {policy.agent.name:5s} {mean:8.1f} {steps['all']:10,d} {steps['active']:12,d} "
            f"{statistics.median(seconds['all']):6.2f} {statistics.median(seconds['active']):8.2f}"
        )
    for env in envs.values():
        env.close()


if __name__ == "__main__":
    main()
