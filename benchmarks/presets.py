"""The per-env presets, measured by the confirmed protocol: one command per table row of BENCHMARKS.md.

For each (algorithm, env) pair and seed, two runs with podium's public defaults (the preset, unless
``--hparams``/``--num-envs`` try another setting):

* **time to target**: ``podium.train(env, algo, target=T, seed=s, seconds=cap)``; it counts only when
  the pod's own confirmation (100 fresh episodes) passed *and* this script's score of the saved policy on
  100 episodes of gymnasium's own env (seeds 10,000-10,099) reaches ``T`` too;
* **stays there**: ``podium.train(env, algo, steps=budget, seed=s)`` with no target; the *final* policy
  (``last.pt``) is scored the same way. A preset that reaches the target and then drifts away fails here.

Usage::

    python benchmarks/presets.py --pairs ppo:CartPole-v1              # the row of one preset, 5 seeds
    python benchmarks/presets.py                                      # every pair listed below
    python benchmarks/presets.py --pairs ppo:CartPole-v1 --hparams '{"learning_rate": 3e-4}' --num-envs 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from podium.machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_sb3 import fresh_score, warm_up

# env: (target, fixed step budget for the "stays there" run, cap in seconds for the time-to-target run)
TARGETS = {
    "CartPole-v1": (475.0, 200_000, 120.0),
    "Acrobot-v1": (-100.0, 200_000, 120.0),
    "MountainCar-v0": (-110.0, 400_000, 180.0),
    "Pendulum-v1": (-200.0, 100_000, 120.0),
    "MountainCarContinuous-v0": (90.0, 200_000, 180.0),
}
# pairs whose "stays there" budget is not their env's: rl-baselines3-zoo trains SAC on MountainCarContinuous
# for 50,000 steps, and podium's preset (rl-zoo's, one env, one gradient step per env step) runs 200,000 in
# about ten minutes on two cores; PPO and DQN on MountainCar-v0 train rl-zoo's budgets there (1M and 120k)
BUDGETS = {
    ("sac", "MountainCarContinuous-v0"): 50_000,
    ("ppo", "MountainCar-v0"): 1_000_000,
    ("dqn", "MountainCar-v0"): 120_000,
}
PAIRS = [
    ("ppo", "CartPole-v1"),
    ("dqn", "CartPole-v1"),
    ("ppo", "Acrobot-v1"),
    ("dqn", "Acrobot-v1"),
    ("ppo", "MountainCar-v0"),
    ("dqn", "MountainCar-v0"),
    ("ppo", "Pendulum-v1"),
    ("sac", "Pendulum-v1"),
    ("td3", "Pendulum-v1"),
    ("ddpg", "Pendulum-v1"),
    ("ppo", "MountainCarContinuous-v0"),
    ("sac", "MountainCarContinuous-v0"),
    ("td3", "MountainCarContinuous-v0"),
    ("ddpg", "MountainCarContinuous-v0"),
]


@dataclass
class Row:
    algo: str
    env: str
    seed: int
    reached: bool
    seconds: float | None
    steps: int | None
    fresh_at_target: float | None
    final_fresh: float | None
    final_steps: int


def run_pair(algo: str, env: str, seed: int, hparams: dict, num_envs: int | None, skip_final: bool) -> Row:
    import podium
    from podium.api import make_spec
    from podium.pod import Pod

    target, budget, cap = TARGETS[env]
    budget = BUDGETS.get((algo, env), budget)
    extra = {"hparams": hparams} if hparams else {}
    if num_envs:
        extra["num_envs"] = num_envs
    with tempfile.TemporaryDirectory() as tmp:
        # exactly what podium.train(env, algo, target=target, seed=seed, seconds=cap) does, with the pod's
        # construction timed: the time to target is construction + the pod's time to its confirmation
        start = time.perf_counter()
        spec = make_spec(None, env=env, algo=algo, target=target, seconds=cap, seed=seed, **extra)
        pod = Pod(spec, f"{tmp}/t", progress=False)
        setup = time.perf_counter() - start
        report = pod.run()
        fresh = None
        if report.reached_target:
            fresh = fresh_score(podium.load(f"{tmp}/t").act, env)
        reached = report.reached_target and fresh is not None and fresh >= target
        final = None
        if not skip_final:
            podium.train(env, algo, steps=budget, seed=seed, run_dir=f"{tmp}/f", progress=False, **extra)
            final = fresh_score(podium.load(f"{tmp}/f/checkpoints/last.pt").act, env)
    seconds = setup + report.time_to_target if reached and report.time_to_target is not None else None
    return Row(algo, env, seed, reached, seconds, report.steps_to_target if reached else None, fresh, final, budget)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=",".join(f"{a}:{e}" for a, e in PAIRS), help="algo:env,algo:env,...")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--hparams", default="{}", help="JSON hyperparameters to try instead of the preset's")
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--skip-final", action="store_true", help="only the time-to-target runs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")]
    warm_up()
    seeds = [int(s) for s in args.seeds.split(",")]
    hparams = json.loads(args.hparams)
    print(f"machine: {describe()}; hparams {hparams or 'preset'}")
    rows: list[Row] = []
    for algo, env in pairs:
        for seed in seeds:
            row = run_pair(algo, env, seed, hparams, args.num_envs, args.skip_final)
            rows.append(row)
            shown = f"{row.seconds:6.2f} s {row.steps:>8} steps" if row.reached else "    not reached     "
            fresh = f"{row.fresh_at_target:7.1f}" if row.fresh_at_target is not None else "      —"
            final = f"{row.final_fresh:7.1f}" if row.final_fresh is not None else "      —"
            print(
                f"  {algo:<5} {env:<26} seed {seed}: {shown} fresh {fresh} | final@{row.final_steps} {final}",
                flush=True,
            )
    head = f"{'algo':<5} {'env':<26} {'reached':>7} {'median s':>9} {'worst s':>9} {'median steps':>12}"
    print(f"\n{head} {'final ok':>8} {'worst final':>11}")
    for algo, env in pairs:
        rs = [r for r in rows if r.algo == algo and r.env == env]
        times = sorted(r.seconds if r.reached else float("inf") for r in rs)
        med, worst = statistics.median(times), times[-1]
        steps = sorted(r.steps if r.reached else float("inf") for r in rs)  # a miss: never reached, as the times
        target = TARGETS[env][0]
        finals = [r.final_fresh for r in rs if r.final_fresh is not None]
        final_ok = f"{sum(f >= target for f in finals)}/{len(finals)}" if finals else "—"
        worst_final = f"{min(finals):.1f}" if finals else "—"

        def f(v: float) -> str:
            return "—" if v == float("inf") else f"{v:.2f}"

        med_steps = "—" if statistics.median(steps) == float("inf") else f"{statistics.median(steps):.0f}"
        reached = f"{sum(r.reached for r in rs)}/{len(rs)}"
        row = f"{algo:<5} {env:<26} {reached:>7} {f(med):>9} {f(worst):>9} {med_steps:>12}"
        print(f"{row} {final_ok:>8} {worst_final:>11}")
    if args.json:
        Path(args.json).write_text(json.dumps({"hparams": hparams, "rows": [asdict(r) for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
