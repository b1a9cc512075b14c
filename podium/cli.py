"""The ``podium`` command. Every sub-command is a thin layer over the Python API of the same name.

Importing this module costs only typer and rich: each command imports what it needs (torch, the
tournament, pandas) when it runs, so ``podium --help`` and mistakes in the arguments answer at once.
Paths are printed whole (never wrapped), so they can be copied from the terminal.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from podium.tournament import TournamentConfig, TournamentReport

app = typer.Typer(
    name="podium",
    help="Massively parallel deep RL in PyTorch: pods race in a tournament, a leaderboard keeps the best.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


def _fail(message: str) -> typer.Exit:
    """Print ``error: MESSAGE`` (never wrapped, never read as markup) and return the exit to raise (code 2)."""
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code=2)


def _say(text: str) -> None:
    """Print a line that may hold paths: rich markup allowed, never wrapped (paths stay whole for copying)."""
    console.print(text, soft_wrap=True)


@contextlib.contextmanager
def _warnings_said() -> Iterator[None]:
    """Python warnings raised inside (e.g. a tournament holding fewer entries than ``--top-k`` asks for) are
    printed as the CLI's own ``warning: MESSAGE`` lines, not as ``FILE:LINE: UserWarning`` with a source line."""

    def say(message: Warning | str, *_: object, **__: object) -> None:
        console.print(f"[bold yellow]warning:[/] {escape(str(message))}", soft_wrap=True)

    with warnings.catch_warnings():
        warnings.showwarning = say
        yield


@app.command("envs")
def envs_command() -> None:
    """List podium's tensor-native environments (any gymnasium id also works, through the adapter)."""
    from podium.envs.registry import describe_space, list_envs

    table = Table(title="tensor-native environments (podium.envs.make)")
    table.add_column("id", style="bold")
    table.add_column("observation")
    table.add_column("action")
    table.add_column("time limit", justify="right")
    table.add_column("description")
    for spec in list_envs():
        obs, act, limit = spec.observation, spec.action, spec.time_limit
        if not (obs and act):  # registered without them: build one sub-env to find out
            try:
                env = spec.load()(num_envs=1, **spec.kwargs)
                obs, act = describe_space(env.single_observation_space), describe_space(env.single_action_space)
                limit = env.max_episode_steps
            except (ImportError, AttributeError, ValueError, OSError) as exc:
                obs, act, limit = "?", "?", f"unavailable: {exc}"
        table.add_row(spec.id, obs, act, "-" if limit is None else str(limit), escape(spec.description))
    console.print(table)
    _say("Any other gymnasium id (e.g. LunarLander-v3) runs through podium.envs.GymVecEnv.")


