"""Time to a *confirmed* threshold, env steps/s and memory: podium vs RLlib's PPO, same machine, same run.

Tasks (threshold on the mean return of the deterministic policy):
  * ``cartpole``  CartPole-v1 >= 475,
  * ``pendulum``  Pendulum-v1 >= -200,
  * ``trading``   podium's Dow-29 trading env trained on 2009-2014: no threshold but an equal budget. Each
                  contestant trains for ``--cap`` seconds; its *final* policy is scored by its Sharpe ratio
                  on the 2015 validation year (one deterministic episode from day 0 with $1M; the
                  equal-weight buy-and-hold basket scores 0.36 there, the script prints it). A time to a
                  threshold means nothing here: an untrained podium policy already scores about 0.6 on
                  that year. podium trains on its tensor env with the validation year as its evaluation
                  env (as ``examples/stock_dow29.yaml`` does); RLlib trains on its gymnasium twin
                  (``podium.finance.env.StockTradingEnv``: the same accounting and observations, one
                  account, stepped in Python as FinRL's env is) with RLlib's default PPO settings (it has no
                  tuned example for this env). Both final policies are scored by the same function.

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
10,000-10,099 (which no training used); only a run at or above the threshold there counts (trading: the
validation Sharpe, re-computed by this script).
Reported per task and contestant: success count, median and worst time to the confirmed threshold,
env steps per second of training, and the peak memory (PSS, so pages shared by forked processes are
counted once) of every process involved — for RLlib, its Ray processes too.

RLlib pins an older gymnasium than podium's test extra, so it lives in its own virtual environment,
with podium installed beside it::

    python3 -m venv .venv-rllib
    .venv-rllib/bin/pip install torch==2.13.0 -e . "ray[rllib]==2.60.0"
    .venv-rllib/bin/python benchmarks/vs_rllib.py                     # 3 seeds, every task
    .venv-rllib/bin/python benchmarks/vs_rllib.py --seeds 0 --tasks cartpole --cap 120
    .venv-rllib/bin/python benchmarks/vs_rllib.py --tasks trading --cap 120      # equal budget, validation Sharpe
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

from podium.machine import describe, local_cpus  # noqa: E402

# task: (env id, threshold, RLlib's tuned-example training settings for it)
TASKS = {
    "cartpole": ("CartPole-v1", 475.0, {"gamma": 0.99, "lr": 3e-4, "num_epochs": 6, "vf_loss_coeff": 0.01}),
    "pendulum": ("Pendulum-v1", -200.0, {"lr": 3e-4, "lambda_": 0.1, "vf_clip_param": 10.0, "num_epochs": 6}),
    "trading": ("StockTrading-v0", None, {}),  # an equal budget, not a threshold (see the docstring)
}
TRAIN_PERIOD = ("2009-01-02", "2014-12-31")
VALIDATION = {"period": ("2015-01-02", "2015-12-31"), "random_start": False, "score": "sharpe"}


def equal_weight_sharpe() -> float:
    """Sharpe ratio of the equal-weight buy-and-hold basket of the Dow 29 over the validation year."""
    from podium.finance.backtest import buy_and_hold
    from podium.finance.market import load_market
    from podium.finance.metrics import performance

    market = load_market("dow29", VALIDATION["period"])
    return performance(buy_and_hold(np.asarray(market.close), 1e6))["sharpe_ratio"]


def validation_sharpe(act) -> float:
    """The validation year's Sharpe ratio of ``act`` (batched numpy in, numpy out), deterministic: the
    trading env's own score (``score="sharpe"``: the last step's reward is the episode's annualised Sharpe)."""
    from podium.envs import make

    env = make("StockTrading-v0", num_envs=1, **VALIDATION)
    obs, _ = env.reset(seed=0)
    while True:
        obs, reward, terminated, truncated, _ = env.step(torch.as_tensor(act(obs.numpy()), dtype=torch.float32))
        if bool((terminated | truncated)[0]):
            env.close()
            return float(reward[0])


def task_score(task: str, act) -> float:
    """This script's own check of a policy: 100 fresh gymnasium episodes, or the trading validation year."""
    return validation_sharpe(act) if task == "trading" else fresh_score(act, TASKS[task][0])


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
        # trading: trained on 2009-2014, evaluated (and its target confirmed) on the 2015 validation year
        trading = {"env_kwargs": {"period": TRAIN_PERIOD}, "eval_env_kwargs": VALIDATION, "eval_episodes": 1}
        extra = trading if task == "trading" else {}
        spec = make_spec(None, env=env_id, algo="ppo", target=threshold, seed=seed, seconds=cap, **extra)
        pod = Pod(spec, run_dir, progress=False)
        setup = time.perf_counter() - start
        report = pod.run()
        rate = report.steps / report.wall_time
        if threshold is None:  # an equal budget: the final policy's score
            final = task_score(task, podium.load(os.path.join(run_dir, "checkpoints", "last.pt")).act)
            return Run("podium", task, seed, False, None, report.steps, final, "final"), rate, memory.peak
        if not report.reached_target or report.time_to_target is None:
            run = Run("podium", task, seed, False, None, None, None, f"best {report.score_mean:.1f} in {cap:.0f} s")
            return run, rate, memory.peak
        score = task_score(task, podium.load(run_dir).act)
    if score < threshold:
        return Run("podium", task, seed, False, None, report.steps_to_target, score, "fresh"), rate, memory.peak
    return (
        Run("podium", task, seed, True, setup + report.time_to_target, report.steps_to_target, score),
        rate,
        memory.peak,
    )


