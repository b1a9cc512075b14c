"""MuJoCo locomotion: podium vs Stable-Baselines3 on the CPU; the GPU engine's speed and time to a score.

Parts (``--part``, comma-separated):

* ``cpu`` — time to a *confirmed* score, as benchmarks/vs_sb3.py measures it (same protocol, same yardstick:
  its ``fresh_score``, 100 episodes of gymnasium's env with seeds 10,000-10,099 that no training or routine
  evaluation uses; a run counts only if its policy reaches the threshold there):
    * ``sac-halfcheetah``  HalfCheetah-v5 >= 1500 with SAC,
    * ``ppo-hopper``       Hopper-v5 >= 1000 with PPO,
  contestants, one after another in this process, per seed: ``sb3`` (rl-baselines3-zoo's hyperparameters for
  these envs, one env, VecNormalize where rl-zoo normalises, on each torch thread count of ``--threads``;
  screened on 10 episodes after every policy update, PPO's rollout of 512 steps, and every 1,000 steps for
  SAC, which updates every step; its screens and confirmations not counted in its time; the ratios use SB3's
  better setting for each column, as vs_sb3's) and ``podium`` (``podium.train(env, algo, target=...)``
  with its defaults — for these ids gymnasium's env through ``GymVecEnv`` (in-process, ``vectorization:
  sync``) and podium's presets, which are rl-zoo's values — everything counted). Hours on 2 cores.
* ``throughput`` — env steps/s (all sub-envs together, random actions, auto-reset included) of podium's
  ``Ant-v5`` / ``Humanoid-v5`` at N sub-envs on ``--device`` (the MJX engine on CUDA, MuJoCo C on a CPU),
  against gymnasium's own env in ``AsyncVectorEnv`` with one process per core of this machine (its best
  here: more processes than cores only share them), and the ratio.
* ``fidelity`` — the MJX engine against MuJoCo C (which the tests prove identical to gymnasium) at scale:
  random-policy reward per step and episode length of Ant and Humanoid, means with standard errors.
* ``train`` — PPO time to Ant 3000 / 6000 and Humanoid 5000: a single pod with the hyperparameters and
  sizes of examples/ant.yaml and examples/humanoid.yaml (time of the first 32-episode evaluation at or
  above each score, and of the confirmation at the target), then the tournament of those files (pods
  sharing the GPU; time until the leaderboard's best reaches the target). Goals on one H100: Ant 6000 in
  under 10 minutes, Humanoid 5000 in under 30.

Usage::

    python benchmarks/locomotion.py --part cpu                      # 3 seeds, both tasks: hours on 2 cores
    python benchmarks/locomotion.py --part gpu                      # = throughput,fidelity,train on cuda
    python benchmarks/locomotion.py --part throughput --device cpu --sizes 16,256
    python benchmarks/locomotion.py --part cpu --seeds 0 --cap 30 --json out.json   # a smoke test
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from podium.machine import describe

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vs_sb3 import Run, fresh_score, sb3_bases, sb3_confirmed, summarise  # noqa: E402  (vs_sb3's yardstick)

TASKS = {  # task: (env id, algorithm, threshold)
    "sac-halfcheetah": ("HalfCheetah-v5", "sac", 1500.0),
    "ppo-hopper": ("Hopper-v5", "ppo", 1000.0),
}
SB3_SCREEN_EVERY = {  # env steps between two screens of SB3: after every policy update (vs_sb3's protocol)
    "sac-halfcheetah": 1_000,  # an update every step; a screen (10 episodes of 1,000 steps) every 1,000
    "ppo-hopper": 512,  # one env x 512 steps per rollout
}
GPU_TARGETS = {"Ant-v5": (3000.0, 6000.0), "Humanoid-v5": (5000.0,)}
EXAMPLES = {"Ant-v5": HERE.parent / "examples" / "ant.yaml", "Humanoid-v5": HERE.parent / "examples" / "humanoid.yaml"}


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _f(v: float | None, fmt: str = ".1f") -> str:
    return format(v, fmt) if v is not None else "—"


# ----------------------------------------------------------------------------- cpu: SB3 with rl-zoo's values
def sb3_model(task: str, seed: int):
    """SB3 with rl-baselines3-zoo's hyperparameters (hyperparams/sac.yml and ppo.yml, HalfCheetah-v4 and
    Hopper-v4 entries); returns ``(model, obs_normaliser or None, step budget)``."""
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    if task == "sac-halfcheetah":  # mujoco-defaults: SB3's SAC defaults + learning_starts 10000
        env = make_vec_env("HalfCheetah-v5", n_envs=1, seed=seed)
        return SAC("MlpPolicy", env, learning_starts=10_000, seed=seed, device="cpu"), None, 1_000_000
    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed), gamma=0.999)  # normalize: true
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=512,
        batch_size=32,
        gamma=0.999,
        learning_rate=9.80828e-05,
        ent_coef=0.00229519,
        clip_range=0.2,
        n_epochs=5,
        gae_lambda=0.99,
        max_grad_norm=0.7,
        vf_coef=0.835671,
        policy_kwargs={
            "log_std_init": -2,
            "ortho_init": False,
            "activation_fn": torch.nn.ReLU,
            "net_arch": {"pi": [256, 256], "vf": [256, 256]},
        },
        seed=seed,
        device="cpu",
    )
    return model, env, 1_000_000


def episodes_score(act: Callable[[np.ndarray], np.ndarray], env_id: str, episodes: int, seed: int) -> float:
    """Mean return of ``act`` over ``episodes`` gymnasium episodes, reset with seeds ``seed + i``."""
    import gymnasium as gym

    env = gym.make(env_id)
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            obs, r, terminated, truncated, _ = env.step(act(obs[None])[0])
            total += float(r)
            done = terminated or truncated
    env.close()
    return total / episodes


def run_sb3(task: str, seed: int, cap: float, eval_every: int | None = None) -> Run:
    env_id, _, threshold = TASKS[task]
    start = time.perf_counter()
    model, norm, budget = sb3_model(task, seed)

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(norm.normalize_obs(obs) if norm is not None else obs, deterministic=True)[0]

    def screen() -> float:
        return episodes_score(act, env_id, 10, seed + 5_000)

    every = eval_every or SB3_SCREEN_EVERY[task]
    return sb3_confirmed(model, task, seed, env_id, threshold, budget, every, cap, screen, act, start)


def run_podium(task: str, seed: int, cap: float) -> Run:
    import podium
    from podium.api import make_spec
    from podium.pod import Pod

    env_id, algo, threshold = TASKS[task]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        start = time.perf_counter()
        # gymnasium's env in-process (as SB3's DummyVecEnv), also in the evaluator's process, which cannot
        # start the worker processes that GymVecEnv's "auto" picks for MuJoCo on a slow machine
        fields = {"env_kwargs": {"vectorization": "sync"}}
        spec = make_spec(None, env=env_id, algo=algo, target=threshold, seed=seed, seconds=cap, **fields)
        pod = Pod(spec, run_dir, progress=False)
        setup = time.perf_counter() - start
        report = pod.run()
        if not report.reached_target or report.time_to_target is None:
            return Run("podium", task, seed, False, None, None, None, f"best {report.score_mean:.1f} in {cap:.0f} s")
        score = fresh_score(podium.load(run_dir).act, env_id)
    if score < threshold:
        return Run("podium", task, seed, False, None, report.steps_to_target, score, f"fresh {score:.1f}")
    return Run("podium", task, seed, True, setup + report.time_to_target, report.steps_to_target, score)


def part_cpu(args: argparse.Namespace) -> dict:
    if importlib.util.find_spec("stable_baselines3") is None:
        raise SystemExit('error: this part needs Stable-Baselines3, the "bench" extra: pip install -e ".[bench]"')
    runs: list[Run] = []
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"error: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    threads = [int(t) for t in str(args.threads).split(",")]
    peers = [f"sb3-{t}t" for t in threads]
    for task in tasks:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for contestant in (*peers, "podium"):
                if contestant in peers:
                    torch.set_num_threads(threads[peers.index(contestant)])  # a pod sets its own thread count
                    run = run_sb3(task, seed, args.cap, args.eval_every)
                    run.contestant = contestant
                else:
                    run = run_podium(task, seed, args.cap)
                runs.append(run)
                shown = f"{run.seconds:.1f} s, {run.steps} steps" if run.reached else "not reached"
                fresh = f", fresh {run.fresh_score:.1f}" if run.fresh_score is not None else ""
                print(f"  {task:<15} seed {seed} {contestant:<7} {shown}{fresh} {run.note}", flush=True)
    head = f"{'task':<15} {'contestant':<8} {'reached':>7} {'median s':>9} {'worst s':>9}"
    print(f"\n{head} {'SB3/x median':>12} {'SB3/x worst':>11}")
    summary = []
    for task in tasks:
        rows = {c: [r for r in runs if r.task == task and r.contestant == c] for c in (*peers, "podium")}
        base_med, base_worst, by_median, by_worst = sb3_bases({c: rows[c] for c in peers})
        print(f"{task}: SB3's faster median is {by_median}'s, its better worst seed {by_worst}'s")
        for contestant, rs in rows.items():
            med, worst = summarise([r.seconds for r in rs])
            ratio = base_med / med if base_med and med else None
            ratio_worst = base_worst / worst if base_worst and worst else None
            reached = f"{sum(r.reached for r in rs)}/{len(rs)}"
            print(
                f"{task:<15} {contestant:<8} {reached:>7} {_f(med):>9} {_f(worst):>9} {_f(ratio) + 'x':>12} "
                f"{_f(ratio_worst) + 'x':>11}"
            )
            row = {"task": task, "contestant": contestant, "reached": reached, "median_s": med, "worst_s": worst}
            summary.append({**row, "sb3_over_median": ratio, "sb3_over_worst": ratio_worst})
    return {"runs": [asdict(r) for r in runs], "summary": summary}


# ----------------------------------------------------------------------------- throughput
def podium_sps(env_id: str, num_envs: int, device: str, seconds: float) -> float:
    """Env steps/s of podium's tensor env (random actions drawn on the device, auto-reset included)."""
    import podium.envs as envs

    env = envs.make(env_id, num_envs=num_envs, device=device, seed=0, validate_actions=False)
    env.reset()
    gen = torch.Generator(device=env.device).manual_seed(0)
    shape, high = (num_envs, *env.single_action_space.shape), float(env.single_action_space.high[0])
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)

    def step() -> None:
        env.step(torch.rand(shape, generator=gen, device=env.device) * (2 * high) - high)

    step()  # compiles (MJX) before the clock starts
    return timed(step, num_envs, seconds, sync)


