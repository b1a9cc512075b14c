"""Pod: one agent's training run — worker -> learner -> evaluator, repeated until the budget is spent.

``Pod(spec).run() -> PodReport``. A pod writes into its run directory::

    RUN_DIR/spec.yaml                 the spec it was started with
    RUN_DIR/checkpoints/last.pt       periodic checkpoint (networks, optimisers, normalisers, counters)
    RUN_DIR/checkpoints/best.pt       the best evaluated snapshot
    RUN_DIR/checkpoints/replay.pt     off-policy pods: the replay buffer (with last.pt's time-based saves)
    RUN_DIR/checkpoints/snapshots/    optional snapshots every ``spec.snapshot_every`` seconds of training
    RUN_DIR/curve.csv, curve.png      learning curve: evaluation score vs env steps and vs seconds
    RUN_DIR/metrics.csv, RUN_DIR/tb/  training scalars (CSV and TensorBoard)

A pod killed at any moment can be continued with :meth:`Pod.resume` (``podium train --resume``): it
reloads ``last.pt`` (and ``replay.pt``) and continues the step count and the curve from there.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import ValidationError

from podium.algos import Agent, get_algo
from podium.algos.presets import preset_for
from podium.config import ConfigError, PodSpec, validation_message
from podium.envs import make
from podium.logging import CurveWriter, ScalarLogger, plot_curve
from podium.pod.evaluator import EvalResult, Evaluator
from podium.pod.learner import Learner
from podium.pod.worker import Worker
from podium.store import CheckpointError, load_checkpoint, save_checkpoint

__all__ = ["REPLAY_FILE", "Pod", "PodReport", "TrainingDivergedError", "build_agent"]

REPLAY_FILE = "replay.pt"
"""An off-policy pod's replay buffer, next to its ``last.pt`` (see ``PodSpec.save_replay_buffer``)."""


class TrainingDivergedError(RuntimeError):
    """A loss became NaN/inf; the run stopped and its last good checkpoint is intact."""


@dataclass
class PodReport:
    """What a finished (or stopped) pod reports.

    Attributes:
        score_mean / score_std: the best evaluation (mean and std of ``eval_episodes`` returns).
        last_mean / last_std: the final evaluation.
        steps: env steps taken (all sub-envs together); ``wall_time``: seconds of training.
        reached_target: whether the best evaluation mean reached ``spec.target``.
        time_to_target / steps_to_target: when it first did (None if never); ``train_time_to_target``
            is ``time_to_target`` without the time spent evaluating.
        stop_reason: "target", "steps", "seconds".
        eval_time: seconds of ``wall_time`` spent in evaluations.
        run_dir, checkpoint (best snapshot), curve: where the outputs are.
    """

    score_mean: float
    score_std: float
    last_mean: float
    last_std: float
    steps: int
    wall_time: float
    reached_target: bool
    time_to_target: float | None
    steps_to_target: int | None
    train_time_to_target: float | None
    stop_reason: str
    eval_time: float
    run_dir: str
    checkpoint: str
    curve: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_agent(spec: PodSpec, observation_space: Any, action_space: Any, num_envs: int, device: Any) -> Agent:
    """Instantiate ``spec.algo`` with its hyperparameters (preset, then ``spec.hparams``) validated."""
    cls = get_algo(spec.algo)
    hparams = {**(preset_for(spec.algo, spec.env).hparams if spec.preset else {}), **spec.hparams}
    try:
        config = cls.Config(**hparams)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, f"hparams for {cls.name}")) from None
    return cls(observation_space, action_space, config, num_envs, device)


def default_run_dir(spec: PodSpec) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path("runs") / f"{spec.env}-{spec.algo}-seed{spec.seed}-{stamp}"