@app.command("throughput")
def throughput_command(
    env_id: Annotated[str, typer.Option("--env", help="environment id")] = "CartPole-v1",
    num_envs: Annotated[int, typer.Option("--num-envs", "-n", help="number of sub-environments")] = 4096,
    seconds: Annotated[float, typer.Option(help="how long to step, in seconds", min=0.001)] = 3.0,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or mps")] = "cpu",
    seed: Annotated[int, typer.Option(min=0, max=2**31 - 1, help="random seed")] = 0,
) -> None:
    """Step a batched environment with random actions and print its throughput (steps/second)."""
    import torch

    from podium.envs import make

    try:
        env = make(env_id, num_envs=num_envs, device=device, seed=seed)
    except (KeyError, ValueError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc
    env.reset()
    space = env.single_action_space
    gen = torch.Generator(device=env.device).manual_seed(seed)

    def random_actions() -> torch.Tensor:
        if env.discrete:
            return torch.randint(0, int(space.n), (num_envs,), generator=gen, device=env.device)
        low = torch.as_tensor(space.low, device=env.device)
        high = torch.as_tensor(space.high, device=env.device)
        u = torch.rand((num_envs, *space.shape), generator=gen, device=env.device)
        return low + u * (high - low)

    _say(f"[bold]podium throughput[/]: {escape(repr(env))}, random actions for {seconds:.1f} s")
    for _ in range(10):  # warm-up
        env.step(random_actions())
    steps, episodes, returns = 0, 0, 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, _, _, info = env.step(random_actions())
        steps += 1
        finished = info["_episode_return"]
        episodes += int(finished.sum())
        returns += float(info["episode_return"][finished].sum())
    elapsed = time.perf_counter() - start
    env.close()
    table = Table(show_header=False)
    table.add_row("sub-environments", f"{num_envs:,}")
    table.add_row("env steps", f"{steps * num_envs:,}")
    table.add_row("throughput", f"[bold green]{steps * num_envs / elapsed:,.0f} steps/s[/]")
    table.add_row("episodes finished", f"{episodes:,}")
    if episodes:
        table.add_row("mean episode return (random policy)", f"{returns / episodes:.2f}")
    console.print(table)


def _parse_hparams(items: list[str]) -> dict[str, object]:
    """``--hparam key=value`` pairs; values are parsed as YAML scalars (numbers, booleans, lists)."""
    import yaml

    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _fail(f"--hparam expects key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


_TRAIN_OPTIONS = {
    "env": "--env",
    "algo": "--algo",
    "num_envs": "--num-envs",
    "steps": "--steps",
    "seconds": "--seconds",
    "target": "--target",
    "device": "--device",
    "seed": "--seed",
    "eval_every": "--eval-every",
    "hparams": "--hparam",
}
"""The PodSpec field each option of ``podium train`` sets, so that a bad value is blamed on the option."""


@app.command("train")
def train_command(
    env_id: Annotated[
        str | None, typer.Argument(metavar="ENV", help="environment id, as --env (podium train CartPole-v1 ...)")
    ] = None,
    env: Annotated[str | None, typer.Option(help="environment id, e.g. Pendulum-v1")] = None,
    algo: Annotated[str | None, typer.Option(help="ppo, sac, td3, ddpg, dqn, d3qn")] = None,
    num_envs: Annotated[int | None, typer.Option("--num-envs", help="training sub-environments")] = None,
    steps: Annotated[int | None, typer.Option(help="budget in env steps")] = None,
    seconds: Annotated[float | None, typer.Option(help="budget in wall-clock seconds")] = None,
    target: Annotated[float | None, typer.Option(help="stop once a policy is confirmed at this score")] = None,
    no_target: Annotated[
        bool, typer.Option("--no-target", help="with --resume: drop the run's target and train on to its budgets")
    ] = False,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N, mps")] = None,
    seed: Annotated[int | None, typer.Option(help="random seed")] = None,
    config: Annotated[str | None, typer.Option(help="YAML file of pod-spec fields")] = None,
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="output directory")] = None,
    resume: Annotated[str | None, typer.Option(help="continue the run in this directory")] = None,
    hparam: Annotated[list[str] | None, typer.Option(help="algorithm hyperparameter key=value (repeatable)")] = None,
    eval_every: Annotated[int | None, typer.Option("--eval-every", help="env steps between evaluations")] = None,
    overwrite: Annotated[bool, typer.Option(help="delete a previous run in --run-dir first")] = False,
    progress: Annotated[
        bool | None, typer.Option("--progress/--no-progress", help="progress bar (default: on a terminal)")
    ] = None,
) -> None:
    """Train one agent (a pod) and print its report. Ctrl-C saves a checkpoint to resume from."""
    if env_id is not None:  # as podium.train(env, algo): the id may come first, without --env
        if env is not None and env != env_id:
            raise _fail(f"two environments: {env_id} and --env {env}; give one")
        env = env_id
    if resume is None and env is None and config is None:
        raise _fail("give --env (and --algo), a --config file, or --resume RUN_DIR")
    hparams = _parse_hparams(hparam or [])  # before importing torch: a typo answers at once
    if env is not None:
        from podium.envs.registry import check_env_id

        try:
            check_env_id(env)
        except KeyError as exc:
            raise _fail(exc.args[0]) from None
    from podium.api import NothingToDoWarning, make_spec, train
    from podium.config import ConfigError
    from podium.pod import EvaluationError, PodInterrupted, TrainingDivergedError
    from podium.pod.pod import LearnerError
    from podium.pod.worker import WorkerError
    from podium.store import CheckpointError

    fields = {
        "num_envs": num_envs,
        "steps": steps,
        "seconds": seconds,
        "target": target,
        "device": device,
        "seed": seed,
        "eval_every": eval_every,
        "hparams": hparams or None,
    }
    fields = {k: v for k, v in fields.items() if v is not None}  # options not given
    if no_target:
        if resume is None or target is not None:
            raise _fail("--no-target drops a resumed run's target: give it with --resume RUN_DIR, without --target")
        fields["target"] = None  # dropped: podium.train(resume=..., target=None)
    try:
        if resume is None:  # a bad value names the option that gave it (train() would blame the file)
            make_spec(config, env=env, algo=algo, options=_TRAIN_OPTIONS, **fields)
        with _warnings_said():
            warnings.simplefilter("ignore", NothingToDoWarning)  # its message is the report's note, printed below
            report = train(
                env,
                algo,
                config=config,
                run_dir=run_dir,
                resume=resume,
                overwrite=overwrite,
                progress=progress,
                **fields,
            )
    except PodInterrupted as exc:
        console.print(f"[bold yellow]interrupted:[/] {exc}", soft_wrap=True)
        raise typer.Exit(code=exc.exit_code) from None
    except KeyboardInterrupt as exc:  # before the pod's loop (imports, envs, checks), or a second Ctrl-C
        why = str(exc) or "before training started; no checkpoint was written"
        console.print(f"[bold yellow]interrupted:[/] {escape(why)}", soft_wrap=True)
        raise typer.Exit(code=130) from None
    except (ConfigError, CheckpointError, KeyError, ValueError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc
    except (TrainingDivergedError, EvaluationError, WorkerError, LearnerError) as exc:
        raise _fail(str(exc)) from exc
    if report.message:
        console.print(f"[bold yellow]note:[/] {report.message}", soft_wrap=True)
    table = Table(title="pod report", title_justify="left", show_header=False)
    table.add_row("best score", f"{report.score_mean:.2f} ± {report.score_std:.2f}")
    table.add_row("last evaluation", f"{report.last_mean:.2f} ± {report.last_std:.2f}")
    table.add_row("env steps", f"{report.steps:,}")
    table.add_row("wall time", f"{report.wall_time:.1f} s")
    if report.reached_target and report.time_to_target is not None and report.steps_to_target is not None:
        when = f"after {report.time_to_target:.1f} s ({report.steps_to_target:,} steps)"
        if report.confirmed_mean is not None:
            when = f"confirmed {report.confirmed_mean:.2f} on {report.confirmed_episodes} fresh episodes {when}"
        table.add_row("reached target", when)
    elif not report.reached_target and report.target is not None:
        why = "was not confirmed on fresh episodes" if report.score_mean >= report.target else "fell short"
        table.add_row("reached target", f"[bold red]no[/]: {report.target:g} not reached (the best evaluation {why})")
    table.add_row("stopped by", report.stop_reason)
    console.print(table)
    _say(f"run dir: {escape(str(report.run_dir))}")
    _say(f"best checkpoint: {escape(str(report.checkpoint))}")


@app.command("eval")
def eval_command(
    path: Annotated[str, typer.Argument(help="run directory (uses its best checkpoint) or checkpoint file")],
    episodes: Annotated[int, typer.Option(help="evaluation episodes, run in parallel")] = 32,
    seed: Annotated[int, typer.Option(min=0, max=2**31 - 1, help="evaluation seed")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps")] = "cpu",
) -> None:
    """Evaluate a trained policy: mean and std of the return over N episodes."""
    from podium.api import load
    from podium.store import CheckpointError

    try:
        policy = load(path, device=device)
        with _warnings_said():
            mean, std = policy.evaluate(episodes=episodes, seed=seed)
    except (CheckpointError, ValueError, KeyError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc
    _say(f"{escape(str(policy))}: [bold]{mean:.2f} ± {std:.2f}[/] over {episodes} episodes")


# --------------------------------------------------------------------------- deployment
def _reason(exc: BaseException) -> str:
    """An error's message without Python's decorations (an OSError's errno, a KeyError's quotes)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc.args[0] if exc.args else exc)


_DEPLOY_PATH = "pod run directory (its best checkpoint), checkpoint file, or tournament run directory (its champion)"


@app.command("export")
def export_command(
    path: Annotated[str, typer.Argument(help=_DEPLOY_PATH)],
    out: Annotated[str | None, typer.Option(help="the .onnx file (default: beside the checkpoint)")] = None,
    top_k: Annotated[int, typer.Option(help="a tournament's best K as one ensemble policy", min=1)] = 1,
    opset: Annotated[int | None, typer.Option(help="ONNX opset version (default: the exporter's)")] = None,
) -> None:
    """Export a trained policy as an ONNX model (checked against podium's own actions with onnxruntime)."""
    from podium.deploy import ExportError, export_onnx

    try:
        with _warnings_said():
            written = export_onnx(path, out, top_k=top_k, opset=opset)
    except (*_tournament_errors(), ExportError, ValueError, ImportError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(written)).metadata_props}
    _say(f"ONNX model: {escape(str(written))}")
    _say(escape(f"input 'obs' {meta['observation']}, output 'action' {meta['action']}; checked with onnxruntime"))


@app.command("serve")
def serve_command(
    path: Annotated[str, typer.Argument(help=_DEPLOY_PATH)],
    host: Annotated[str, typer.Option(help="address to listen on (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free one)", min=0, max=65535)] = 8000,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps")] = "cpu",
    top_k: Annotated[int, typer.Option(help="a tournament's best K as one ensemble policy", min=1)] = 1,
) -> None:
    """Serve a trained policy over HTTP: POST /act {"obs": [...]} answers {"action": [...]}."""
    from podium.deploy import serve_policy

    try:
        with _warnings_said():
            serve_policy(path, host, port, device=device, top_k=top_k)
    except (*_tournament_errors(), ValueError, ImportError, OSError) as exc:
        raise _fail(_reason(exc)) from exc


@app.command("dashboard")
def dashboard_command(
    run_dir: Annotated[str, typer.Argument(help="a tournament's run directory (or an empty one it will start in)")],
    host: Annotated[str, typer.Option(help="address to listen on (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free one)", min=0, max=65535)] = 8050,
    db: Annotated[str | None, typer.Option(help="the leaderboard's database URL, if not the recorded one")] = None,
) -> None:
    """The live page of a tournament: status, leaderboard, pool, results and learning curves, redrawn every 2 s."""
    from podium.deploy.dashboard import serve_dashboard

    try:
        serve_dashboard(run_dir, host, port, database_url=db)
    except (*_tournament_errors(), ValueError, ImportError, OSError) as exc:
        raise _fail(_reason(exc)) from exc


# --------------------------------------------------------------------------- tournament
def _tournament_errors() -> tuple[type[BaseException], ...]:
    from podium.config import ConfigError
    from podium.store import CheckpointError
    from podium.tournament import DatabaseError
    from podium.tournament.backends import BackendError

    return (ConfigError, DatabaseError, CheckpointError, BackendError)


def _print_tournament(report: TournamentReport, trading: bool = False) -> None:
    from podium.tournament.view import leaderboard_table

    _say(f"[bold]leaderboard of {escape(report.run_dir)}[/]")
    console.print(leaderboard_table(report.entries, title=None))
    if report.lineage:
        chain = " <- ".join(f"{p['id']} ({p['algo']}, {p['score_mean']:.1f})" for p in report.lineage)
        _say(f"champion lineage: {chain}")
    reached = report.time_to_target
    ttt = f" ({reached:.1f} s into the run)" if reached is not None else ""
    _say(
        f"stopped after {report.elapsed:.1f} s: {escape(report.message)}{ttt}; "
        f"{report.pods_started} pods ({report.pods_failed} failed), {report.total_steps:,} env steps."
    )
    _say(f"report: {escape(report.run_dir)}/report.json, progress.png, champion.png")
    if report.entries:
        hints = [f"podium leaderboard {report.run_dir} --lineage champion"]
        if trading:
            hints.append(f"podium backtest {report.run_dir} --top-k 3")
        _say("next: " + escape("; ".join(hints)))


def _backtest_after(report: TournamentReport, config: TournamentConfig) -> None:
    """The config's ``backtest`` section, announced first (it takes a while: one backtest per snapshot)."""
    from podium.tournament.api import backtest_after

    b = config.backtest
    if b is None or not report.entries:
        return
    k = min(b.top_k, len(report.entries))
    what = f"the champion and the ensemble of the best {k} policies" if k > 1 else "the champion"
    curve = ", then every training snapshot (generalisation curve)" if b.generalisation else ""
    _say(f"backtest of {what} on {b.start}..{b.end}{curve} ...")
    backtest_after(report, config)
    for key, label in (("backtest", "champion"), ("backtest_ensemble", f"ensemble of {k}")):
        if key in report.extra:
            sharpe = report.extra[key]["metrics"].get("sharpe_ratio", {}).get("policy")
            tail = f", Sharpe {sharpe:.2f}" if isinstance(sharpe, float) else ""
            _say(f"backtest, {label}: {escape(report.extra[key]['out_dir'])}{tail}")


@app.command("tournament")
def tournament_command(
    config: Annotated[str, typer.Argument(help="tournament YAML file, or the word 'resume'", metavar="CONFIG|resume")],
    resume_dir: Annotated[
        str | None, typer.Argument(help="with 'resume': the run directory", metavar="RUN_DIR")
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(help="process (local subprocesses, the default), ray (Ray actors) or inline (this process)"),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(help="--backend ray: the Ray cluster's HOST:PORT or 'auto' (default: a local one on 127.0.0.1)"),
    ] = None,
    pods: Annotated[int | None, typer.Option(help="most pods at once (pool.max)")] = None,
    db: Annotated[str | None, typer.Option(help="leaderboard database URL (default: SQLite in the run dir)")] = None,
    run_dir: Annotated[
        str | None, typer.Option(help="output directory (default: runs/NAME, NAME = the config file's name)")
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="time budget (overrides the config)")] = None,
    steps: Annotated[int | None, typer.Option(help="env-step budget (overrides the config)")] = None,
    target: Annotated[float | None, typer.Option(help="target score (overrides the config)")] = None,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="live view")] = None,
    force: Annotated[bool, typer.Option(help="resume: take over from an orchestrator that looks alive")] = False,
) -> None:
    """Run a tournament: a pool of pods trains, a leaderboard keeps the best (podium tournament CONFIG.yaml);
    continue one after a crash or to extend it (podium tournament resume RUN_DIR)."""
    if config == "resume":
        if resume_dir is None:
            raise _fail("usage: podium tournament resume RUN_DIR")
        if db is not None or pods is not None or run_dir is not None:
            raise _fail("--db, --pods and --run-dir cannot change when resuming; they are in RUN_DIR/tournament.yaml")
        from podium.rundir import pod_not_tournament

        mistake = pod_not_tournament(resume_dir)
        if mistake is not None:
            raise _fail(mistake)
    elif resume_dir is not None:
        raise _fail(f"unexpected argument {resume_dir!r}; did you mean: podium tournament resume {resume_dir}")
    if backend is not None and backend not in ("inline", "process", "ray"):
        raise _fail(f"--backend {backend}: choose process, ray or inline")
    if address is not None and backend not in (None, "ray"):
        raise _fail(f"--address is the Ray cluster's address: it goes with --backend ray, not --backend {backend}")
    from podium.config import ConfigError, load_yaml

    try:
        raw = load_yaml(config) if config != "resume" else None  # a missing or broken file answers before torch
    except ConfigError as exc:
        raise _fail(str(exc)) from exc
    _say(f"[dim]podium tournament: checking {escape(resume_dir or config)} ...[/]")
    from podium.tournament import load_tournament_config
    from podium.tournament.api import run_tournament

    try:
        if config == "resume":
            assert resume_dir is not None
            from podium.tournament.orchestrator import Orchestrator, read_config

            orchestrator = Orchestrator.resume(
                resume_dir,
                backend=backend,
                address=address,
                progress=progress,
                seconds=seconds,
                steps=steps,
                target=target,
            )
            report = orchestrator.run(force=force)
            cfg = read_config(resume_dir)
        else:
            pool = None
            if pods is not None:
                pool = dict((raw or {}).get("pool") or {})
                pool["max"], pool["min"] = pods, min(pool.get("min", 1), pods)
            if address is not None and backend is None:
                backend = "ray"  # --address alone: the config may already say ray
            options = {
                "pool.max": "--pods",
                "pool.min": "--pods",
                "db": "--db",
                "backend": "--backend",
                "address": "--address",
                "seconds": "--seconds",
                "steps": "--steps",
                "target": "--target",
            }
            cfg = load_tournament_config(
                config,
                options=options,
                pool=pool,
                db=db,
                backend=backend,
                address=address,
                seconds=seconds,
                steps=steps,
                target=target,
            )
            report = run_tournament(cfg, run_dir=run_dir, progress=progress)
        _print_tournament(report, trading=cfg.backtest is not None)
        _backtest_after(report, cfg)
    except _tournament_errors() as exc:
        raise _fail(str(exc)) from exc
    if report.stop_reason == "failures":
        raise typer.Exit(code=1)


