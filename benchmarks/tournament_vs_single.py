"""Tournament vs a single pod: same machine, same cores, same wall-clock budget, median over seeds.

The claim under test: a tournament beats a single pod on the same compute. Per task and seed index:
  * ``tournament``  ``podium.tournament`` with the process backend, podium's default algorithm mix
                    (PPO, SAC, TD3 in that order; Acrobot: PPO, DQN; or ``--mix``), rounds of ``--round``
                    seconds per pod (default podium's, 20 s), and a pool of ``cores`` pods with one torch thread each
                    (``pool.min = pool.max = cores``, ``cpus_per_pod = 1``);
  * ``single ALGO`` one pod as ``podium.train`` builds it (podium's defaults and presets) with
                    ``torch_threads = cores``, for every algorithm of ``--single`` (default: the mix's);
                    ``--single-threads 2,1`` also runs it with other thread counts. Note that a pod told
                    to use 1 thread on a 2-core machine evaluates inline on that one core and leaves the
                    other idle, while the tournament uses both: such a single pod has half the machine;
  * ``ray tune pbt`` (``--pbt``) Ray Tune's PopulationBasedTraining scheduler driving podium pods, the peer
                    a user would pick to tune podium: ``cores`` trials of one CPU, trial ``i`` of the mix's
                    ``i % len(mix)``-th algorithm, an iteration = one pod round of ``--round`` seconds that
                    continues the trial's last checkpoint, PBT's defaults otherwise (see ``_ray_tune_pbt``).
                    It needs ray[tune], which pins its own gymnasium: it runs with ``--pbt-python``
                    (default ``.venv-rllib/bin/python``, see benchmarks/vs_rllib.py), on a local Ray
                    cluster bound to 127.0.0.1.
Every run is a fresh Python process started by this script, one at a time (two at once would steal
each other's cores), in its own temporary run directory. The wall-clock budget ``--seconds`` counts
from the moment that process is launched: imports, set-up and (for the tournament) every pod's own
process start-up are spent from it. Both contestants get the same evaluation cadence (``--eval-every``,
default podium's) and TensorBoard off.

Reported per task and contestant:
  * success: the target was reached and confirmed within the budget (a single pod: its own confirmation
    on fresh episodes, counted from the launch; the tournament: a pod's selection score on fresh episodes
    reaching it by the same rule, at the moment the orchestrator collected the pod's round; Ray Tune PBT: a
    trial's pod confirming it), **and** the policy that did so (the single pod's saved policy, the
    tournament's champion, the PBT trial's round) also scores at or above the target on the yardstick of
    benchmarks/vs_sb3.py: 100 episodes of gymnasium's own env with seeds 10,000-10,099, which no contestant
    trains or evaluates on (``fresh`` in the CSV; scored by this script after the run, outside its time);
  * median time to target counting every failure as never reached (``not reached`` when half or more
    failed), the median over the successful runs only, and the worst run;
  * median best score: a single pod's best routine evaluation (the best of many noisy scores, so it leans
    high), the tournament's champion's selection score (one fresh 100-episode score): not like for like.

Usage::

    python benchmarks/tournament_vs_single.py                      # 5 seeds, 120 s, pendulum + acrobot
    python benchmarks/tournament_vs_single.py --tasks mcc --seeds 7 --seconds 300 --round 20
    python benchmarks/tournament_vs_single.py --tasks pendulum --mix sac=2,td3=1 --single sac
    python benchmarks/tournament_vs_single.py --single-threads 2,1  # single pods on 2 threads and on 1
    python benchmarks/tournament_vs_single.py --quick              # smoke test: 1 seed, 30 s, pendulum
    python benchmarks/tournament_vs_single.py --tasks mcc --seeds 10 --seconds 90 --pbt --single-threads 1
    python benchmarks/tournament_vs_single.py --tasks lunar --seeds 2 --first-seed 3 --out b.csv  # more seeds
    python benchmarks/tournament_vs_single.py --table a.csv b.csv  # one table of both runs
    python benchmarks/tournament_vs_single.py --tasks lunar --schemes "" --single "" --pbt  # Ray Tune PBT alone

The markdown table it prints is ready for BENCHMARKS.md; the raw runs go to ``--out`` (CSV).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from podium.machine import describe
from podium.machine import local_cpus as machine_cores


@dataclass(frozen=True)
class Task:
    env: str
    target: float
    mix: dict[str, float] | None = None
    """The tournament's algorithm mix; ``None``: podium's default (``TournamentConfig.algos``), in its order,
    which decides who plays the first round when there are fewer slots than algorithms."""


TASKS: dict[str, Task] = {
    "pendulum": Task("Pendulum-v1", -150.0),
    "mcc": Task("MountainCarContinuous-v0", 90.0),
    "acrobot": Task("Acrobot-v1", -80.0, {"ppo": 1.0, "dqn": 1.0}),  # discrete actions: not SAC or TD3
    # gymnasium's Box2D envs (pip install -e ".[box2d]"), through podium's gymnasium adapter
    "lunar": Task("LunarLanderContinuous-v3", 200.0),
    "bipedal": Task("BipedalWalker-v3", 300.0),
}


def task_mix(task: Task) -> dict[str, float]:
    """``task``'s mix, podium's default one unless the task names its own."""
    if task.mix is not None:
        return task.mix
    from podium.tournament.config import TournamentConfig

    return dict(TournamentConfig.model_fields["algos"].default_factory())


DEFAULT_TASKS = "pendulum,acrobot"
BOX2D_ENVS = ("LunarLanderContinuous-v3", "BipedalWalker-v3")
# tables before 2026-12-07 label the leaderboard scheme (then podium's default) plain "tournament"
SCHEME_LABELS = {"leaderboard": "tournament (leaderboard)", "truncation": "tournament (truncation)"}


@dataclass
class Run:
    """One run, as written to the CSV."""

    task: str
    env: str
    target: float
    contestant: str  # "tournament" or "single ALGO" (+ " (N threads)" when several thread counts run)
    algos: str  # the mix ("ppo:sac:td3=1:1:1") or the single pod's algorithm
    seed_index: int
    seed: int
    budget_s: float
    cores: int
    pods: int  # pool size (tournament) or 1
    threads_per_pod: int
    round_s: float | None
    reached: bool  # reached the target within the budget, counted from the launch
    time_to_target_s: float | None  # from the launch of the run's process, start-up and evaluations included
    podium_reached: bool | None  # podium's own reached_target (may include a late final evaluation)
    podium_time_to_target_s: float | None  # podium's own clock (from the start of Pod.run / Orchestrator.run)
    startup_s: float | None  # launch -> start of Pod.run / Orchestrator.run
    best_score: float | None
    champion_algo: str | None
    pods_started: int | None
    pods_failed: int | None
    steps: int | None  # env steps (the tournament: all finished rounds together)
    stop_reason: str | None
    wall_s: float  # wall-clock seconds of the whole process, wind-down included
    error: str = ""
    first_round_overhead_s: float | None = None  # tournament: median seconds a slot's first pod spent outside training
    round_overhead_s: float | None = None  # tournament: the same for later pods (their process is reused)
    fresh: float | None = None  # the yardstick's score of the policy that reached the target (None: none did)


# ----------------------------------------------------------------------------- worker (one run per process)
def _worker(job_file: str, launched: float) -> int:
    """Run one contestant (the job in ``job_file``) and write ``result.json`` beside it."""
    job = json.loads(Path(job_file).read_text())
    out = Path(job_file).with_name("result.json")
    if job["kind"] == "tournament":
        from podium.tournament import load_tournament_config, start_ahead

        remaining = job["seconds"] - (time.time() - launched)
        pod_fields: dict[str, Any] = {"seconds": job["round"], "tensorboard": False}
        if job["eval_every"]:
            pod_fields["eval_every"] = job["eval_every"]
        config = load_tournament_config(
            None,
            env=job["env"],
            algos=job["mix"],
            target=job["target"],
            seconds=remaining,
            pod=pod_fields,
            pool={"min": job["cores"], "max": job["cores"], "cpus_per_pod": 1},
            seed=job["seed"],
            backend="process",
            generator={"scheme": job["scheme"]},
        )
        start_ahead(config)  # as podium.tournament.tournament and `podium tournament` do, before torch
        from podium.tournament.orchestrator import Orchestrator

        orchestrator = Orchestrator.start(config, run_dir=job["run_dir"], backend="process", progress=False)
        started = time.time()
        t_report = orchestrator.run()
        champion = t_report.champion
        result = {
            "startup": started - launched,
            "podium_reached": t_report.reached_target,
            "podium_ttt": t_report.time_to_target,
            "best_score": champion.score_mean if champion else None,
            "champion_algo": champion.algo if champion else None,
            "pods_started": t_report.pods_started,
            "pods_failed": t_report.pods_failed,
            "steps": t_report.total_steps,
            "stop_reason": t_report.stop_reason,
            "policy": champion.checkpoint if champion and t_report.reached_target else None,
            **_round_overheads(orchestrator.board.pods("finished"), job["cores"]),
        }
    elif job["kind"] == "pbt":
        result = _ray_tune_pbt(job, launched)
    else:
        from podium.api import make_spec
        from podium.pod import Pod

        remaining = job["seconds"] - (time.time() - launched)
        # exactly what podium.train(env, algo, ...) does, with the start of Pod.run timed
        spec = make_spec(
            None,
            env=job["env"],
            algo=job["algo"],
            target=job["target"],
            seconds=remaining,
            seed=job["seed"],
            torch_threads=job["threads"],
            eval_every=job["eval_every"],
            tensorboard=False,
        )
        pod = Pod(spec, run_dir=job["run_dir"])
        started = time.time()
        p_report = pod.run()
        result = {
            "startup": started - launched,
            "podium_reached": p_report.reached_target,
            "podium_ttt": p_report.time_to_target,
            "best_score": p_report.score_mean,
            "champion_algo": job["algo"],
            "pods_started": 1,
            "pods_failed": 0,
            "steps": p_report.steps,
            "stop_reason": p_report.stop_reason,
            "policy": job["run_dir"] if p_report.reached_target else None,  # its saved policy, podium.load's
        }
    out.write_text(json.dumps(result))
    return 0


def _ray_tune_pbt(job: dict[str, Any], launched: float) -> dict[str, Any]:
    """Ray Tune's PBT scheduler driving podium pods: the peer a user would pick to tune podium.

    Population = ``cores`` trials, one CPU each, trial ``i`` of the mix's ``i % len(mix)``-th algorithm with
    podium's preset. A training iteration is one pod round of ``round`` seconds that continues from the
    trial's last checkpoint (networks, optimisers, normalisers and replay buffer, as a tournament child gets
    them) and reports the round's last evaluation mean. PBT's defaults otherwise: every ``round`` seconds of a
    trial's time the bottom quantile copies a top trial's checkpoint and configuration (its algorithm
    included), then perturbs the algorithm's mutable hyperparameters by x0.8/x1.2 or resamples them (25%)
    from the ranges podium declares. The pod's target confirmation is on, as in the tournament; the run stops
    as soon as any trial confirms the target, or at the budget.
    """
    for name, value in {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # keep Ray on 127.0.0.1 (docs/cluster.md)
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
    }.items():
        os.environ.setdefault(name, value)
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    from podium.algos import get_algo
    from podium.api import make_spec
    from podium.tournament.generator import effective_hparams

    algos = list(job["mix"])
    common = {"env": job["env"], "target": job["target"], "torch_threads": 1, "tensorboard": False}
    if job["eval_every"]:
        common["eval_every"] = job["eval_every"]
    space: dict[str, Any] = {}
    mutations: dict[str, Any] = {}
    for algo in algos:
        declared = get_algo(algo).Config.mutable
        base = effective_hparams(make_spec(None, algo=algo, seed=0, **common))
        space[algo] = {name: base[name] for name in declared}
        mutations[algo] = {
            name: tune.loguniform(low, high) if low > 0 else tune.uniform(low, high)
            for name, (low, high) in declared.items()
        }

    def trainable(config: dict[str, Any]) -> None:
        import tempfile as _tempfile

        from podium.pod import Pod

        restored = tune.get_checkpoint()
        steps = 0
        while True:
            algo = config["algo"]
            hparams = {**effective_hparams(make_spec(None, algo=algo, seed=0, **common)), **config[algo]}
            init = None
            if restored is not None:
                init = str(Path(restored.path) / "checkpoints" / "last.pt")
                steps = json.loads((Path(restored.path) / "pbt.json").read_text())["steps"]
            run_dir = Path(_tempfile.mkdtemp(prefix="pbt-round-")) / "run"
            spec = make_spec(
                None,
                algo=algo,
                seed=int(config["seed"]) + steps,
                seconds=job["round"],
                hparams=hparams,
                preset=False,
                init_checkpoint=init,
                **common,
            )
            pod = Pod(spec, run_dir=run_dir)
            started = time.time()  # the pod's clock starts with run(): its time to target counts from here
            report = pod.run()
            steps += report.steps
            reached_at = started + report.time_to_target if report.reached_target else None
            (run_dir / "pbt.json").write_text(json.dumps({"steps": steps}))
            metrics = {
                "score": report.last_mean,
                "best": report.score_mean,
                "steps": steps,
                "reached": bool(report.reached_target),
                "reached_at": reached_at or 0.0,
                "algo_index": algos.index(algo),
                "run_dir": str(run_dir),
            }
            checkpoint = tune.Checkpoint.from_directory(str(run_dir))
            tune.report(metrics, checkpoint=checkpoint)
            restored = checkpoint  # the next round continues from this one unless PBT swaps it

    class AnyReached(tune.Stopper):
        """Stop every trial once one confirmed the target."""

        def __init__(self) -> None:
            self.done = False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            self.done = self.done or bool(result.get("reached"))
            return self.done

        def stop_all(self) -> bool:
            return self.done

    cores = job["cores"]
    ray.init(
        address="local", num_cpus=cores, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False
    )
    try:
        scheduler = PopulationBasedTraining(
            time_attr="time_total_s",
            perturbation_interval=job["round"],
            hyperparam_mutations=mutations,
            perturbation_factors=(1.2, 0.8),
            resample_probability=0.25,
        )
        seeds = iter(range(job["seed"] * 1000, job["seed"] * 1000 + cores))
        algo_of = iter([algos[i % len(algos)] for i in range(cores)])
        space = {
            **space,
            "algo": tune.sample_from(lambda _: next(algo_of)),
            "seed": tune.sample_from(lambda _: next(seeds)),
        }
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space=space,
            tune_config=tune.TuneConfig(
                scheduler=scheduler,
                metric="score",
                mode="max",
                num_samples=cores,
                time_budget_s=max(1.0, job["seconds"] - (time.time() - launched)),
                max_concurrent_trials=cores,
            ),
            run_config=tune.RunConfig(
                name="pbt",
                storage_path=str(Path(job["run_dir"]).resolve()),
                stop=AnyReached(),
                verbose=0,
            ),
        )
        started = time.time()
        grid = tuner.fit()
    finally:
        ray.shutdown()
    frames = [r.metrics_dataframe for r in grid if r.metrics_dataframe is not None and len(r.metrics_dataframe)]
    policy = None
    errors = [r.error for r in grid if r.error]
    if errors and not frames:  # nothing trained: say why rather than report a run that did not reach
        raise RuntimeError(f"every Ray Tune trial failed; the first: {errors[0]}")
    reached = [t for f in frames for t, ok in zip(f["reached_at"], f["reached"], strict=True) if ok]
    best = max((float(f["best"].max()) for f in frames), default=None)
    champion = None
    if reached:
        winner = min(
            frames,
            key=lambda f: min((t for t, ok in zip(f["reached_at"], f["reached"], strict=True) if ok), default=1e300),
        )
        champion = algos[int(winner["algo_index"].iloc[-1])]
        first = min(
            (t, d) for t, ok, d in zip(winner["reached_at"], winner["reached"], winner["run_dir"], strict=True) if ok
        )
        policy = first[1]  # the round that confirmed the target first
    return {
        "policy": policy if reached else None,
        "startup": started - launched,
        "podium_reached": bool(reached),
        "podium_ttt": (min(reached) - started) if reached else None,
        "best_score": best,
        "champion_algo": champion,
        "pods_started": sum(len(f) for f in frames),
        "pods_failed": sum(1 for r in grid if r.error),
        "steps": sum(int(f["steps"].iloc[-1]) for f in frames),
        "stop_reason": "target" if reached else "seconds",
    }


# ----------------------------------------------------------------------------- driver
def _mix_text(mix: dict[str, float]) -> str:
    return ":".join(mix) + "=" + ":".join(f"{w:g}" for w in mix.values())


def _parse_mix(text: str) -> dict[str, float]:
    """``ppo=1,sac=2`` -> {"ppo": 1.0, "sac": 2.0}."""
    mix = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        mix[name.strip().lower()] = float(weight) if weight else 1.0
    return mix


def run_one(
    job: dict[str, Any], keep: bool, grace: float, python: str = sys.executable
) -> tuple[dict[str, Any] | None, float, str, str]:
    """Launch one run's process (with ``python``) and wait for it; returns (result or None, wall seconds,
    error, temp dir)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"podium-tvs-{job['task']}-{job['kind']}-s{job['seed_index']}-"))
    job = {**job, "run_dir": str(tmp / "run")}
    job_file = tmp / "job.json"
    job_file.write_text(json.dumps(job))
    log_path = tmp / "worker.log"
    error = ""
    with log_path.open("wb") as log:
        launched = time.time()
        proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", str(job_file), repr(launched)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=job["seconds"] + grace)
        except subprocess.TimeoutExpired:
            error = f"still running {job['seconds'] + grace:.0f} s after launch; interrupted"
            proc.send_signal(signal.SIGINT)  # the orchestrator stops its pods in order on Ctrl-C
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            proc.wait()
            raise
    wall = time.time() - launched
    result_file = tmp / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else None
    if result is not None and result.get("policy"):  # the yardstick, outside the run's time
        from vs_sb3 import fresh_score

        import podium

        result["fresh"] = fresh_score(podium.load(result["policy"]).act, job["env"])
    if result is None and not error:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        error = f"exit code {proc.returncode}: " + (tail[-1] if tail else "no output")
        print("      worker log (tail):\n        " + "\n        ".join(tail), flush=True)
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return result, wall, error, str(tmp)


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = ".1f") -> str:
    return format(value, spec) if value is not None else "—"