def rllib_policy(algo, space):
    """The deterministic policy of RLlib's module as ``act(obs batch) -> env actions`` (numpy) in the
    env's action ``space``."""
    import gymnasium as gym

    module = algo.get_module()
    dist_cls = module.get_inference_action_dist_cls()

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
    if task == "trading":  # RLlib steps podium's gymnasium twin of the trading env (one account per copy)
        from ray.tune.registry import register_env

        from podium.finance.env import StockTradingEnv

        register_env("podium-stock-trading", lambda _: StockTradingEnv(period=TRAIN_PERIOD))
        rllib_env, space = "podium-stock-trading", StockTradingEnv(period=TRAIN_PERIOD).action_space
    else:
        screen_env = gym.make(env_id)
        screen_env.reset(seed=seed + 5_000)  # routine screens: seeds apart from the fresh ones
        rllib_env, space = env_id, screen_env.action_space

    def screen(act) -> float:
        """Mean return of 10 deterministic episodes (trading: the validation year, its own confirmation)."""
        if task == "trading":
            return validation_sharpe(act)
        returns = []
        for _ in range(10):
            obs, _ = screen_env.reset()
            done, total = False, 0.0
            while not done:
                obs, r, terminated, truncated, _ = screen_env.step(act(obs[None])[0])
                total, done = total + float(r), terminated or truncated
            returns.append(total)
        return float(np.mean(returns))

    with PeakMemory(ray=True) as memory:
        start = time.perf_counter()
        config = (
            PPOConfig()
            .environment(rllib_env)
            .env_runners(num_env_runners=1, num_envs_per_env_runner=num_envs)
            .training(**training)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh"))
            .debugging(seed=seed)
        )
        algo = config.build_algo()
        paused, trained_steps, result, last_fresh = 0.0, 0, None, None
        try:
            act = rllib_policy(algo, space)
            while time.perf_counter() - start - paused < cap:
                out = algo.train()
                trained_steps = int(out["env_runners"]["num_env_steps_sampled_lifetime"])
                if threshold is None:  # an equal budget: no screens
                    continue
                t0 = time.perf_counter()
                if screen(act) >= threshold:
                    last_fresh = task_score(task, act)
                    if last_fresh >= threshold:
                        result = (t0 - start - paused, trained_steps, last_fresh)
                        break
                paused += time.perf_counter() - t0
            wall = time.perf_counter() - start - paused
        finally:
            algo.stop()
    rate = trained_steps / max(wall, 1e-9)
    if threshold is None:
        return Run("rllib", task, seed, False, None, trained_steps, task_score(task, act), "final"), rate, memory.peak
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
    print(
        f"machine: {describe()}, ray {ray.__version__}; podium pods: their defaults",
        flush=True,
    )
    if "trading" in tasks:
        print(f"trading: the equal-weight basket's validation Sharpe is {equal_weight_sharpe():.3f}", flush=True)
    ray.init(
        address="local",
        num_cpus=local_cpus(),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
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
                    if TASKS[task][1] is None:
                        shown = f"{run.steps:,} steps in {args.cap:g} s"
                    fresh = f", fresh {run.fresh_score:.1f}" if run.fresh_score is not None else ""
                    print(
                        f"  {task:<9} seed {seed} {contestant:<7} {shown}{fresh}; {rate:,.0f} steps/s, "
                        f"{peak:,.0f} MiB {run.note}",
                        flush=True,
                    )
    finally:
        ray.shutdown()
    timed = [t for t in tasks if TASKS[t][1] is not None]
    if timed:
        print(
            "\n| task | contestant | confirmed | median s | worst s | env steps/s | peak MiB | RLlib/x median "
            "| RLlib/x worst |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for task in timed:
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

    budgeted = [t for t in tasks if TASKS[t][1] is None]
    if budgeted:
        print(f"\nEqual budget ({args.cap:g} s of training), the final policy's score (trading: validation Sharpe):")
        print("\n| task | contestant | median score | worst score | env steps in the budget | env steps/s | peak MiB |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for task in budgeted:
            for contestant in ("rllib", "podium"):
                outcomes = [o for o in runs if o[0].task == task and o[0].contestant == contestant]
                scores = [o[0].fresh_score for o in outcomes]
                print(
                    f"| {task} | {contestant} | {statistics.median(scores):.2f} | {min(scores):.2f} | "
                    f"{statistics.median(o[0].steps for o in outcomes):,.0f} | "
                    f"{statistics.median(o[1] for o in outcomes):,.0f} | {max(o[2] for o in outcomes):,.0f} |"
                )


if __name__ == "__main__":
    main()
