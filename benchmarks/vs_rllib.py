"""Time to a *confirmed* threshold, env steps/s and memory: podium vs RLlib's PPO, same machine, same run.

Tasks (threshold on the mean return of the deterministic policy):
  * ``cartpole``  CartPole-v1 >= 475,
  * ``pendulum``  Pendulum-v1 >= -200.

Contestants, per task and seed, one after another in this process:
  * ``podium``  exactly what ``podium.train(env, "ppo", target=threshold, seed=seed)`` does (podium's public
                defaults: preset, evaluator service, its own confirmation on 100 fresh episodes). Its time is
                everything from building the pod to the confirmation that stops it.
  * ``rllib``   RLlib's PPO (new API stack) with RLlib's tuned-example hyperparameters for the env, and
                podium's network sizes (64, 64, tanh) and number of sub-envs, in one env-runner process.
                After every training iteration it is screened on 10 deterministic episodes; at or above
                the threshold it is scored on the 100 fresh episodes, and the run ends if they confirm.
                Its time is building the algorithm plus its training iterations; screens and
                confirmations are not counted (a free evaluator), nor is starting Ray (once, before all
                runs, on 127.0.0.1 only).

Every run that stops is scored by this script on 100 episodes of gymnasium's own env with seeds
10,000-10,099 (which no training used); only a run at or above the threshold there counts.
Reported per task and contestant: success count, median and worst time to the confirmed threshold,
env steps per second of training, and the peak memory (PSS, so pages shared by forked processes are
counted once) of every process involved — for RLlib, its Ray processes too.

RLlib pins an older gymnasium than podium's test extra, so it lives in its own virtual environment,
with podium installed beside it::

    python3 -m venv .venv-rllib
    .venv-rllib/bin/pip install torch==2.13.0 -e . "ray[rllib]==2.60.0"
    .venv-rllib/bin/python benchmarks/vs_rllib.py                     # 3 seeds, both tasks
    .venv-rllib/bin/python benchmarks/vs_rllib.py --seeds 0 --tasks cartpole --cap 120
"""

from __future__ import annotations

import os

# a local Ray cluster on 127.0.0.1 only: these must be set before ray is imported (docs/cluster.md)
for _name, _value in {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}.items():
    os.environ.setdefault(_name, _value)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_sb3 import Run, fresh_score, summarise, warm_up  # noqa: E402

# task: (env id, threshold, RLlib's tuned-example training settings for it)
TASKS = {
    "cartpole": ("CartPole-v1", 475.0, {"gamma": 0.99, "lr": 3e-4, "num_epochs": 6, "vf_loss_coeff": 0.01}),
    "pendulum": ("Pendulum-v1", -200.0, {"lr": 3e-4, "lambda_": 0.1, "vf_clip_param": 10.0, "num_epochs": 6}),
}