def gym_async_sps(env_id: str, workers: int, seconds: float) -> float:
    """Env steps/s of gymnasium's env in an ``AsyncVectorEnv`` of ``workers`` processes."""
    import gymnasium as gym

    # spawned, not forked: this process may already run CUDA and JAX, whose threads a fork does not copy
    vec = gym.vector.AsyncVectorEnv([lambda: gym.make(env_id)] * workers, context="spawn")
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    space = vec.single_action_space
    try:
        return timed(lambda: vec.step(rng.uniform(space.low, space.high, (workers, *space.shape))), workers, seconds)
    finally:
        vec.close()


def timed(step: Callable[[], object], num_envs: int, seconds: float, sync: Callable[[], None] = lambda: None) -> float:
    """Steps/s of ``step`` (one batched step of ``num_envs`` sub-envs) over about ``seconds``."""
    for _ in range(3):
        step()
    sync()
    n, start = 0, time.perf_counter()
    while True:
        step()
        n += 1
        if n % 5 == 0:
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return n * num_envs / elapsed


def part_throughput(args: argparse.Namespace, save: Callable[[dict], None] = lambda found: None) -> dict:
    """``save`` gets what is measured so far after every row (a run stopped at a time limit keeps it)."""
    workers = args.workers or _cores()
    rows: list[dict] = []
    print(f"\nenv steps/s: podium on {args.device} vs gymnasium AsyncVectorEnv x {workers} processes on this CPU")
    print(f"{'env':<12} {'N':>7} {'podium':>12} {'gymnasium':>12} {'ratio':>8}")
    for env_id in args.envs.split(","):
        peer = gym_async_sps(env_id, workers, args.seconds)
        for n in [int(s) for s in args.sizes.split(",")]:
            try:
                sps = podium_sps(env_id, n, args.device, args.seconds)
            except (ValueError, RuntimeError) as exc:  # e.g. more sub-envs than the device holds
                print(f"{env_id:<12} {n:>7} {'—':>12} {peer:>12,.0f} {'—':>8}  ({' '.join(str(exc).split())[:120]})")
                rows.append({"env": env_id, "num_envs": n, "podium": None, "gymnasium": peer, "error": str(exc)})
                continue
            print(f"{env_id:<12} {n:>7} {sps:>12,.0f} {peer:>12,.0f} {sps / peer:>7.1f}x", flush=True)
            rows.append({"env": env_id, "num_envs": n, "podium": sps, "gymnasium": peer, "ratio": sps / peer})
            save({"workers": workers, "rows": rows})
    return {"workers": workers, "rows": rows}


