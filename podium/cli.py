"""The ``podium`` command. Every sub-command is a thin layer over the Python API of the same name."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    name="podium",
    help="Massively parallel deep RL in PyTorch: pods race in a tournament, a leaderboard keeps the best.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


def _fail(message: str) -> typer.Exit:
    console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code=2)


@app.command("envs")
def envs_command() -> None:
    """List podium's tensor-native environments (any gymnasium id also works, through the adapter)."""
    from podium.envs import list_envs

    table = Table(title="tensor-native environments (podium.envs.make)")
    table.add_column("id", style="bold")
    table.add_column("observation")
    table.add_column("action")
    table.add_column("time limit", justify="right")
    table.add_column("description")
    for spec in list_envs():
        try:
            env = spec.load()(num_envs=1, **spec.kwargs)
            obs, act, limit = str(env.single_observation_space), str(env.single_action_space), env.max_episode_steps
        except (ImportError, AttributeError, ValueError, OSError) as exc:
            obs, act, limit = "?", "?", f"unavailable: {exc}"
        table.add_row(spec.id, obs, act, str(limit), spec.description)
    console.print(table)
    console.print("Any other gymnasium id (e.g. LunarLander-v3) runs through podium.envs.GymVecEnv.")


@app.command("demo")
def demo_command(
    env_id: Annotated[str, typer.Option("--env", help="environment id")] = "CartPole-v1",
    num_envs: Annotated[int, typer.Option("--num-envs", "-n", help="number of sub-environments")] = 4096,
    seconds: Annotated[float, typer.Option(help="how long to step, in seconds")] = 3.0,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N or mps")] = "cpu",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
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

    console.print(f"[bold]podium demo[/]: {env!r}, random actions for {seconds:.1f} s")
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


@app.command("train")
def train_command(
    env: Annotated[str | None, typer.Option(help="environment id, e.g. Pendulum-v1")] = None,
    algo: Annotated[str | None, typer.Option(help="ppo, sac, td3, ddpg, dqn, d3qn")] = None,
    num_envs: Annotated[int | None, typer.Option("--num-envs", help="training sub-environments")] = None,
    steps: Annotated[int | None, typer.Option(help="budget in env steps")] = None,
    seconds: Annotated[float | None, typer.Option(help="budget in wall-clock seconds")] = None,
    target: Annotated[float | None, typer.Option(help="stop when the evaluation mean reaches this")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N, mps")] = None,
    seed: Annotated[int | None, typer.Option(help="random seed")] = None,
    config: Annotated[str | None, typer.Option(help="YAML file of pod-spec fields")] = None,
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="output directory")] = None,
    resume: Annotated[str | None, typer.Option(help="continue the run in this directory")] = None,
    hparam: Annotated[list[str] | None, typer.Option(help="algorithm hyperparameter key=value (repeatable)")] = None,
    eval_every: Annotated[int | None, typer.Option("--eval-every", help="env steps between evaluations")] = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Train one agent (a pod) and print its report."""
    from podium.api import train
    from podium.config import ConfigError
    from podium.pod import TrainingDivergedError
    from podium.store import CheckpointError

    if resume is None and env is None and config is None:
        raise _fail("give --env (and --algo), a --config file, or --resume RUN_DIR")
    fields = {
        "num_envs": num_envs,
        "steps": steps,
        "seconds": seconds,
        "target": target,
        "device": device,
        "seed": seed,
        "eval_every": eval_every,
        "hparams": _parse_hparams(hparam or []) or None,
    }
    try:
        report = train(env, algo, config=config, run_dir=run_dir, resume=resume, progress=progress, **fields)
    except (ConfigError, CheckpointError, KeyError, ValueError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc
    except TrainingDivergedError as exc:
        raise _fail(str(exc)) from exc
    table = Table(title=f"pod report — {report.run_dir}", show_header=False)
    table.add_row("best evaluation", f"{report.score_mean:.2f} ± {report.score_std:.2f}")
    table.add_row("final evaluation", f"{report.last_mean:.2f} ± {report.last_std:.2f}")
    table.add_row("env steps", f"{report.steps:,}")
    table.add_row("wall time", f"{report.wall_time:.1f} s")
    if report.time_to_target is not None:
        table.add_row("reached target", f"after {report.time_to_target:.1f} s, {report.steps_to_target:,} steps")
    table.add_row("stopped by", report.stop_reason)
    table.add_row("best checkpoint", report.checkpoint)
    console.print(table)


@app.command("eval")
def eval_command(
    path: Annotated[str, typer.Argument(help="run directory (uses its best checkpoint) or checkpoint file")],
    episodes: Annotated[int, typer.Option(help="evaluation episodes, run in parallel")] = 32,
    seed: Annotated[int, typer.Option(help="evaluation seed")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps")] = "cpu",
) -> None:
    """Evaluate a trained policy: mean and std of the return over N episodes."""
    from podium.api import load
    from podium.store import CheckpointError

    try:
        policy = load(path, device=device)
        mean, std = policy.evaluate(episodes=episodes, seed=seed)
    except (CheckpointError, ValueError, KeyError) as exc:
        raise _fail(str(exc.args[0] if exc.args else exc)) from exc
    console.print(f"{policy}: [bold]{mean:.2f} ± {std:.2f}[/] over {episodes} episodes")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