@app.command("leaderboard")
def leaderboard_command(
    run_dir: Annotated[str, typer.Argument(help="a tournament's run directory")],
    history: Annotated[bool, typer.Option(help="also list every result the updater received")] = False,
    lineage: Annotated[
        str | None, typer.Option(help="show this pod's ancestry: a pod id (p0009) or 'champion'", metavar="POD")
    ] = None,
) -> None:
    """Print a tournament's leaderboard: rank, algo, score, steps, parent; with --history every result,
    with --lineage a pod's ancestry."""
    from podium.rundir import pod_not_tournament

    mistake = pod_not_tournament(run_dir)
    if mistake is not None:
        raise _fail(mistake)
    from podium.tournament.orchestrator import open_leaderboard
    from podium.tournament.view import history_table, leaderboard_table, lineage_table

    try:
        board = open_leaderboard(run_dir)
        try:
            info = board.info()
            entries = board.entries()
            chain = None
            if lineage == "champion":
                if not entries:
                    raise _fail(f"{run_dir}: the leaderboard is empty, so there is no champion yet")
                lineage = entries[0].pod_id
            if lineage is not None:  # a pod that does not exist is said before anything is printed
                try:
                    chain = board.lineage(lineage)
                except KeyError as exc:
                    raise _fail(str(exc.args[0])) from exc
            _say(f"[bold]leaderboard of {escape(run_dir)}[/] ({info['status']}, {info['elapsed']:.0f} s)")
            console.print(leaderboard_table(entries, title=None))
            if history:
                parents = {p.id: p.parent_id for p in board.pods()}
                console.print(history_table(board.history(), parents))
            if chain is not None:
                console.print(lineage_table(chain, title=f"lineage of {lineage} (newest first)"))
        finally:
            board.close()
    except _tournament_errors() as exc:
        raise _fail(str(exc)) from exc