class PeakMemory:
    """Peak total PSS (MiB) of this process, its descendants and (``ray=True``) Ray's processes, sampled
    every ``interval`` seconds in a thread while inside the ``with`` block."""

    def __init__(self, ray: bool = False, interval: float = 0.5) -> None:
        self.ray, self.interval, self.peak = ray, interval, 0.0
        self._stop = threading.Event()

    def _processes(self):
        import psutil

        me = psutil.Process()
        procs = {p.pid: p for p in [me, *me.children(recursive=True)]}
        if self.ray:
            for p in psutil.process_iter(["cmdline"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if "ray::" in cmd or "raylet" in cmd or "gcs_server" in cmd or "ray/_private" in cmd:
                    procs.setdefault(p.pid, p)
        return procs.values()

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            for p in self._processes():
                with contextlib.suppress(psutil.Error, OSError):
                    total += p.memory_full_info().pss
            self.peak = max(self.peak, total / 2**20)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_podium(task: str, seed: int, cap: float) -> tuple[Run, float, float]:
    import podium
    from podium.api import make_spec
    from podium.pod import Pod

    env_id, threshold, _ = TASKS[task]
    with tempfile.TemporaryDirectory() as tmp, PeakMemory() as memory:
        run_dir = os.path.join(tmp, "run")
        start = time.perf_counter()
        spec = make_spec(None, env=env_id, algo="ppo", target=threshold, seed=seed, seconds=cap)
        pod = Pod(spec, run_dir, progress=False)
        setup = time.perf_counter() - start
        report = pod.run()
        rate = report.steps / report.wall_time
        if not report.reached_target or report.time_to_target is None:
            run = Run("podium", task, seed, False, None, None, None, f"best {report.score_mean:.1f} in {cap:.0f} s")
            return run, rate, memory.peak
        score = fresh_score(podium.load(run_dir).act, env_id)
    if score < threshold:
        return Run("podium", task, seed, False, None, report.steps_to_target, score, "fresh"), rate, memory.peak
    return (
        Run("podium", task, seed, True, setup + report.time_to_target, report.steps_to_target, score),
        rate,
        memory.peak,
    )


def rllib_policy(algo, env_id: str):
    """The deterministic policy of RLlib's module as ``act(obs batch) -> env actions`` (numpy)."""
    import gymnasium as gym

    module = algo.get_module()
    dist_cls = module.get_inference_action_dist_cls()
    space = gym.make(env_id).action_space

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = module.forward_inference({"obs": torch.as_tensor(np.asarray(obs), dtype=torch.float32)})
            actions = dist_cls.from_logits(out["action_dist_inputs"]).to_deterministic().sample().numpy()
        if isinstance(space, gym.spaces.Box):  # RLlib's policy acts in [-1, 1]; its env runner rescales
            unit = np.clip(actions, -1.0, 1.0)
            return space.low + (unit + 1.0) * 0.5 * (space.high - space.low)
        return actions

    return act


def run_rllib(task: str, seed: int, cap: float, num_envs: int) -> tuple[Run, float, float]:
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    env_id, threshold, training = TASKS[task]
    screen_env = gym.make(env_id)
    screen_env.reset(seed=seed + 5_000)  # routine screens: seeds apart from the fresh ones
    with PeakMemory(ray=True) as memory:
        start = time.perf_counter()
        config = (
            PPOConfig()
            .environment(env_id)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=num_envs)
            .training(**training)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh"))
            .debugging(seed=seed)
        )
        algo = config.build_algo()
        paused, trained_steps, result, last_fresh = 0.0, 0, None, None
        try:
            act = rllib_policy(algo, env_id)
            while time.perf_counter() - start - paused < cap:
                out = algo.train()
                trained_steps = int(out["env_runners"]["num_env_steps_sampled_lifetime"])
                t0 = time.perf_counter()
                returns = []
                for _ in range(10):
                    obs, _ = screen_env.reset()
                    done, total = False, 0.0
                    while not done:
                        obs, r, terminated, truncated, _ = screen_env.step(act(obs[None])[0])
                        total, done = total + float(r), terminated or truncated
                    returns.append(total)
                if np.mean(returns) >= threshold:
                    last_fresh = fresh_score(act, env_id)
                    if last_fresh >= threshold:
                        result = (t0 - start - paused, trained_steps, last_fresh)
                        break
                paused += time.perf_counter() - t0
            wall = time.perf_counter() - start - paused
        finally:
            algo.stop()
    rate = trained_steps / max(wall, 1e-9)
    if result is None:
        note = f"last failed confirmation {last_fresh:.1f}" if last_fresh is not None else f"{cap:.0f} s cap"
        return Run("rllib", task, seed, False, None, None, last_fresh, note), rate, memory.peak
    seconds, steps, score = result
    return Run("rllib", task, seed, True, seconds, steps, score), rate, memory.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--cap", type=float, default=300.0, help="cap per run: seconds of training")
    args = parser.parse_args()
    try:
        import ray
    except ImportError:
        raise SystemExit(
            "error: this benchmark needs RLlib in its own environment (see the docstring): "
            'python3 -m venv .venv-rllib && .venv-rllib/bin/pip install torch==2.13.0 -e . "ray[rllib]==2.60.0"'
        ) from None
    from podium.algos.presets import preset_for

    seeds = [int(s) for s in args.seeds.split(",")]
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise SystemExit(f"error: unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    warm_up()
    cores = len(os.sched_getaffinity(0))
    print(
        f"machine: {platform.machine()} {platform.processor() or ''}, {cores} cores, torch {torch.__version__}, "
        f"ray {ray.__version__}; podium pods: their defaults",
        flush=True,
    )
    ray.init(
        address="local", num_cpus=cores, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False
    )
    runs: list[tuple[Run, float, float]] = []
    try:
        for task in tasks:
            num_envs = preset_for("ppo", TASKS[task][0]).num_envs or 16
            for seed in seeds:
                for contestant in ("rllib", "podium"):
                    if contestant == "rllib":
                        outcome = run_rllib(task, seed, args.cap, num_envs)
                    else:
                        outcome = run_podium(task, seed, args.cap)
                    runs.append(outcome)
                    run, rate, peak = outcome
                    shown = f"{run.seconds:.2f} s, {run.steps} steps" if run.reached else "not reached"
                    fresh = f", fresh {run.fresh_score:.1f}" if run.fresh_score is not None else ""
                    print(
                        f"  {task:<9} seed {seed} {contestant:<7} {shown}{fresh}; {rate:,.0f} steps/s, "
                        f"{peak:,.0f} MiB {run.note}",
                        flush=True,
                    )
    finally:
        ray.shutdown()
    print(
        "\n| task | contestant | confirmed | median s | worst s | env steps/s | peak MiB | RLlib/x median "
        "| RLlib/x worst |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for task in tasks:
        rows = {c: [o for o in runs if o[0].task == task and o[0].contestant == c] for c in ("rllib", "podium")}
        base_med, base_worst = summarise([o[0].seconds for o in rows["rllib"]])
        for contestant, outcomes in rows.items():
            med, worst = summarise([o[0].seconds for o in outcomes])
            rate = statistics.median(o[1] for o in outcomes)
            peak = max(o[2] for o in outcomes)
            ratio_med = f"{base_med / med:.1f}x" if base_med and med else "—"
            ratio_worst = f"{base_worst / worst:.1f}x" if base_worst and worst else "—"
            reached = f"{sum(o[0].reached for o in outcomes)}/{len(outcomes)}"
            med_s = "—" if med is None else f"{med:.2f}"
            worst_s = "—" if worst is None else f"{worst:.2f}"
            print(
                f"| {task} | {contestant} | {reached} | {med_s} | {worst_s} | {rate:,.0f} | {peak:,.0f} | "
                f"{ratio_med} | {ratio_worst} |"
            )


if __name__ == "__main__":
    main()