class Pod:
    """One agent's training run.

    Args:
        spec: what to train (see :class:`~podium.config.PodSpec`).
        run_dir: output directory (default ``runs/ENV-ALGO-seedS-TIMESTAMP``).
        progress: show a live progress bar (steps/s and the latest evaluation score).
    """

    def __init__(
        self, spec: PodSpec, run_dir: str | Path | None = None, progress: bool = False, *, _load_init: bool = True
    ) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(spec)
        self.progress = progress
        if spec.torch_threads:
            torch.set_num_threads(spec.torch_threads)
        elif spec.device == "cpu":
            torch.set_num_threads(1)  # small networks: one thread is fastest and pods do not fight over cores
        torch.manual_seed(spec.seed)
        cls = get_algo(spec.algo)
        preset = preset_for(spec.algo, spec.env) if spec.preset else None
        num_envs = spec.num_envs or (preset and preset.num_envs) or cls.default_num_envs
        self.env = make(spec.env, num_envs=num_envs, device=spec.device, native=spec.native_env, **spec.env_kwargs)
        self.eval_env = make(
            spec.env,
            num_envs=spec.eval_episodes,
            device=spec.device,
            native=spec.native_env,
            **{**spec.env_kwargs, **spec.eval_env_kwargs},
        )
        self.agent = build_agent(
            spec, self.env.single_observation_space, self.env.single_action_space, num_envs, self.env.device
        )
        if hasattr(self.agent, "generator"):
            self.agent.generator.manual_seed(spec.seed)
        self.agent.budget_steps = spec.steps  # for schedules defined as a fraction of the budget
        self.steps, self.iterations, self.wall_time, self.eval_time = 0, 0, 0.0, 0.0
        self.best_mean, self.best_std = -math.inf, math.inf
        self.time_to_target: float | None = None
        self.steps_to_target: int | None = None
        self.train_time_to_target: float | None = None
        self._next_eval = spec.eval_every
        self._next_snapshot = spec.snapshot_every or math.inf
        self._replay: dict[str, torch.Tensor] | None = None  # replay buffer contents to start run() with
        if spec.init_checkpoint and _load_init:
            payload = load_checkpoint(spec.init_checkpoint, map_location=self.env.device)
            self._check_algo(payload, spec.init_checkpoint)
            self.agent.load_state_dict(payload["agent"])
            self._replay = self._read_replay(Path(spec.init_checkpoint).parent / REPLAY_FILE)

    # ----------------------------------------------------------------- resume
    @classmethod
    def resume(cls, run_dir: str | Path, progress: bool = False, **overrides: Any) -> Pod:
        """Continue the run in ``run_dir`` from ``checkpoints/last.pt``; ``overrides`` change budget fields."""
        run_dir = Path(run_dir)
        payload = load_checkpoint(run_dir / "checkpoints" / "last.pt")
        spec = PodSpec(**{**payload["spec"], **{k: v for k, v in overrides.items() if v is not None}})
        pod = cls(spec, run_dir, progress, _load_init=False)  # last.pt supersedes the initial checkpoint
        pod._check_algo(payload, run_dir / "checkpoints" / "last.pt")
        pod.agent.load_state_dict(payload["agent"])
        c = payload["counters"]
        pod.steps, pod.iterations, pod.wall_time = int(c["steps"]), int(c["iterations"]), float(c["wall_time"])
        pod.eval_time = float(c.get("eval_time", 0.0))
        pod.best_mean, pod.best_std = float(c["best_mean"]), float(c["best_std"])
        pod._next_eval = int(c["next_eval"])
        pod._next_snapshot = float(c.get("next_snapshot", spec.snapshot_every or math.inf))
        pod.time_to_target = c.get("time_to_target")
        pod.steps_to_target = c.get("steps_to_target")
        pod.train_time_to_target = c.get("train_time_to_target")
        pod._replay = pod._read_replay(run_dir / "checkpoints" / REPLAY_FILE)
        return pod

    def _read_replay(self, path: Path) -> dict[str, torch.Tensor] | None:
        """The replay buffer saved at ``path`` for an off-policy agent; None when there is none to use."""
        if self.agent.on_policy or not path.is_file():
            return None
        try:
            payload = load_checkpoint(path, map_location=self.env.device)
            if payload.get("algo") != self.agent.name:
                raise CheckpointError(f"it holds a {payload.get('algo')!r} agent's experience")
            return payload["replay"]
        except (CheckpointError, KeyError) as exc:
            reason = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
            warnings.warn(
                f"ignoring the replay buffer {path} ({reason}); this pod starts with an empty buffer", stacklevel=2
            )
            return None

    def _check_algo(self, payload: dict[str, Any], where: Any) -> None:
        if payload.get("algo") != self.agent.name:
            raise CheckpointError(
                f"{where} holds a {payload.get('algo')!r} agent but this pod trains {self.agent.name!r}; "
                "use a checkpoint of the same algorithm"
            )

    # ----------------------------------------------------------------- checkpoints
    def _payload(self) -> dict[str, Any]:
        return {
            "algo": self.agent.name,
            "spec": self.spec.model_dump(mode="json"),
            "agent": self.agent.state_dict(),
            "counters": {
                "steps": self.steps,
                "iterations": self.iterations,
                "wall_time": self.wall_time,
                "eval_time": self.eval_time,
                "best_mean": self.best_mean,
                "best_std": self.best_std,
                "next_eval": self._next_eval,
                "next_snapshot": self._next_snapshot,
                "time_to_target": self.time_to_target,
                "steps_to_target": self.steps_to_target,
                "train_time_to_target": self.train_time_to_target,
            },
        }

    def save(self, name: str = "last", buffer: Any = None) -> Path:
        """Write ``RUN_DIR/checkpoints/NAME.pt`` atomically; with an off-policy ``buffer`` (and
        ``spec.save_replay_buffer``), also its contents to ``checkpoints/replay.pt``."""
        path = save_checkpoint(self.run_dir / "checkpoints" / f"{name}.pt", self._payload())
        if buffer is not None and self.spec.save_replay_buffer and hasattr(buffer, "state_dict"):
            save_checkpoint(
                self.run_dir / "checkpoints" / REPLAY_FILE,
                {"algo": self.agent.name, "steps": self.steps, "replay": buffer.state_dict()},
            )
        return path

    # ----------------------------------------------------------------- the loop
    def _budget_left(self, started: float, base_wall: float) -> str | None:
        spec = self.spec
        if spec.target is not None and self.best_mean >= spec.target:
            return "target"
        if spec.steps is not None and self.steps >= spec.steps:
            return "steps"
        if spec.seconds is not None and base_wall + time.perf_counter() - started >= spec.seconds:
            return "seconds"
        return None

    def run(self) -> PodReport:
        """Train until the target, the step budget or the time budget is reached; return the report."""
        spec, agent = self.spec, self.agent
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "spec.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
        curve = CurveWriter(self.run_dir / "curve.csv")
        curve.truncate_after(self.steps)
        logger = ScalarLogger(self.run_dir, tensorboard=spec.tensorboard)
        worker = Worker(self.env, agent, seed=spec.seed + self.iterations)
        learner = Learner(agent)
        evaluator = Evaluator(self.eval_env, spec.eval_deterministic, seed=spec.seed + 1_000_000)
        buffer = agent.make_buffer()
        if self._replay is not None:
            buffer.load_state_dict(self._replay)
            self._replay = None
        start = time.perf_counter()
        base_wall = self.wall_time
        last_ckpt = start
        last_eval: EvalResult | None = None
        progress = _Progress(spec, self.steps) if self.progress else None
        stop = self._budget_left(start, base_wall)
        try:
            while stop is None:
                if (
                    spec.steps is not None
                    and hasattr(agent, "lr_fraction")
                    and getattr(agent.config, "anneal_lr", False)
                ):
                    agent.lr_fraction = max(0.0, 1.0 - self.steps / spec.steps)
                t0 = time.perf_counter()
                rollout = worker.collect(buffer)
                losses = learner.learn(buffer, worker.obs)
                self.steps += rollout.steps
                self.iterations += 1
                now = time.perf_counter()
                self.wall_time = base_wall + now - start
                bad = [k for k, v in losses.items() if not math.isfinite(v)]
                if bad:
                    raise TrainingDivergedError(
                        f"{', '.join(bad)} became {losses[bad[0]]} at step {self.steps} (iteration {self.iterations}); "
                        f"training stopped. The last good checkpoint is {self.run_dir / 'checkpoints' / 'last.pt'}. "
                        "Lower the learning rate or enable normalisation."
                    )
                scalars = {f"losses/{k}" if "/" not in k else k: v for k, v in losses.items()}
                scalars["charts/SPS"] = rollout.steps / max(now - t0, 1e-9)
                if rollout.episode_returns:
                    scalars["charts/episodic_return"] = sum(rollout.episode_returns) / len(rollout.episode_returns)
                    scalars["charts/episodic_length"] = sum(rollout.episode_lengths) / len(rollout.episode_lengths)
                logger.log(self.steps, scalars)
                if self.steps >= self._next_eval:
                    while self._next_eval <= self.steps:
                        self._next_eval += spec.eval_every
                    last_eval = evaluator.evaluate(agent)
                    self.wall_time = base_wall + time.perf_counter() - start
                    self._record_eval(last_eval, curve, logger)
                if self.wall_time >= self._next_snapshot:
                    while self._next_snapshot <= self.wall_time:
                        self._next_snapshot += spec.snapshot_every or math.inf
                    self.save(f"snapshots/step{self.steps:012d}")
                if progress is not None:
                    progress.update(self.steps, self.wall_time, scalars["charts/SPS"], last_eval, self.best_mean)
                stop = self._budget_left(start, base_wall)
                timed = spec.checkpoint_every > 0 and now - last_ckpt >= spec.checkpoint_every
                if stop is not None or spec.checkpoint_every == 0 or timed:
                    self.save("last", buffer if stop is not None or timed else None)
                    last_ckpt = now
            if curve.rows == [] or curve.rows[-1]["step"] != self.steps:  # end with an evaluation of the final policy
                last_eval = evaluator.evaluate(agent)
                self.wall_time = base_wall + time.perf_counter() - start
                self._record_eval(last_eval, curve, logger)
                self.save("last")
        finally:
            logger.close()
            if progress is not None:
                progress.close()
        plot_curve(curve.rows, self.run_dir / "curve.png", f"{spec.algo} on {spec.env} (seed {spec.seed})", spec.target)
        if spec.target is not None and self.best_mean >= spec.target:
            stop = "target"
        return PodReport(
            score_mean=self.best_mean,
            score_std=self.best_std,
            last_mean=last_eval.mean if last_eval else curve.rows[-1]["eval_mean"],
            last_std=last_eval.std if last_eval else curve.rows[-1]["eval_std"],
            steps=self.steps,
            wall_time=self.wall_time,
            reached_target=spec.target is not None and self.best_mean >= spec.target,
            time_to_target=self.time_to_target,
            steps_to_target=self.steps_to_target,
            train_time_to_target=self.train_time_to_target,
            stop_reason=stop or "steps",
            eval_time=self.eval_time,
            run_dir=str(self.run_dir),
            checkpoint=str(self.run_dir / "checkpoints" / "best.pt"),
            curve=curve.rows,
        )

    def _record_eval(self, result: EvalResult, curve: CurveWriter, logger: ScalarLogger) -> None:
        self.eval_time += result.seconds
        if (result.mean, -result.std) > (self.best_mean, -self.best_std):
            self.best_mean, self.best_std = result.mean, result.std
            self.save("best")
        target = self.spec.target
        if target is not None and result.mean >= target and self.time_to_target is None:
            self.time_to_target, self.steps_to_target = self.wall_time, self.steps
            self.train_time_to_target = self.wall_time - self.eval_time
        curve.append(
            {
                "step": self.steps,
                "wall_time": round(self.wall_time, 4),
                "eval_mean": result.mean,
                "eval_std": result.std,
                "eval_episodes": result.episodes,
                "best_mean": self.best_mean,
            }
        )
        logger.log(self.steps, {"eval/mean_return": result.mean, "eval/std_return": result.std})


class _Progress:
    """A rich progress bar: steps (or seconds) done, SPS, latest and best evaluation score."""

    def __init__(self, spec: PodSpec, steps: int) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.by_steps = spec.steps is not None
        total = spec.steps if self.by_steps else (spec.seconds or None)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
        )
        self.task = self.bar.add_task(f"{spec.algo} {spec.env}", total=total, info="", completed=0)
        self.bar.start()

    def update(self, steps: int, wall: float, sps: float, last: EvalResult | None, best: float) -> None:
        info = f"{steps:,} steps | {sps:,.0f} SPS"
        if last is not None:
            info += f" | eval {last.mean:.1f} ± {last.std:.1f} (best {best:.1f})"
        self.bar.update(self.task, completed=steps if self.by_steps else wall, info=info)

    def close(self) -> None:
        self.bar.stop()