# ----------------------------------------------------------------------------- fidelity
def random_policy_stats(env_id: str, engine: str, num_envs: int, steps: int, device: str) -> dict:
    """Reward per step and finished episode lengths of U(-high, high) actions, with standard errors over
    sub-envs (per-env means are independent)."""
    import podium.envs as envs

    env = envs.make(env_id, num_envs=num_envs, device=device, seed=0, engine=engine)
    env.reset()
    gen = torch.Generator(device=env.device).manual_seed(1)
    high = float(env.single_action_space.high[0])
    total = torch.zeros(num_envs, dtype=torch.float64, device=env.device)
    lengths: list[torch.Tensor] = []
    for _ in range(steps):
        actions = torch.rand((num_envs, *env.single_action_space.shape), generator=gen, device=env.device)
        _, reward, _, _, info = env.step(actions * (2 * high) - high)
        total += reward.double()
        lengths.append(info["episode_length"][info["_episode_length"]].double())
    per_env = (total / steps).cpu()
    ends = torch.cat(lengths).cpu()
    return {
        "reward_per_step": float(per_env.mean()),
        "reward_se": float(per_env.std() / num_envs**0.5),
        "episodes": int(ends.numel()),
        "episode_length": float(ends.mean()) if ends.numel() else None,
        "episode_length_se": float(ends.std() / ends.numel() ** 0.5) if ends.numel() > 1 else None,
    }