def _round_overheads(pods: list[Any], slots: int) -> dict[str, float | None]:
    """Median seconds a finished pod spent outside its training (start-up, building, final evaluation,
    reporting; ``ended - started - wall_time`` in the tournament's pods table): for the first ``slots``
    pods, which start a process each, and for the later ones, which run in a finished pod's process."""
    spent = sorted(
        (p.number, (p.ended - p.started) - (p.wall_time or 0.0))
        for p in pods
        if p.ended and p.started and p.attempts == 1
    )
    first = [x for n, x in spent if n <= slots]
    later = [x for n, x in spent if n > slots]
    return {
        "first_round_overhead_s": round(statistics.median(first), 3) if first else None,
        "round_overhead_s": round(statistics.median(later), 3) if later else None,
    }


def read_runs(path: Path) -> list[Run]:
    """The runs a previous invocation wrote to ``path`` (its ``--out`` CSV)."""
    parse = {"int": int, "float": float, "bool": lambda v: v == "True", "str": str}
    runs = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            values: dict[str, Any] = {}
            for f in fields(Run):
                kind, optional = str(f.type).split(" | ")[0], "None" in str(f.type)
                text = row.get(f.name, "")
                values[f.name] = None if optional and text in ("", "None") else parse[kind](text)
            runs.append(Run(**values))
    return runs