@app.command("backtest")
def backtest_command(
    path: Annotated[str, typer.Argument(help="tournament run dir, pod run dir or checkpoint file")],
    start: Annotated[str | None, typer.Option(help="first day (default 2016-01-04, the shipped test period)")] = None,
    end: Annotated[str | None, typer.Option(help="last day (default 2017-11-10)")] = None,
    top_k: Annotated[
        int, typer.Option(help="ensemble of the leaderboard's best K (tournaments; fewer if it holds fewer)")
    ] = 1,
    out: Annotated[str | None, typer.Option(help="output directory")] = None,
    initial_cash: Annotated[float | None, typer.Option(help="starting cash in dollars")] = None,
    generalisation: Annotated[
        bool, typer.Option(help="also backtest every training snapshot: test return vs training time")
    ] = False,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps")] = "cpu",
    fill: Annotated[
        str | None,
        typer.Option(help="when orders execute: close (the close the policy saw) or next_close (default: as trained)"),
    ] = None,
    benchmark: Annotated[
        str, typer.Option(help="ETF bought and held beside the policy: DIA, SPY, QQQ, or none (prices 2009-2017)")
    ] = "DIA",
) -> None:
    """Backtest a trading policy on later data against buy-and-hold of DIA and of the equal-weight basket:
    metrics table (empyrical), account-value PNG, daily CSV and trades CSV."""
    from podium.rundir import TournamentDir

    if top_k < 1:
        raise _fail(f"--top-k must be at least 1, got {top_k}")
    etf = None if benchmark.lower() == "none" else benchmark.upper()
    from podium.finance.backtest import backtest_command as run_backtest
    from podium.finance.backtest import generalisation_curve

    checkpoints = None
    try:
        if TournamentDir(path).holds_tournament():
            from podium.tournament import leaderboard

            checkpoints = [e.checkpoint for e in leaderboard(path)]
        report = run_backtest(
            path,
            start,
            end,
            top_k,
            out,
            initial_cash,
            checkpoints=checkpoints,
            device=device,
            console=console,
            fill=fill,
            benchmark=etf,
        )
        if generalisation:
            frame = generalisation_curve(
                path,
                report.start,
                report.end,
                out_dir=report.out_dir,
                device=device,
                initial_cash=initial_cash,
                fill=fill,
                benchmark=etf,
            )
            _say(f"generalisation curve: {len(frame)} snapshots -> {escape(str(report.out_dir))}/generalisation.png")
    except (*_tournament_errors(), ValueError, KeyError, FileNotFoundError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc


@app.command("demo")
def demo_command(
    run_dir: Annotated[str | None, typer.Option(help="output directory (default: runs/demo)")] = None,
    seconds: Annotated[float, typer.Option(help="time budget of the tournament")] = 90.0,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="live view")] = None,
) -> None:
    """The main job on the embedded default: a short PPO/SAC/TD3 tournament on Pendulum with local
    subprocesses and a SQLite leaderboard; prints the leaderboard."""
    _say("[dim]podium demo: checking the config ...[/]")
    from podium.tournament.api import run_tournament
    from podium.tournament.config import DEMO_CONFIG, load_tournament_config

    try:
        cfg = load_tournament_config(None, **{**DEMO_CONFIG, "seconds": seconds})
        report = run_tournament(cfg, run_dir=run_dir, progress=progress)
    except _tournament_errors() as exc:
        raise _fail(str(exc)) from exc
    _print_tournament(report)


def main() -> None:
    """The ``podium`` command: its exit skips Python's teardown of torch (:func:`podium.machine.exit_process`)."""
    from podium.machine import exit_process

    try:
        app()
    except SystemExit as exc:  # typer's way out, also after a command that succeeded
        # Ctrl-C that no command caught (e.g. while torch imports) is typer's silent Exit(130): say it
        cause = getattr(exc.__context__, "__cause__", None)
        if exc.code == 130 and isinstance(cause, KeyboardInterrupt):
            console.print(f"[bold yellow]interrupted:[/] {escape(str(cause) or 'stopped by Ctrl-C')}", soft_wrap=True)
        exit_process(exc.code)


if __name__ == "__main__":
    main()