def part_fidelity(args: argparse.Namespace) -> dict:
    out = {}
    print(f"\nrandom policy, {args.fidelity_steps} steps: MJX ({args.device}) vs MuJoCo C (= gymnasium), mean ± SE")
    print(f"{'env':<12} {'engine':<7} {'N':>6} {'reward/step':>18} {'episodes':>9} {'episode length':>18}")
    for env_id in args.envs.split(","):
        for engine, n, device in (("mjx", args.fidelity_envs, args.device), ("mujoco", args.fidelity_c_envs, "cpu")):
            s = random_policy_stats(env_id, engine, n, args.fidelity_steps, device)
            out[f"{env_id}/{engine}"] = s
            length = f"{_f(s['episode_length'])} ± {_f(s['episode_length_se'])}"
            print(
                f"{env_id:<12} {engine:<7} {n:>6} {s['reward_per_step']:>10.3f} ± {s['reward_se']:.3f} "
                f"{s['episodes']:>9} {length:>18}",
                flush=True,
            )
    return out


# ----------------------------------------------------------------------------- train
def part_train(args: argparse.Namespace) -> dict:
    import podium
    from podium.tournament import load_tournament_config, tournament

    out: dict[str, dict] = {}
    for env_id in args.envs.split(","):
        cfg = load_tournament_config(EXAMPLES[env_id])
        pod = {**cfg.pod, "device": args.device}
        if args.num_envs:
            pod["num_envs"] = args.num_envs
        targets = GPU_TARGETS[env_id]
        goal = {"Ant-v5": 600.0, "Humanoid-v5": 1800.0}[env_id]
        with tempfile.TemporaryDirectory() as tmp:
            fields = {k: v for k, v in pod.items() if k not in ("seconds", "eval_every")}
            report = podium.train(
                env_id,
                "ppo",
                run_dir=Path(tmp) / "pod",
                hparams=cfg.hparams.get("ppo", {}),
                env_kwargs=cfg.env_kwargs,
                target=targets[-1],
                seconds=args.cap,
                eval_every=pod.get("eval_every", 2_000_000),
                progress=False,
                **fields,
            )
            firsts = {}
            for score in targets:
                hit = next((row for row in report.curve if row["eval_mean"] >= score), None)
                firsts[score] = None if hit is None else float(hit["scored_at"])
            print(f"\n{env_id}: one PPO pod, {pod['num_envs']} sub-envs on {args.device}")
            for score, seconds in firsts.items():
                print(f"  first 32-episode evaluation >= {score:g}: {_f(seconds)} s")
            print(
                f"  confirmed {targets[-1]:g}: {_f(report.time_to_target)} s (goal {goal:.0f} s: "
                f"{_f(goal / report.time_to_target if report.time_to_target else None, '.2f')}x); best "
                f"{report.score_mean:.0f} after {report.steps:,} steps, {report.wall_time:.0f} s",
                flush=True,
            )
            tour = tournament(
                EXAMPLES[env_id], run_dir=Path(tmp) / "tournament", seconds=args.cap, pod=pod, progress=False
            )
            best = tour.champion.score_mean if tour.champion is not None else float("nan")
            print(
                f"  tournament ({cfg.pool.max} pods sharing the device): leaderboard >= {targets[-1]:g} after "
                f"{_f(tour.time_to_target)} s (goal {goal:.0f} s); best {best:.0f}, {tour.pods_started} pods",
                flush=True,
            )
        out[env_id] = {
            "pod_first_eval_s": {str(k): v for k, v in firsts.items()},
            "pod_confirmed_s": report.time_to_target,
            "pod_best": report.score_mean,
            "tournament_s": tour.time_to_target,
            "tournament_best": best,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="cpu", help="cpu, throughput, fidelity, train, or gpu (the last three)")
    parser.add_argument("--device", default=None, help="default: cuda for the GPU parts, cpu otherwise")
    parser.add_argument("--seeds", default="0,1,2", help="cpu part: seeds")
    parser.add_argument("--tasks", default=",".join(TASKS), help="cpu part: tasks")
    parser.add_argument("--cap", type=float, default=None, help="wall-clock cap per run (cpu 10800 s, train 3600 s)")
    parser.add_argument(
        "--eval-every", type=int, default=None, help="cpu part: SB3's screen interval (default: after every update)"
    )
    parser.add_argument("--threads", default="1,2", help="cpu part: torch thread counts to run SB3 with")
    parser.add_argument("--envs", default="Ant-v5,Humanoid-v5", help="GPU parts: envs")
    parser.add_argument("--sizes", default="1024,4096,16384,32768", help="throughput: numbers of sub-envs")
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput: measuring time per cell")
    parser.add_argument("--workers", type=int, default=None, help="throughput: gymnasium processes (default: cores)")
    parser.add_argument("--fidelity-envs", type=int, default=4096, help="fidelity: MJX sub-envs")
    parser.add_argument("--fidelity-c-envs", type=int, default=256, help="fidelity: MuJoCo C sub-envs")
    parser.add_argument("--fidelity-steps", type=int, default=300, help="fidelity: steps")
    parser.add_argument("--num-envs", type=int, default=None, help="train: override the examples' sub-envs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    parts = args.part.split(",")
    if "gpu" in parts:
        parts = [p for p in parts if p != "gpu"] + ["throughput", "fidelity", "train"]
    unknown = [p for p in parts if p not in ("cpu", "throughput", "fidelity", "train")]
    if unknown:
        raise SystemExit(f"error: unknown part {unknown[0]!r}; choose from cpu, throughput, fidelity, train, gpu")
    args.device = args.device or ("cuda" if parts != ["cpu"] else "cpu")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device here; run the GPU parts on a GPU machine, or pass --device cpu")
    machine = describe(gpu=args.device.startswith("cuda"))
    print(f"machine: {machine}", flush=True)
    results: dict[str, object] = {"machine": machine}
    for part in parts:
        if part == "cpu":
            args.cap = args.cap or 10_800.0
            results["cpu"] = part_cpu(args)
        elif part == "throughput":

            def save(found: dict) -> None:
                if args.json:
                    Path(args.json).write_text(json.dumps({**results, "throughput": found}, indent=2, default=str))

            results["throughput"] = part_throughput(args, save)
        elif part == "fidelity":
            results["fidelity"] = part_fidelity(args)
        else:
            args.cap = args.cap or 3_600.0
            results["train"] = part_train(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