def print_table(runs: list[Run]) -> None:
    """The markdown table for BENCHMARKS.md: a row per task and contestant, in the order they ran."""
    print(
        "*success* = target reached within the budget; *median t* = median time to target over all runs, a "
        "failure counted as never reached; *median t (ok)* = median over the successful runs only; *worst t* = "
        "the slowest run's time to target; times include process start-up and evaluations; *best* = median "
        "of the best score at "
        "the end of the run (a run may overrun its budget by a few seconds: a pod's last iteration and final "
        "evaluation, the tournament's last rounds, whose pods' start-up is not in their round; a target reached "
        "then does not count as a success)."
    )
    print()
    print("| task | contestant | success | median t s | median t (ok) s | worst t s | median best | median steps |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    cells = list(dict.fromkeys((r.task, r.contestant) for r in runs))
    mixed, shown_task = False, None
    for name, contestant in cells:
        rs = [r for r in runs if r.task == name and r.contestant == contestant]
        budget = max(r.budget_s for r in rs)
        mixed = mixed or any(r.budget_s != budget for r in rs)
        ok = [r.time_to_target_s for r in rs if r.reached and r.time_to_target_s is not None]
        every = [r.time_to_target_s if r.reached and r.time_to_target_s is not None else math.inf for r in rs]
        best = median_or_none([r.best_score for r in rs if r.best_score is not None])
        steps = median_or_none([float(r.steps) for r in rs if r.steps is not None])
        label = contestant if contestant.startswith("single") else f"{contestant} {rs[0].algos}"
        middle = statistics.median(every)
        median_text = fmt(middle) if math.isfinite(middle) else "not reached"
        cell = f"{rs[0].env} ≥ {rs[0].target:g}" if name != shown_task else ""
        shown_task = name
        worst = "not reached" if len(ok) < len(rs) else fmt(max(ok) if ok else None)
        print(
            f"| {cell} | {label} | {sum(r.reached for r in rs)}/{len(rs)} | {median_text} | "
            f"{fmt(median_or_none(ok))} | {worst} | {fmt(best)} | {fmt(steps, ',.0f')} |"
        )
    print()
    if mixed:
        print("Some cells mix runs of different budgets.")


def main() -> None:
    from podium.tournament.config import GeneratorConfig

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated, of {', '.join(TASKS)}")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (seed indices 0..N-1)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="first seed index (seeds FIRST..FIRST+N-1), to add seeds to a row"
    )
    parser.add_argument("--target", type=float, default=None, help="target for every task given (default: task's)")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall-clock budget per run, from its launch")
    parser.add_argument(
        "--round",
        type=float,
        default=None,
        help="seconds per pod round in the tournament and per Ray Tune PBT iteration (default: podium's, pod.seconds)",
    )
    parser.add_argument(
        "--mix",
        default=None,
        help="tournament mix for every task, e.g. ppo=1,sac=2 (default: podium's; Acrobot: ppo, dqn)",
    )
    parser.add_argument(
        "--single", default=None, help='algorithms run as a single pod, e.g. sac,td3 (default: mix; "": none)'
    )
    parser.add_argument(
        "--single-threads", default=None, help="torch threads of a single pod, comma-separated (default: cores)"
    )
    parser.add_argument("--cores", type=int, default=None, help="cores to use (default: all this process may use)")
    parser.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (both sides)")
    parser.add_argument("--out", default="benchmarks/results/tournament_vs_single.csv", help="raw runs (CSV)")
    parser.add_argument("--keep", action="store_true", help="keep each run's temporary run directory")
    parser.add_argument("--grace", type=float, default=120.0, help="seconds past the budget before a run is stopped")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 seed, 30 s, pendulum only")
    parser.add_argument(
        "--schemes",
        default=GeneratorConfig.model_fields["scheme"].default,
        help="tournament contestants by generator.scheme, comma-separated: "
        f"{', '.join(SCHEME_LABELS)} (default: podium's, %(default)s); empty = no tournament",
    )
    parser.add_argument(
        "--pbt", action="store_true", help="also run Ray Tune's PBT scheduler driving podium pods (needs ray[tune])"
    )
    parser.add_argument(
        "--pbt-python",
        default=None,
        help="interpreter with ray[tune] and podium for --pbt (default: .venv-rllib/bin/python if it exists)",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="CSV",
        help="print the table of runs saved in these CSVs (e.g. seeds measured on different days) and exit",
    )
    parser.add_argument("--worker", nargs=2, metavar=("JOB", "LAUNCHED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.exit(_worker(args.worker[0], float(args.worker[1])))
    if args.table:
        missing = [f for f in args.table if not Path(f).is_file()]
        if missing:
            parser.error(f"--table: no such file {missing[0]}")
        saved = [run for f in args.table for run in read_runs(Path(f))]
        print(f"runs from {', '.join(args.table)}")
        print()
        print_table(saved)
        return
    if args.quick:
        args.seeds, args.seconds, args.tasks = 1, 30.0, "pendulum"
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for name in tasks:
        if TASKS[name].env in BOX2D_ENVS:
            try:
                import Box2D  # noqa: F401
                import pygame  # noqa: F401
            except ImportError:
                parser.error(f'--tasks {name} needs gymnasium\'s Box2D envs: pip install -e ".[box2d]"')
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    if any(s not in SCHEME_LABELS for s in schemes):
        parser.error(f"--schemes: choose from {', '.join(SCHEME_LABELS)}")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.first_seed < 0:
        parser.error("--first-seed must be at least 0")
    if args.target is not None:
        for name in tasks:
            TASKS[name] = replace(TASKS[name], target=args.target)
    if args.round is None:  # podium's default round: what `podium tournament` gives a pod without pod.seconds
        from podium.tournament.config import TournamentConfig

        args.round = float(TournamentConfig.model_fields["pod"].default_factory()["seconds"])
    cores = args.cores or machine_cores()
    thread_counts = [int(t) for t in args.single_threads.split(",")] if args.single_threads else [cores]
    if any(t < 1 for t in thread_counts):
        parser.error("--single-threads: thread counts must be at least 1")
    threads_text = " / ".join(map(str, thread_counts))
    from podium.algos import get_algo

    for text in filter(None, [args.mix and ",".join(_parse_mix(args.mix)), args.single]):
        for algo in text.split(","):
            try:
                get_algo(algo.strip())
            except KeyError as exc:
                parser.error(str(exc.args[0]))

    command = (
        "python benchmarks/tournament_vs_single.py" + ("" if len(sys.argv) < 2 else " ") + shlex.join(sys.argv[1:])
    )
    machine = f"{describe()}, {cores} used"
    print(f"machine: {machine}")
    print(f"command: {command}")
    print(
        f"budget {args.seconds:g} s per run from its launch; tournament: {cores} pods x 1 thread, "
        f"{args.round:g} s rounds; single pod: {threads_text} thread(s); {args.seeds} seed(s)",
        flush=True,
    )

    pbt_python = sys.executable
    if args.pbt:
        local = Path(__file__).resolve().parent.parent / ".venv-rllib" / "bin" / "python"
        pbt_python = args.pbt_python or (str(local) if local.is_file() else sys.executable)
        box2d = any(TASKS[name].env in BOX2D_ENVS for name in tasks)
        code = "import ray.tune, podium" + (", Box2D" if box2d else "")
        probe = subprocess.run([pbt_python, "-c", code], capture_output=True, text=True)
        if probe.returncode:
            parser.error(
                f"--pbt: {pbt_python} cannot import ray.tune and podium{' and Box2D' if box2d else ''}; make an "
                "environment with them (python3 -m venv .venv-rllib && .venv-rllib/bin/pip install torch==2.13.0 "
                f'-e . "ray[tune]==2.60.0"{" box2d==2.3.10 pygame-ce" if box2d else ""}) or name one with --pbt-python'
            )
        print(f"Ray Tune PBT runs with {pbt_python}", flush=True)

    runs: list[Run] = []
    plan: list[tuple[str, list[tuple[str, str | None, int]]]] = []
    for name in tasks:
        mix = _parse_mix(args.mix) if args.mix else task_mix(TASKS[name])
        # --single "": no single pods (e.g. to add Ray Tune PBT runs to a row)
        singles = (
            [a.strip().lower() for a in args.single.split(",") if a.strip()] if args.single is not None else list(mix)
        )
        contestants: list[tuple[str, str | None, int]] = [(SCHEME_LABELS[s], None, 1) for s in schemes]
        if args.pbt:
            contestants.append(("ray tune pbt", "pbt", 1))
        for a in singles:
            for t in thread_counts:
                label = f"single {a}" + (f" ({t} thread{'s' if t > 1 else ''})" if len(thread_counts) > 1 else "")
                contestants.append((label, a, t))
        plan.append((name, contestants))

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:  # a row per run as it ends: an interrupted benchmark keeps its runs
        csv.DictWriter(fh, fieldnames=[f.name for f in fields(Run)]).writeheader()
    seed_indices = range(args.first_seed, args.first_seed + args.seeds)
    for name, contestants in plan:
        task = TASKS[name]
        mix = _parse_mix(args.mix) if args.mix else task_mix(task)
        for index in seed_indices:
            for contestant, algo, threads in contestants:
                tournament = algo is None
                population = tournament or algo == "pbt"  # several pods at once, one per core
                seed = index  # the tournament's seed and each pod's seed follow the seed index
                job = {
                    "task": name,
                    "kind": "tournament" if tournament else algo,
                    "scheme": next((s for s, label in SCHEME_LABELS.items() if label == contestant), None),
                    "env": task.env,
                    "target": task.target,
                    "mix": mix,
                    "algo": algo,
                    "seed": seed,
                    "seed_index": index,
                    "seconds": args.seconds,
                    "round": args.round,
                    "cores": cores,
                    "threads": threads,
                    "eval_every": args.eval_every,
                }
                print(f"  {name:<9} seed {index} {contestant:<12} running ...", flush=True)
                python = pbt_python if algo == "pbt" else sys.executable
                result, wall, error, where = run_one(job, args.keep, args.grace, python)
                r = result or {}
                podium_ttt = r.get("podium_ttt")
                ttt = r["startup"] + podium_ttt if result and podium_ttt is not None else None
                fresh = r.get("fresh")
                in_time = bool(r.get("podium_reached")) and ttt is not None and ttt <= args.seconds
                reached = in_time and fresh is not None and fresh >= task.target
                run = Run(
                    task=name,
                    env=task.env,
                    target=task.target,
                    contestant=contestant,
                    algos=_mix_text(mix) if population else str(algo),
                    seed_index=index,
                    seed=seed,
                    budget_s=args.seconds,
                    cores=cores,
                    pods=cores if population else 1,
                    threads_per_pod=threads,
                    round_s=args.round if population else None,
                    reached=reached,
                    time_to_target_s=round(ttt, 3) if ttt is not None else None,
                    podium_reached=r.get("podium_reached"),
                    podium_time_to_target_s=podium_ttt,
                    startup_s=round(r["startup"], 3) if result else None,
                    best_score=r.get("best_score"),
                    champion_algo=r.get("champion_algo"),
                    pods_started=r.get("pods_started"),
                    pods_failed=r.get("pods_failed"),
                    steps=r.get("steps"),
                    stop_reason=r.get("stop_reason"),
                    first_round_overhead_s=r.get("first_round_overhead_s"),
                    round_overhead_s=r.get("round_overhead_s"),
                    fresh=round(fresh, 2) if fresh is not None else None,
                    wall_s=round(wall, 3),
                    error=error,
                )
                runs.append(run)
                with out.open("a", newline="") as fh:
                    csv.DictWriter(fh, fieldnames=[f.name for f in fields(Run)]).writerow(asdict(run))
                if error:
                    shown = f"ERROR {error}"
                elif reached:
                    shown = f"target in {ttt:.1f} s, fresh {fresh:.1f}"
                elif in_time:
                    shown = f"reached in {ttt:.1f} s but scored {fmt(fresh)} on the fresh episodes: not confirmed"
                else:
                    late = f" (podium: reached at {ttt:.1f} s, past the budget)" if ttt is not None else ""
                    shown = f"not reached{late}"
                extra = (
                    f", pods {run.pods_started}, champion {run.champion_algo}, overhead per round "
                    f"{fmt(run.first_round_overhead_s, '.2f')} s first / {fmt(run.round_overhead_s, '.2f')} s later"
                    if tournament
                    else ""
                )
                print(
                    f"  {name:<9} seed {index} {contestant:<12} {shown}; best {fmt(run.best_score)}, "
                    f"start-up {fmt(run.startup_s, '.1f')} s, {fmt(run.steps, ',')} steps{extra}, "
                    f"wall {wall:.1f} s" + (f"; kept {where}" if args.keep else ""),
                    flush=True,
                )

    print()
    print(f"Machine: {machine}.")
    print(
        f"Budget {args.seconds:g} s of wall-clock per run, counted from the launch of the run's process; "
        f"{args.seeds} seed(s) (indices {seed_indices[0]}–{seed_indices[-1]}) per cell, runs one at a time. "
        f"Tournament: process backend, {cores} pods × 1 thread, {args.round:g} s rounds. "
        f"Single pod: podium's defaults and presets, {threads_text} torch thread(s)."
    )
    print()
    print(f"`{command}`")
    print()
    print_table(runs)
    print(f"raw runs: {out}")


if __name__ == "__main__":
    main()
