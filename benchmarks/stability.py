"""Stability: the spread of final scores over seeds at an equal budget — podium's PPO or SAC (``--algo``) with
and without the H-term and gSDE, and Stable-Baselines3's same algorithm (rl-zoo's hyperparameters) — on the
same machine, in the same run.

For each seed, each contestant trains for exactly ``--steps`` env steps (no target, no early stop) and its
*final* policy is scored on 100 episodes of gymnasium's own env with seeds 10,000-10,099 (which no
training used). Reported per contestant: median, mean, standard deviation (the spread this table is
about), worst and best of those final scores, over ``--seeds``.

* ``podium``          ``podium.train(env, algo, steps=N, seed=s)``: podium's defaults and preset;
* ``podium+H``        the same with ``hparams={"h_term_lambda": L}`` (``--lambda``, ElegantRL's 2^-3);
* ``podium+gSDE``     the same with ``hparams={"use_sde": True, "sde_sample_freq": F}`` (``--sde-freq``,
                      rl-zoo's 4 for Pendulum; the exploration rl-zoo's PPO uses there);
* ``sb3``             SB3's algorithm with rl-zoo's hyperparameters for the env, N steps;
* ``champion`` / ``ensemble``  one tournament of the algorithm per seed (process backend, a pool of ``--pods`` pods,
                      rounds of ``--round-steps`` steps, N x pods env steps in all, so each slot trains
                      about as long as one single run; podium's defaults otherwise): its leaderboard's
                      champion, and the ensemble of its best ``--top-k`` (``podium.load_ensemble``, the mean
                      action), both scored like the others. The ensemble half of the stability question:
                      is a top-k ensemble steadier over seeds than its best member?

    python benchmarks/stability.py                                  # Pendulum-v1, 100k steps, 5 seeds
    python benchmarks/stability.py --seeds 0,1,2,3,4,5,6,7 --lambda 0.25
    python benchmarks/stability.py --only podium,podium+gSDE
    python benchmarks/stability.py --only champion,ensemble --steps 60000
    python benchmarks/stability.py --algo sac --steps 20000 --only podium,podium+H,sb3
    python benchmarks/stability.py --env MountainCarContinuous-v0 --algo td3 --steps 50000 --only podium,podium+H
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
from pathlib import Path

from podium.machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_sb3 import fresh_score, sb3_model, warm_up

SB3_TASK = {
    ("Pendulum-v1", "ppo"): "ppo-pendulum",
    ("CartPole-v1", "ppo"): "ppo-cartpole",
    ("Pendulum-v1", "sac"): "sac-pendulum",
}


def podium_final(env_id: str, algo: str, steps: int, seed: int, hparams: dict[str, float]) -> float:
    import podium

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        podium.train(env_id, algo, steps=steps, seed=seed, hparams=hparams, run_dir=run_dir, progress=False)
        policy = podium.load(os.path.join(run_dir, "checkpoints", "last.pt"))
        return fresh_score(policy.act, env_id)


@functools.cache
def tournament_finals(
    env_id: str, algo: str, steps: int, seed: int, pods: int, round_steps: int, top_k: int
) -> tuple[float, float]:
    """(champion's score, top-k ensemble's score) of one tournament, both on 100 fresh episodes."""
    import podium
    from podium.tournament import leaderboard, tournament

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        tournament(
            run_dir=run_dir,
            progress=False,
            backend="process",
            env=env_id,
            algos={algo: 1},
            steps=steps * pods,
            pod={"steps": round_steps, "tensorboard": False},
            pool={"min": pods, "max": pods},
            seed=seed,
        )
        entries = leaderboard(run_dir)
        champion = podium.load(entries[0].checkpoint)
        ensemble = podium.load_ensemble([e.checkpoint for e in entries[:top_k]])
        return fresh_score(champion.act, env_id), fresh_score(ensemble.act, env_id)


def sb3_final(env_id: str, algo: str, steps: int, seed: int) -> float:
    model, _ = sb3_model(SB3_TASK[env_id, algo], seed)
    model.learn(total_timesteps=steps)
    return fresh_score(lambda obs: model.predict(obs, deterministic=True)[0], env_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Pendulum-v1", help="a gymnasium env id (sb3 needs an rl-zoo setting)")
    parser.add_argument("--algo", default="ppo", choices=["ddpg", "ppo", "sac", "td3"])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--lambda", dest="h_lambda", type=float, default=0.125)
    parser.add_argument("--sde-freq", type=int, default=4)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated contestants (podium, podium+H, podium+gSDE, sb3, champion, ensemble)",
    )
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--pods", type=int, default=2, help="tournament pool size (champion, ensemble)")
    parser.add_argument("--round-steps", type=int, default=10_240, help="env steps per tournament round")
    parser.add_argument("--top-k", type=int, default=3, help="ensemble size")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"machine: {describe()}")
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    if (args.env, args.algo) not in SB3_TASK and (not wanted or "sb3" in wanted) and not args.skip_sb3:
        parser.error(
            f"no rl-zoo setting for {args.algo} on {args.env} (SB3 has {sorted(SB3_TASK)}); "
            "pass --skip-sb3 or leave sb3 out of --only"
        )
    print(
        f"{args.algo.upper()} on {args.env}, {args.steps:,} env steps per run, final policy on 100 fresh episodes, "
        f"seeds {seeds}"
    )
    warm_up()
    sde = {"use_sde": True, "sde_sample_freq": args.sde_freq}

    def tour(seed: int) -> tuple[str, int, int, int, int, int]:
        return args.env, args.algo, args.steps, seed, args.pods, args.round_steps, args.top_k

    contestants = {
        "podium": lambda s: podium_final(args.env, args.algo, args.steps, s, {}),
        f"podium+H ({args.h_lambda:g})": lambda s: podium_final(
            args.env, args.algo, args.steps, s, {"h_term_lambda": args.h_lambda}
        ),
        f"podium+gSDE ({args.sde_freq})": lambda s: podium_final(args.env, args.algo, args.steps, s, sde),
        "sb3 (rl-zoo)": lambda s: sb3_final(args.env, args.algo, args.steps, s),
        "champion (tournament)": lambda s: tournament_finals(*tour(s))[0],
        f"ensemble (tournament top-{args.top_k})": lambda s: tournament_finals(*tour(s))[1],
    }
    contestants = {
        name: run
        for name, run in contestants.items()
        if (not wanted or name.split(" ")[0] in wanted) and not (args.skip_sb3 and name.startswith("sb3"))
    }
    scores: dict[str, list[float]] = {name: [] for name in contestants}
    for seed in seeds:  # round-robin: a machine that drifts affects every contestant alike
        for name, run in contestants.items():
            scores[name].append(run(seed))
            print(f"  {name:<18} seed {seed}: {scores[name][-1]:.1f}", flush=True)
    print("\n| contestant | median | mean | std over seeds | worst | best |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in scores.items():
        print(
            f"| {name} | {statistics.median(values):.1f} | {statistics.mean(values):.1f} | "
            f"{statistics.stdev(values) if len(values) > 1 else 0.0:.1f} | {min(values):.1f} | {max(values):.1f} |"
        )


if __name__ == "__main__":
    main()
