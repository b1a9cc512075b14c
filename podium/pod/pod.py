"""Pod: one agent's training run — worker -> learner, with the evaluator scoring snapshots beside them.

``Pod(spec).run() -> PodReport``. The worker collects a rollout and the learner learns from it, over and
over (with ``workers: W``, W rollout-worker processes collect the next rollout while the learner learns:
:class:`~podium.pod.worker.WorkerGroup`); every ``eval_every`` env steps the pod hands a snapshot of the
agent to its evaluator service (:class:`~podium.pod.evaluator.EvaluatorService`), which scores it beside
training. A score at or above the target is confirmed on ``confirm_episodes`` fresh episodes
before the pod stops, so a pod that says it reached its target has a policy that does.

A pod writes into its run directory (the layout is :class:`~podium.rundir.PodDir`'s): the spec,
``checkpoints/last.pt`` (periodic and final), ``checkpoints/best.pt`` (the best scored snapshot), the
replay buffer of an off-policy agent, the learning curve and the training scalars. A run directory
belongs to one run: a new pod refuses a used one unless told to overwrite it.

Ctrl-C (SIGINT) or SIGTERM stops a pod at the end of its current learning phase: it writes
``last.pt`` (and the replay buffer) and raises :class:`PodInterrupted`, which says how to resume. A
second signal stops it at once. A pod killed outright (SIGKILL, power loss) continues from its last
periodic checkpoint with :meth:`Pod.resume` (``podium train --resume``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from pydantic import ValidationError

from podium.algos import Agent, AgentConfig, get_algo
from podium.algos.presets import preset_for
from podium.config import ConfigError, PodSpec, validation_message
from podium.envs import make
from podium.logging import CurveWriter, ScalarLogger, plot_curve, read_curve
from podium.machine import local_cpus
from podium.pod._child import READY, await_children, close_quietly, ignore_stop_signals, reap, report_failure
from podium.pod.evaluator import (
    EvalMode,
    EvalResult,
    EvaluationError,
    Evaluator,
    EvaluatorService,
    Scored,
    Snapshot,
    clone_tensors,
    confirms,
)
from podium.pod.learner import FUSION_TIMEOUT, FusionGroup, Learner
from podium.pod.worker import Worker, WorkerError, WorkerGroup
from podium.rundir import DirLock, PodDir, RunDirError, TournamentDir, safe_name
from podium.store import CheckpointError, load_checkpoint, remove_partial_writes, save_checkpoint

__all__ = [
    "LearnerError",
    "Pod",
    "PodInterrupted",
    "PodReport",
    "TrainingDivergedError",
    "build_agent",
    "inline_eval_gap",
    "resolve_config",
]

EVAL_SEED_OFFSET = 100_000_000
EVAL_SEED_SPAN = 390_000_000
"""The routine evaluation of the snapshot after ``n`` env steps resets with ``spec.seed + EVAL_SEED_OFFSET +
n % EVAL_SEED_SPAN`` (see :func:`eval_seed`). The streams of one pod, relative to ``spec.seed``: training
``[0, 1e8)`` (learner ``k`` from ``k * LEARNER_SEED_STRIDE``), routine evaluations ``[1e8, 4.9e8)``,
confirmations from ``5e8``, selection from ``7e8``, the agent's own stream from ``9e8``. Routine evaluations wrap
around rather than grow into the confirmations' seeds (a GPU pod passes 5e8 env steps within minutes)."""
DEFAULT_EVAL_EVERY = 5_000
"""Env steps between evaluations when ``eval_every`` is not set and the evaluator shares the pod's core."""
LEARNER_SEED_STRIDE = 100_000
"""Learner ``k`` of a pod with several learners resets its env with ``spec.seed + k * LEARNER_SEED_STRIDE +
iteration`` (learner 0: ``spec.seed + iteration``), so the learners see different episodes."""
SELECT_SEED_OFFSET = 700_000_000
"""A pod's selection score (``select_episodes``) resets with ``spec.seed + SELECT_SEED_OFFSET``: seeds neither
training, routine evaluations nor confirmations use."""
SELECT_PARTS = 4
"""With ``spec.select_bar``, the selection score is played in this many parts of at least ``SELECT_MIN_PART``
episodes (else in one), and stops after a part where its mean is more than ``SELECT_BAR_MARGIN`` standard errors
(the sample std over the square root of the episodes so far) below the bar. By Student's t, a pod whose returns
are normal with a mean at the bar stops early at most about once in 500."""
SELECT_MIN_PART = 25
SELECT_BAR_MARGIN = 3.5
CONFIRM_SEED_OFFSET = 500_000_000
"""Confirmations reset with ``spec.seed + CONFIRM_SEED_OFFSET + j * confirm_episodes``: seeds that neither
training nor routine evaluations use."""
AGENT_SEED_OFFSET = 900_000_000
"""The agent's own random stream (exploration noise, random warm-up actions, minibatch order, replay sampling)
starts from ``spec.seed + AGENT_SEED_OFFSET`` (learner ``k``: plus ``k * LEARNER_SEED_STRIDE``). With the env's
reset seed (``spec.seed + iteration``) it would draw the very numbers the env drew for its initial states, so
that an off-policy pod's first random actions were a function of its envs' first states."""


def eval_seed(seed: int, steps: int) -> int:
    """The reset seed of the routine evaluation of the snapshot after ``steps`` env steps of a pod seeded
    ``seed``: the same in every evaluator mode, and never one of the pod's training, confirmation, selection
    or agent seeds (a gymnasium env's sub-env ``i`` adds ``i``; 10 million episodes fit below the
    confirmations')."""
    return seed + EVAL_SEED_OFFSET + steps % EVAL_SEED_SPAN


class TrainingDivergedError(RuntimeError):
    """A loss became NaN/inf; the run stopped and its last good checkpoint is intact."""


class PodInterrupted(KeyboardInterrupt):
    """The pod was stopped by SIGINT (Ctrl-C) or SIGTERM after writing its final checkpoint.

    Attributes:
        signal_number: the signal (``signal.SIGINT`` or ``signal.SIGTERM``).
        run_dir: the run directory; ``steps``: env steps trained and saved in ``checkpoints/last.pt``.
    """

    def __init__(self, signal_number: int, run_dir: Path, steps: int) -> None:
        self.signal_number, self.run_dir, self.steps = signal_number, run_dir, steps
        name = signal.Signals(signal_number).name
        super().__init__(
            f"{name}: training stopped after {steps:,} env steps; the checkpoint is {PodDir(run_dir).last}. "
            f"Continue with: podium train --resume {shlex.quote(str(run_dir))} "
            f"(Python: podium.train(resume={str(run_dir)!r}))"
        )

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by this signal: 128 + the signal number."""
        return 128 + self.signal_number


@dataclass
class PodReport:
    """What a finished (or stopped) pod reports.

    Attributes:
        score_mean / score_std: the best scored snapshot: its confirmation's mean and std when it had one,
            else its routine evaluation's.
        last_mean / last_std: the last evaluation.
        steps: env steps taken (all sub-envs together); ``wall_time``: seconds of training.
        reached_target: whether a snapshot's score was *confirmed* at or above ``spec.target`` (on
            ``spec.confirm_episodes`` fresh episodes; on the routine evaluation when that is 0).
        time_to_target / steps_to_target: when the confirmation arrived (seconds of training) and the env
            steps of the confirmed snapshot (None if never); ``train_time_to_target`` is
            ``time_to_target`` without the time training waited for evaluations.
        confirmed_mean / confirmed_std / confirmed_episodes: the confirmation that stopped the pod.
        selection_mean / selection_std / selection_episodes: with ``spec.select_episodes``, the best
            snapshot (``checkpoint``) re-scored on that many fresh episodes at the end of the run: an
            unbiased score, unlike the best of many noisy evaluations (what a tournament ranks by). A pod
            that stopped at its target reports the confirmation that stopped it when that had as many
            episodes (fresh seeds too, but only a passing confirmation stops a pod, so it leans high by a
            fraction of its standard error; passing needed ``confirm_margin`` of them above the target).
        stop_reason: ``target``, ``steps`` or ``seconds``.
        eval_time: seconds the evaluator spent scoring (beside training unless ``eval_mode`` is inline).
        message: a note for the user (e.g. why a resumed run had nothing to do), or "".
        target: the spec's target (None: none was set).
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
    confirmed_mean: float | None = None
    confirmed_std: float | None = None
    confirmed_episodes: int | None = None
    selection_mean: float | None = None
    selection_std: float | None = None
    selection_episodes: int | None = None
    message: str = ""
    target: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------- hyperparameters
def resolve_config(spec: PodSpec) -> AgentConfig:
    """The complete hyperparameters ``spec`` trains with: the algorithm's defaults, then the preset for
    its env (if ``spec.preset``), then ``spec.hparams``; a field of ``spec.hparams`` also overrides the
    preset's alternatives to it (``AgentConfig.alternatives``: ``num_steps`` the preset's ``rollout_size``).

    Raises:
        ConfigError: a hyperparameter is unknown or invalid (the message names it).
    """
    cls = get_algo(spec.algo)
    preset = dict(preset_for(spec.algo, spec.env).hparams) if spec.preset else {}
    for group in cls.Config.alternatives:
        if group & spec.hparams.keys():
            for name in group - spec.hparams.keys():
                preset.pop(name, None)
    hparams = {**preset, **spec.hparams}
    try:
        return cls.Config(**hparams)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, f"hparams for {cls.name}", cls.Config)) from None


def resolve_num_envs(spec: PodSpec) -> int:
    """Training sub-envs: ``spec.num_envs``, else the preset's, else the algorithm's default."""
    preset = preset_for(spec.algo, spec.env) if spec.preset else None
    return spec.num_envs or (preset and preset.num_envs) or get_algo(spec.algo).default_num_envs


def build_agent(
    spec: PodSpec,
    observation_space: Any,
    action_space: Any,
    num_envs: int,
    device: Any,
    config: AgentConfig | dict[str, Any] | None = None,
) -> Agent:
    """Instantiate ``spec.algo`` with ``config`` (a checkpoint's resolved hyperparameters) or, by default,
    :func:`resolve_config` of ``spec``."""
    cls = get_algo(spec.algo)
    if config is None:
        config = resolve_config(spec)
    elif isinstance(config, dict):
        try:
            config = cls.Config(**config)
        except ValidationError as exc:
            raise ConfigError(validation_message(exc, f"saved hyperparameters of {cls.name}")) from None
    return cls(observation_space, action_space, config, num_envs, device)


WIDE_MATMUL = 1 << 23
"""Multiply-adds of an agent's widest matrix product (:attr:`~podium.algos.base.Agent.widest_matmul`) from
which training on a CPU gains from more than one thread. Classic-control networks sit far below it (SAC's
default 128x128 at batch 128: 4.2M with its twin critics; PPO's 64x64 minibatches: 1M or less) and train
fastest on one; rl-zoo's MuJoCo SAC (256x256 twin critics at batch 256: 34M) trains 1.4x faster on two
(one 2-core VM, 2026-11-23: 5.9 vs 8.5 ms per env step on HalfCheetah)."""


@dataclass(frozen=True)
class CpuPlan:
    """How a pod uses its CPU: torch's intra-op threads for training (None: leave torch's setting) and where
    the evaluator runs."""

    threads: int | None
    eval_mode: EvalMode


def inline_eval_gap(every: int, eval_seconds: float, train_steps_per_s: float, share: float | None) -> int:
    """Env steps from an inline evaluation to the next: ``every``, widened so that evaluations take at most
    ``share`` of the wall-clock (``PodSpec.eval_share``): an evaluation of ``eval_seconds`` is followed by at
    least ``eval_seconds * (1 - share) / share`` seconds of training at ``train_steps_per_s``."""
    if share is None or share >= 1 or eval_seconds <= 0 or train_steps_per_s <= 0:
        return every
    return max(every, math.ceil(train_steps_per_s * eval_seconds * (1 - share) / share))


def _final_soon(spec: PodSpec, steps: int, wall_time: float, gap: int, sps: float) -> bool:
    """Whether the budget ends within two evaluation gaps (``gap`` env steps at ``sps``): the run's final
    evaluation is then near enough, and a routine one in between would only score almost the same policy."""
    by_steps = spec.steps is not None and spec.steps - steps < 2 * gap
    by_seconds = spec.seconds is not None and (spec.seconds - wall_time) * sps < 2 * gap
    return by_steps or by_seconds


def plan_cpu(spec: PodSpec, widest_matmul: int, cores: int, fork: bool = True) -> CpuPlan:
    """Training threads and evaluator mode: a pure function of the spec, the agent's widest matrix product,
    the cores this process may use and whether it can fork.

    The pod's budget is ``spec.torch_threads`` cores, else ``cores``. On an accelerator the evaluator is a
    thread (``auto``) and torch keeps its threads unless ``torch_threads`` is set. On a CPU, ``auto`` gives
    the evaluator a process of its own when the budget leaves training enough: two cores for networks under
    :data:`WIDE_MATMUL` (training uses one thread however many it may have), three for wider ones (training
    uses the rest), and a core beside each of the pod's own processes (its learners and their rollout workers);
    otherwise the evaluator runs inline, between learning phases, every
    :data:`DEFAULT_EVAL_EVERY` env steps. An evaluator process always costs training one core of the
    budget: two training threads beside an evaluator process on two cores keep losing a core to it, and
    GNU OpenMP's threads wait for each other at every operation (a SAC pod on HalfCheetah ran 14x slower
    than with one thread on the same VM)."""
    mode = spec.eval_mode
    if spec.device != "cpu":
        if mode == "process":  # forked after CUDA started: the child cannot use it
            raise ValueError(
                f"eval_mode 'process' forks the pod, which cannot be done on {spec.device} (an accelerator's state "
                "does not survive a fork): use eval_mode 'thread' (the default there, 'auto') or 'inline'"
            )
        return CpuPlan(spec.torch_threads, "thread" if mode == "auto" else mode)
    if mode == "process" and not fork:
        raise ValueError(
            "eval_mode 'process' forks the pod, which is not safe here (the env runs on JAX, the MJX engine, whose "
            "threads do not survive a fork, or this platform cannot fork): use eval_mode 'thread' or 'inline' "
            "('auto' picks one)"
        )
    budget = spec.torch_threads or cores
    wide = widest_matmul >= WIDE_MATMUL
    # the pod's own processes, a core each: K learners, each with its W rollout workers
    busy = spec.learners * (1 + spec.workers)
    if mode == "auto":
        mode = "process" if fork and budget >= max(3 if wide else 2, busy + 1) else "inline"
    if not wide and spec.torch_threads is None:
        return CpuPlan(1, mode)
    return CpuPlan(max(1, budget - 1) if mode == "process" else budget, mode)


def default_run_dir(spec: PodSpec) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path("runs") / f"{safe_name(spec.env)}-{spec.algo}-seed{spec.seed}-{stamp}"


@contextlib.contextmanager
def _locked(pod: Pod, create: bool = True) -> Iterator[None]:
    """Hold ``pod``'s run directory (:class:`~podium.rundir.DirLock`) from here until its run ends; let it go
    (and remove the directory when this made it and it stayed empty) when the block fails. Without
    ``create`` a missing directory is neither made nor locked (the block fails on what it lacks)."""
    created = not pod.dir.root.exists()
    pod._lock = DirLock(pod.dir.root)
    if create or not created:
        pod._lock.acquire()
    try:
        yield
    except BaseException:
        env = getattr(pod, "env", None)
        if env is not None:  # a gymnasium env's subprocesses would outlive the error
            env.close()
        pod._lock.release(remove=True)  # a refused pod leaves nothing behind
        if created:
            with contextlib.suppress(OSError):
                pod.dir.root.rmdir()  # only when empty
        raise


# ----------------------------------------------------------------- the pod
class Pod:
    """One agent's training run.

    Args:
        spec: what to train (see :class:`~podium.config.PodSpec`).
        run_dir: output directory (default ``runs/ENV-ALGO-seedS-TIMESTAMP``). It must not hold another
            run, unless ``overwrite``.
        progress: show a live progress bar; None (default): when standard error is a terminal.
        overwrite: delete the outputs of a run already in ``run_dir`` first.

    Raises:
        RunDirError: ``run_dir`` holds another run (and ``overwrite`` is off) or a tournament.
        ConfigError: bad hyperparameters.
        CheckpointError: ``spec.init_checkpoint`` is missing, corrupt or of another algorithm.
    """

    def __init__(
        self,
        spec: PodSpec,
        run_dir: str | Path | None = None,
        progress: bool | None = None,
        *,
        overwrite: bool = False,
    ) -> None:
        self.dir = PodDir(run_dir if run_dir is not None else default_run_dir(spec))
        with _locked(self):
            replace = self.dir.claim(overwrite)  # the old run is deleted once the new one has passed every check
            init = _init_file(spec.init_checkpoint) if spec.init_checkpoint else None
            if replace and init and self.dir.root.resolve() in init.resolve().parents:
                raise ConfigError(
                    f"init_checkpoint {init} lies in {self.dir.root}, whose run overwrite would delete; "
                    "copy the checkpoint out of it first, or choose another run directory"
                )
            self._setup(spec, progress, resolve_config(spec), resolve_num_envs(spec))
            if init:
                payload = load_checkpoint(init, map_location=self.env.device)
                self._check_algo(payload, init)
                self.agent.load_state_dict(payload["agent"])
                self._replay = self._read_replay(PodDir.of_checkpoint(init).replay)
            if replace:
                self.dir.clear()

    def _setup(self, spec: PodSpec, progress: bool | None, config: AgentConfig, num_envs: int) -> None:
        self.spec = spec
        self.run_dir = self.dir.root
        self.progress = sys.stderr.isatty() if progress is None else progress
        if spec.torch_threads:  # the env's threads (the MuJoCo C engine takes torch's count when it is built)
            torch.set_num_threads(spec.torch_threads)
        elif spec.device == "cpu":
            torch.set_num_threads(1)
        torch.manual_seed(spec.seed)
        if getattr(config, "anneal_lr", False) and spec.steps is None:
            raise ConfigError(
                "hparams.anneal_lr decays the learning rate to 0 over the step budget, and this run has none: "
                "give it steps (the total, also when resuming), or turn anneal_lr off"
            )
        if spec.workers and num_envs % spec.workers:
            raise ConfigError(
                f"{num_envs} sub-envs (num_envs, from the preset if unset) cannot be split evenly over "
                f"workers: {spec.workers}; set num_envs to a multiple of workers"
            )
        # with rollout workers each worker process has its own env: the pod's own is only a reference copy
        copies = 1 if spec.workers else num_envs
        self.env = make(spec.env, num_envs=copies, device=spec.device, native=spec.native_env, **spec.env_kwargs)
        # (a refused env or agent: _locked closes the env, whose gymnasium subprocesses would outlive the error)
        problem = self.env.unreachable(spec.target, spec.env) if spec.target is not None else None
        if problem is not None:
            raise ConfigError(problem)
        obs_space, act_space = self.env.single_observation_space, self.env.single_action_space
        self.agent = build_agent(spec, obs_space, act_space, num_envs, self.env.device, config)
        fork = start_method(spec, self.env) == "fork"
        self.cpu_plan = plan_cpu(spec, self.agent.widest_matmul, local_cpus(), fork)
        if self.cpu_plan.threads is not None:
            torch.set_num_threads(self.cpu_plan.threads)
        if hasattr(self.agent, "generator"):
            self.agent.generator.manual_seed(spec.seed + AGENT_SEED_OFFSET)
        self.agent.budget_steps = learner_budget(spec)  # for schedules defined as a fraction of the budget
        self.steps, self.iterations, self.wall_time, self.eval_time = 0, 0, 0.0, 0.0
        self.eval_wait = 0.0  # seconds training waited for the evaluator
        self.best_mean, self.best_std = -math.inf, math.inf
        self.time_to_target: float | None = None
        self.steps_to_target: int | None = None
        self.train_time_to_target: float | None = None
        self.confirmed: dict[str, float] | None = None  # mean, std, episodes of the confirmation that stopped it
        self.confirmations = 0  # confirmations tried for this target: each asks for more (evaluator.margin_for)
        self.confirm_seeds_used = 0  # confirmations ever run, whatever the target: each takes fresh seeds
        self.evaluations = 0
        self._next_eval = 0  # env steps of the next evaluation; 0: the first cadence step (set by run)
        self._next_snapshot = spec.snapshot_every or math.inf
        self._replay: dict[str, torch.Tensor] | None = None  # replay buffer contents to start run() with
        self._message = ""
        self._submitted_at = -1  # env steps of the last snapshot handed to the evaluator

    # ----------------------------------------------------------------- resume
    @classmethod
    def resume(cls, run_dir: str | Path, progress: bool | None = None, **overrides: Any) -> Pod:
        """Continue the run in ``run_dir`` from ``checkpoints/last.pt`` with the hyperparameters it was
        trained with. ``overrides`` change budget fields (``steps``, ``seconds``, ``target``, ...): budgets
        are totals over the whole run, as in the spec, not amounts to add; a budget given as None is dropped
        (one must remain).

        Raises:
            CheckpointError: no usable ``last.pt`` in ``run_dir``.
            ConfigError: a bad budget (the message names it).
        """
        path = Path(run_dir)
        if path.is_file():
            run = PodDir.of_checkpoint(path)
            raise CheckpointError(
                f"resume takes a run directory, not a file ({path}): "
                + (
                    f"resume {run.root}, the run it belongs to"
                    if run.last.is_file()
                    else "give the pod's run directory"
                )
            )
        if TournamentDir(path).holds_tournament():
            raise RunDirError(
                f"{path} holds a tournament, not a pod: podium tournament resume {shlex.quote(str(path))} "
                "(Python: podium.tournament.resume_tournament(...))"
            )
        if not path.exists():
            raise CheckpointError(
                f"{path} does not exist: resume takes the run directory of a pod (its --run-dir, or the "
                "runs/ENV-ALGO-seedS-TIMESTAMP folder it printed)"
            )
        if not PodDir(path).holds_run():
            raise CheckpointError(
                f"{path} holds no pod's run (no spec.yaml, no checkpoints/last.pt): nothing to resume"
            )
        pod = cls.__new__(cls)
        pod.dir = PodDir(run_dir)
        with _locked(pod, create=False):
            return pod._resume(progress, overrides)

    def _resume(self, progress: bool | None, overrides: dict[str, Any]) -> Pod:
        pod, pod_dir = self, self.dir
        if not pod_dir.last.is_file() and pod_dir.holds_run():
            raise CheckpointError(
                f"{pod_dir.root} holds a run that stopped before its first checkpoint: there is nothing to resume; "
                f"start it again with --overwrite (Python: overwrite=True)"
            )
        payload = load_checkpoint(pod_dir.last)
        for directory in (pod_dir.checkpoints, pod_dir.snapshots):  # what a killed run was writing when it died
            remove_partial_writes(directory)
        old = PodSpec(**payload["spec"])
        changes = dict(overrides)  # a budget given as None is dropped: PodSpec checks that one remains
        try:
            spec = PodSpec(**{**payload["spec"], **changes})
        except ValidationError as exc:
            raise ConfigError(validation_message(exc, "resume")) from None
        config = payload.get("agent_config")  # absent in checkpoints written before podium stored it
        if config is None:
            config = resolve_config(spec)
        pod._setup(spec, progress, _config(spec, config), int(payload.get("num_envs") or resolve_num_envs(spec)))
        pod._check_algo(payload, pod_dir.last)
        pod.agent.load_state_dict(payload["agent"])
        c = payload["counters"]
        pod.steps, pod.iterations, pod.wall_time = int(c["steps"]), int(c["iterations"]), float(c["wall_time"])
        pod.eval_time = float(c.get("eval_time", 0.0))
        pod.eval_wait = float(c.get("eval_wait", pod.eval_time))
        pod.evaluations = int(c.get("evaluations", 0))
        pod.best_mean, pod.best_std = float(c["best_mean"]), float(c["best_std"])
        b: dict[str, Any] = {}
        best_target = None
        if pod_dir.best.is_file():  # best.pt may be newer than last.pt (a crash between two checkpoints)
            best = load_checkpoint(pod_dir.best)
            b, best_target = best["counters"], best.get("spec", {}).get("target")
            if (float(b["best_mean"]), -float(b["best_std"])) > (pod.best_mean, -pod.best_std):
                pod.best_mean, pod.best_std = float(b["best_mean"]), float(b["best_std"])
        # confirmation seeds are never used twice: not after a new target, nor after a kill that lost the
        # counters of last.pt's successors (best.pt, written at a confirmation, may know of later ones; the
        # curve, appended at every score, knows of every confirmation that ran)
        used = [int(x.get("confirm_seeds_used", x.get("confirmations", 0))) for x in (c, b)]
        ran = sum(row["confirm_mean"] is not None for row in read_curve(pod_dir.curve))
        pod.confirm_seeds_used = max(*used, ran)
        pod._next_eval = int(c["next_eval"])
        pod._next_snapshot = float(c.get("next_snapshot", spec.snapshot_every or math.inf))
        if spec.target == old.target:  # a new target is reached (or not) anew
            pod.time_to_target = c.get("time_to_target")
            pod.steps_to_target = c.get("steps_to_target")
            pod.train_time_to_target = c.get("train_time_to_target")
            pod.confirmed = c.get("confirmed")
            same = best_target == spec.target  # best.pt's count of tries is for the target it was written under
            pod.confirmations = max(int(c.get("confirmations", 0)), int(b.get("confirmations", 0)) if same else 0)
        if hasattr(pod.agent, "generator"):  # a resumed leg draws new numbers, as its envs reset with new seeds
            pod.agent.generator.manual_seed(spec.seed + AGENT_SEED_OFFSET + pod.iterations)
        pod._replay = pod._read_replay(pod_dir.replay, steps=pod.steps)
        return pod

    def _read_replay(self, path: Path, steps: int | None = None) -> dict[str, torch.Tensor] | None:
        """The replay buffer saved at ``path`` for an off-policy agent; None when there is none to use. With
        ``steps`` (a resume: the checkpoint's env steps), a buffer saved at another step is used with a warning."""
        if self.agent.on_policy or not path.is_file():
            return None
        try:
            payload = load_checkpoint(path, map_location=self.env.device)
            if payload.get("algo") != self.agent.name:
                raise CheckpointError(f"it holds a {payload.get('algo')!r} agent's experience")
            saved = payload.get("steps")
            if steps is not None and saved is not None and int(saved) != steps:
                warnings.warn(
                    f"the replay buffer {path} was saved at env step {saved}, the checkpoint at step {steps}: "
                    "the run stopped without saving its buffer (it is written at each time-based checkpoint and "
                    "when a run stops cleanly), so the transitions since are lost; training goes on with it",
                    stacklevel=2,
                )
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
    def _counters(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "iterations": self.iterations,
            "wall_time": self.wall_time,
            "eval_time": self.eval_time,
            "eval_wait": self.eval_wait,
            "evaluations": self.evaluations,
            "best_mean": self.best_mean,
            "best_std": self.best_std,
            "next_eval": self._next_eval,
            "next_snapshot": self._next_snapshot,
            "time_to_target": self.time_to_target,
            "steps_to_target": self.steps_to_target,
            "train_time_to_target": self.train_time_to_target,
            "confirmed": self.confirmed,
            "confirmations": self.confirmations,
            "confirm_seeds_used": self.confirm_seeds_used,
        }

    def _payload(self, agent_state: dict[str, Any] | None = None, counters: dict[str, Any] | None = None) -> dict:
        """A checkpoint: the spec, the *resolved* hyperparameters and sub-env count (so a checkpoint loads
        as it was trained, whatever later presets say), the agent's state and the counters."""
        return {
            "algo": self.agent.name,
            "spec": self.spec.model_dump(mode="json"),
            "agent_config": self.agent.config.model_dump(mode="json"),
            "num_envs": self.agent.num_envs,
            "agent": self.agent.state_dict() if agent_state is None else agent_state,
            "counters": self._counters() if counters is None else counters,
        }

    def save(self, path: Path | None = None, buffer: Any = None) -> Path:
        """Write the agent's current state to ``path`` (default ``checkpoints/last.pt``) atomically; with an
        off-policy ``buffer`` (and ``spec.save_replay_buffer``), also the buffer to ``checkpoints/replay.pt``."""
        path = save_checkpoint(path or self.dir.last, self._payload())
        if buffer is not None and self.spec.save_replay_buffer and hasattr(buffer, "state_dict"):
            replay = {"algo": self.agent.name, "steps": self.steps, "replay": buffer.state_dict()}
            save_checkpoint(self.dir.replay, replay)
        return path

    # ----------------------------------------------------------------- the loop
    def _budget_left(self, started: float, base_wall: float) -> str | None:
        spec = self.spec
        if spec.target is not None and self.time_to_target is not None:
            return "target"
        if spec.steps is not None and self.steps >= spec.steps:
            return "steps"
        if spec.seconds is not None and base_wall + time.perf_counter() - started >= spec.seconds:
            return "seconds"
        return None

    def _score_final(self, curve: CurveWriter) -> Scored | None:
        """Score the policy of ``last.pt`` as a run's end does (the evaluator inline: nothing else runs)."""
        spec, last = self.spec, None
        service = self._evaluator_service(mode="inline")
        logger = ScalarLogger(self.run_dir, tensorboard=spec.tensorboard, resume_at=self.steps)
        try:
            self._submit(service)
            for scored in self._wait(service):
                last = self._record(scored, curve, logger)
            self.save()
        finally:
            service.close()
            logger.close()
        return last

    def _nothing_to_do(self, stop: str, scored_final: bool = False) -> str:
        spec = self.spec
        if stop == "target":
            why = (
                f"the run already reached its target {spec.target:g} "
                f"(confirmed {self.best_mean:.2f} after {self.steps_to_target:,} steps)"
            )
            fix = "give a higher target (--target) to train on, or drop it (--no-target; Python: target=None)"
        elif stop == "steps":
            why = f"the run already has {self.steps:,} env steps >= its step budget {spec.steps:,}"
            fix = f"budgets are totals: give steps (--steps) larger than {self.steps:,}"
        else:
            why = f"the run already trained {self.wall_time:.1f} s >= its time budget {spec.seconds:g} s"
            fix = f"budgets are totals: give seconds (--seconds) larger than {self.wall_time:.0f}"
        if scored_final:  # stopped after its last step, before its final evaluation: that was left to do
            return f"only the final evaluation was left to do: {why}; {fix}"
        return f"nothing to do: {why}; {fix}"

    def run(self, plot: bool = True) -> PodReport:
        """Train until the target is confirmed, the step budget or the time budget is reached. The run
        directory stays locked against other pods until this returns.

        Args:
            plot: draw the learning curve (``curve.png``, :meth:`plot`) as the run ends. ``False`` leaves
                it to the caller: a tournament's pod process draws it after it delivered the report, so the
                tournament does not wait for matplotlib (about 0.8 s in a fresh process, 0.2 s later).

        Raises:
            PodInterrupted: SIGINT/SIGTERM arrived; ``last.pt`` holds every step trained.
            TrainingDivergedError: a loss became NaN/inf (``last.pt`` holds the last good state).
            EvaluationError: the evaluator failed (``last.pt`` holds the training state, once it has learned).
            WorkerError: a rollout worker failed (likewise; a worker that cannot start is named with its reason).
            RunDirError: another pod is training into the run directory.
        """
        self._lock.acquire()  # held since the pod was made; again when run() is called a second time
        try:
            return self._run(plot)
        finally:
            self._lock.release()

    def plot(self) -> None:
        """Draw ``curve.png`` from ``curve.csv``: the evaluation score against env steps and against seconds."""
        draw_curve(self.run_dir, self.spec)

    def _run(self, plot: bool) -> PodReport:
        spec, agent = self.spec, self.agent
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.dir.spec.write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
        curve = CurveWriter(self.dir.curve)
        if any(r["step"] > self.steps and r["confirm_mean"] is not None for r in curve.rows):
            # the rows cut below are the only record of those confirmations (their leg was killed before its
            # next checkpoint): last.pt keeps their count first, so a second kill cannot reuse their seeds
            self.save()
        curve.truncate_after(self.steps)
        start = time.perf_counter()
        base_wall, base_steps = self.wall_time, self.steps
        trained = 0.0  # seconds of collecting and learning in this run (for eval_share's training speed)
        final_soon = False  # eval_share: the final evaluation comes within two gaps, routine ones are over
        stop = self._budget_left(start, base_wall)
        if stop is not None and self.iterations > 0:  # a resumed run whose budget is already spent
            last = None
            if stop != "target" and (not curve.rows or curve.rows[-1]["step"] != self.steps):
                last = self._score_final(curve)  # it was stopped before it scored its final policy
                stop = "target" if self.time_to_target is not None else stop
                if plot:
                    self.plot()
            self._message = self._nothing_to_do(stop, scored_final=last is not None)
            report = self._report(stop, curve, last)
            if spec.select_episodes > 0:  # it may have been stopped during its selection: the score it lacks
                self._select(report)
            return report
        # forked processes first (extra learners, evaluator, rollout workers): they must not inherit the
        # logger's thread
        group: _LearnerGroup | None = None
        service: EvaluatorService | None = None
        worker: Worker | WorkerGroup | None = None
        logger: ScalarLogger | None = None
        progress: _Progress | None = None
        last: Scored | None = None
        buffer = None
        try:  # every process and file opened from here on is closed in the finally, whatever fails
            group = _LearnerGroup.start(self) if spec.learners > 1 else None
            # rollout workers before the evaluator: a fork must not copy a thread that holds a lock (a thread
            # evaluator builds its env and agent as it starts)
            worker = _make_worker(spec, self.env, agent, seed=spec.seed + self.iterations)
            service = self._evaluator_service()
            fusion = group.join() if group else None  # its threads start after every fork of learner 0
            every = spec.eval_every or (1 if service.mode == "process" else DEFAULT_EVAL_EVERY)
            self._next_eval = self._next_eval or every
            logger = ScalarLogger(self.run_dir, tensorboard=spec.tensorboard, resume_at=self.steps)
            learner = Learner(agent, fusion, spec.fuse_every)
            if spec.target is not None and group is None and service.mode != "inline":
                # a confirmed target ends a long learning phase early: the pod stops when it arrives, not
                # one phase later (a PPO phase on Pendulum is 2.5 times the evaluator's confirmation)
                agent.stop_early = functools.partial(self._target_waiting, service)
            buffer = agent.make_buffer()
            if self._replay is not None:
                buffer.load_state_dict(self._replay)
                self._replay = None
            last_ckpt = start
            progress = _Progress(spec, self.steps) if self.progress else None
            with _deferred_signals() as signals:
                while stop is None:
                    if spec.steps is not None and getattr(agent.config, "anneal_lr", False):
                        agent.lr_fraction = max(0.0, 1.0 - self.steps / spec.steps)  # type: ignore[attr-defined]
                    t0 = time.perf_counter()
                    rollout = worker.collect(buffer)
                    losses = learner.learn(buffer, worker.obs)
                    self.steps += rollout.steps * spec.learners  # every learner collected as many
                    self.iterations += 1
                    now = time.perf_counter()
                    trained += now - t0
                    self.wall_time = base_wall + now - start
                    bad = [k for k, v in losses.items() if not math.isfinite(v)]
                    if bad:
                        raise TrainingDivergedError(
                            f"{', '.join(bad)} became {losses[bad[0]]} at step {self.steps} "
                            f"(iteration {self.iterations}); training stopped. {_divergence_advice(self.dir, buffer)}"
                        )
                    scalars = {f"losses/{k}" if "/" not in k else k: v for k, v in losses.items()}
                    scalars["charts/SPS"] = rollout.steps / max(now - t0, 1e-9)
                    if rollout.episode_returns:
                        returns, lengths = rollout.episode_returns, rollout.episode_lengths
                        scalars["charts/episodic_return"] = sum(returns) / len(returns)
                        scalars["charts/episodic_length"] = sum(lengths) / len(lengths)
                    for scored in service.results():
                        last = self._record(scored, curve, logger)
                    stop = "interrupted" if signals else self._budget_left(start, base_wall)
                    if group is not None:  # learners fuse, and stop together, at fusion phases only
                        if learner.fusing:
                            learner.fuse(stop is not None)
                            scalars["charts/fusion_seconds"] = learner.fusion_time
                        else:
                            stop = None
                    logger.log(self.steps, scalars)
                    if self.steps >= self._next_eval and not service.busy and not final_soon:
                        while self._next_eval <= self.steps:
                            self._next_eval += every
                        waited = self._submit(service)
                        if service.mode == "inline" and spec.eval_share is not None:
                            sps = (self.steps - base_steps) / max(trained, 1e-9)
                            gap = inline_eval_gap(every, waited, sps, spec.eval_share)
                            self._next_eval = max(self._next_eval, self.steps + gap)
                            final_soon = _final_soon(spec, self.steps, self.wall_time, gap, sps)
                        for scored in service.results():  # inline mode: scored already
                            last = self._record(scored, curve, logger)
                        if stop is None and group is None and self._budget_left(start, base_wall) == "target":
                            stop = "target"  # confirmed just now: stop here, not after another learning phase
                    if self.wall_time >= self._next_snapshot:
                        while self._next_snapshot <= self.wall_time:
                            self._next_snapshot += spec.snapshot_every or math.inf
                        self.save(self.dir.snapshot(self.steps))
                    if progress is not None:
                        progress.update(self.steps, self.wall_time, scalars["charts/SPS"], last, self.best_mean)
                    timed = spec.checkpoint_every > 0 and now - last_ckpt >= spec.checkpoint_every
                    if stop is not None or spec.checkpoint_every == 0 or timed:
                        self.save(buffer=buffer if stop is not None or timed else None)
                        last_ckpt = now
                if stop == "interrupted":
                    raise PodInterrupted(signals[0], self.run_dir, self.steps)
                if stop != "target":  # end with a score of the final policy
                    if self._submitted_at != self.steps:
                        self._submit(service)
                    for scored in self._wait(service, signals):
                        last = self._record(scored, curve, logger)
                    self.save()
                    if signals:  # stopped while its final policy was scored (inline: once that score was in)
                        raise PodInterrupted(signals[0], self.run_dir, self.steps)
                    if self.time_to_target is not None:
                        stop = "target"  # the final policy confirmed it
        except (EvaluationError, WorkerError):
            if self.iterations > 0:  # a run that never learned leaves no checkpoint: it is started again, not resumed
                self.save(buffer=buffer)
            raise
        except RuntimeError as exc:  # a fusion failed: say which learner failed and why
            failure = group.failure() if group is not None else None  # read once: it takes the message
            if failure is not None:
                raise LearnerError(failure) from exc
            raise
        finally:
            agent.stop_early = None
            if isinstance(worker, WorkerGroup):
                worker.close()
            if group is not None:
                group.close()
            if service is not None:
                service.close()
            if logger is not None:
                logger.close()
            if progress is not None:
                progress.close()
            if plot:
                self.plot()
        report = self._report(stop or "steps", curve, last)
        if spec.select_episodes > 0:
            self._select(report)
        return report

    def _select(self, report: PodReport) -> None:
        """Score the best snapshot on ``spec.select_episodes`` fresh episodes into ``report`` (a confirmation
        with at least as many episodes already is one)."""
        spec = self.spec
        payload = load_checkpoint(self.dir.best) if self.dir.best.is_file() else None
        recorded = payload["counters"] if payload is not None else {}
        if report.confirmed_episodes is not None and report.confirmed_episodes >= spec.select_episodes:
            mean, std, episodes = report.confirmed_mean, report.confirmed_std, report.confirmed_episodes
        elif recorded.get("selection_mean") is not None:  # this best snapshot was scored before (a resumed pod)
            mean, std = recorded["selection_mean"], recorded["selection_std"]
            episodes = recorded["selection_episodes"]
        elif payload is not None:
            obs_space, act_space = self.env.single_observation_space, self.env.single_action_space
            agent = build_agent(spec, obs_space, act_space, self.agent.num_envs, self.agent.device, self.agent.config)
            agent.load_modules(payload["agent"])
            mean, std, episodes = self._selection_score(agent)
        else:
            return
        report.selection_mean, report.selection_std, report.selection_episodes = mean, std, episodes
        if payload is not None:  # the checkpoint records the score it was selected by (see the updater)
            payload["counters"].update(selection_mean=mean, selection_std=std, selection_episodes=episodes)
            save_checkpoint(self.dir.best, {k: v for k, v in payload.items() if k != "format"})

    def _selection_score(self, agent: Agent) -> tuple[float, float, int]:
        """``agent`` scored on ``spec.select_episodes`` fresh episodes: (mean, std, episodes). With
        ``spec.select_bar``, on an env that steps its copies one by one (not ``env.batched``), the episodes are
        played in parts and stop early where the score is surely below the bar (:data:`SELECT_PARTS`); a
        gymnasium env's episode ``i`` resets with ``spec.seed + SELECT_SEED_OFFSET + i`` either way."""
        spec = self.spec
        total, bar = spec.select_episodes, spec.select_bar
        part = -(-total // SELECT_PARTS)
        if self.env.batched or part < SELECT_MIN_PART:  # a batched env plays a part for the price of the whole;
            bar = None  # and a handful of episodes says too little about the spread
        if bar is None:
            part = total
        kwargs = {**spec.env_kwargs, **spec.eval_env_kwargs}
        env = make(spec.env, num_envs=part, device=spec.device, native=spec.native_env, **kwargs)
        returns: list[float] = []
        start = time.perf_counter()
        try:
            evaluator = Evaluator(env, spec.eval_deterministic)
            while len(returns) < total:
                result = evaluator.evaluate(agent, seed=spec.seed + SELECT_SEED_OFFSET + len(returns))
                returns += result.returns[: total - len(returns)]
                if bar is not None and len(returns) < total:
                    values = torch.tensor(returns, dtype=torch.float64)
                    mean, std = float(values.mean()), float(values.std())  # the sample std (n - 1)
                    if std > 0 and mean + SELECT_BAR_MARGIN * std / len(returns) ** 0.5 < bar:
                        break  # this pod cannot make a difference: the rest of its episodes would not change that
        finally:
            env.close()
        result = EvalResult.of(returns, time.perf_counter() - start)
        return result.mean, result.std, result.episodes

    def _evaluator_service(self, mode: str | None = None) -> EvaluatorService:
        """The pod's evaluator, run as the CPU plan says (or in ``mode``)."""
        spec, agent = self.spec, self.agent
        obs_space, act_space = self.env.single_observation_space, self.env.single_action_space

        def build() -> tuple[Agent, Evaluator, Evaluator | None]:
            """The evaluator's own agent and envs, made where the evaluator runs (training's are never touched)."""
            kwargs = {**spec.env_kwargs, **spec.eval_env_kwargs, "device": spec.device, "native": spec.native_env}
            eval_agent = build_agent(spec, obs_space, act_space, agent.num_envs, agent.device, agent.config)
            evaluator = Evaluator(make(spec.env, num_envs=spec.eval_episodes, **kwargs), spec.eval_deterministic)
            confirmer = None
            if spec.target is not None and spec.confirm_episodes > 0:
                confirmer = Evaluator(make(spec.env, num_envs=spec.confirm_episodes, **kwargs), spec.eval_deterministic)
            return eval_agent, evaluator, confirmer

        return EvaluatorService(
            build,
            target=spec.target if spec.confirm_episodes > 0 else None,
            # a resumed pod goes on with fresh confirmation seeds (whatever its target)
            confirm_seed=spec.seed + CONFIRM_SEED_OFFSET + self.confirm_seeds_used * spec.confirm_episodes,
            mode=mode or self.cpu_plan.eval_mode,
        )

    def _submit(self, service: EvaluatorService) -> float:
        """Hand the evaluator a snapshot of the agent (inline mode: and score it now); returns the seconds
        training waited (inline mode: the whole evaluation)."""
        self._submitted_at = self.steps
        t0 = time.perf_counter()
        seed = eval_seed(self.spec.seed, self.steps)  # the snapshot's score does not depend on the mode
        service.submit(Snapshot.of(self.agent, self.steps, self.wall_time, seed, counters=self._counters()))
        self.evaluations += 1
        waited = time.perf_counter() - t0  # inline mode: the whole evaluation
        self.eval_wait += waited
        self.wall_time += waited
        return waited

    def _wait(self, service: EvaluatorService, signals: list[int] | None = None) -> list[Scored]:
        """Wait for every submitted snapshot to be scored, or until a signal is noted in ``signals`` (the
        pod then stops; a resumed run scores its final policy)."""
        t0 = time.perf_counter()
        out = service.wait(timeout=None if signals is None else 0.1)
        while signals is not None and not signals and service.busy:
            out += service.wait(timeout=0.1)
        waited = time.perf_counter() - t0
        self.eval_wait += waited
        self.wall_time += waited
        return out

    def _reaches(self, scored: Scored, tries: int) -> bool:
        """Whether ``scored`` reaches the target; ``tries``: its confirmation's number in this run (1 = the
        first), which sets the margin (:func:`~podium.pod.evaluator.confirms`)."""
        spec = self.spec
        if spec.target is None:
            return False
        if scored.confirmation is not None:
            return confirms(scored.confirmation, spec.target, spec.confirm_margin, tries)
        return spec.confirm_episodes == 0 and scored.result.mean >= spec.target

    def _target_waiting(self, service: EvaluatorService) -> bool:
        """Whether a result that reaches the target has arrived; it stays with the service, which hands it
        over after the learning phase (:meth:`EvaluatorService.waiting`)."""
        tries = self.confirmations
        for scored in service.waiting():
            tries += scored.confirmation is not None
            if self._reaches(scored, tries):
                return True
        return False

    def _record(self, scored: Scored, curve: CurveWriter, logger: ScalarLogger) -> Scored:
        """Take in a scored snapshot: curve row, best snapshot, target."""
        spec, result, snap = self.spec, scored.result, scored.snapshot
        self.eval_time += scored.seconds
        score = scored.confirmation or result
        if spec.target is not None and scored.confirmation is not None:
            self.confirmations += 1
            self.confirm_seeds_used += 1
        reached = self._reaches(scored, self.confirmations)
        first = reached and self.time_to_target is None
        # best.pt holds the best-scoring snapshot until the target is reached, then the one that reached it,
        # for good: an earlier snapshot may have scored a higher mean on a confirmation that failed (a wider
        # spread, or a later try's wider margin), and snapshots scored after the stop do not count
        better = (score.mean, -score.std) > (self.best_mean, -self.best_std)
        if first or (better and self.time_to_target is None):
            self.best_mean, self.best_std = score.mean, score.std
            counters = {
                **snap.extra["counters"],  # the snapshot's, but for what its scoring used up: the confirmation
                "best_mean": score.mean,
                "best_std": score.std,
                "confirmations": self.confirmations,
                "confirm_seeds_used": self.confirm_seeds_used,
            }
            save_checkpoint(self.dir.best, self._payload(snap.state, counters))
        if first:
            self.time_to_target, self.steps_to_target = self.wall_time, snap.steps
            self.train_time_to_target = self.wall_time - self.eval_wait
            if scored.confirmation is not None:
                self.confirmed = {"mean": score.mean, "std": score.std, "episodes": score.episodes}
        curve.append(
            {
                "step": snap.steps,
                "wall_time": round(snap.wall_time, 4),
                "eval_mean": result.mean,
                "eval_std": result.std,
                "eval_episodes": result.episodes,
                "best_mean": self.best_mean,
                "confirm_mean": scored.confirmation.mean if scored.confirmation else None,
                "scored_at": round(self.wall_time, 4),
            }
        )
        scalars = {"eval/mean_return": result.mean, "eval/std_return": result.std}
        if scored.confirmation is not None:
            scalars["eval/confirmed_mean_return"] = scored.confirmation.mean
        logger.log(snap.steps, scalars)
        return scored

    def _report(self, stop: str, curve: CurveWriter, last: Scored | None) -> PodReport:
        spec = self.spec
        rows = curve.rows
        if last is not None:
            last_mean, last_std = last.result.mean, last.result.std
        elif rows:
            last_mean, last_std = rows[-1]["eval_mean"], rows[-1]["eval_std"]
        else:
            last_mean, last_std = math.nan, math.nan
        confirmed = self.confirmed or {}
        return PodReport(
            score_mean=self.best_mean,
            score_std=self.best_std,
            last_mean=last_mean,
            last_std=last_std,
            steps=self.steps,
            wall_time=self.wall_time,
            reached_target=spec.target is not None and self.time_to_target is not None,
            time_to_target=self.time_to_target,
            steps_to_target=self.steps_to_target,
            train_time_to_target=self.train_time_to_target,
            stop_reason=stop,
            eval_time=self.eval_time,
            run_dir=str(self.run_dir),
            checkpoint=str(self.dir.best),
            curve=rows,
            confirmed_mean=confirmed.get("mean"),
            confirmed_std=confirmed.get("std"),
            confirmed_episodes=int(confirmed["episodes"]) if confirmed else None,
            message=self._message,
            target=spec.target,
        )


def _config(spec: PodSpec, config: AgentConfig | dict[str, Any]) -> AgentConfig:
    if isinstance(config, AgentConfig):
        return config
    cls = get_algo(spec.algo)
    try:
        return cls.Config(**config)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, f"saved hyperparameters of {cls.name}")) from None


class LearnerError(RuntimeError):
    """One of a pod's extra learner processes failed; the pod stopped (its last checkpoint is intact)."""


class _LearnerGroup:
    """Learners 1..K-1 of a pod with ``learners: K``: forked processes, each with its own env (its own
    workers' data, other seeds) and its own copy of the agent, that learn in step with the pod (learner
    0) and fuse with it by averaging (:class:`~podium.pod.learner.FusionGroup`) after every
    ``fuse_every`` learning phases. They stop when learner 0 says so, or when it is gone."""

    def __init__(self, processes: list[Any], conns: list[Any], tmp: Path, size: int) -> None:
        self.processes, self.conns, self.tmp, self.size = processes, conns, tmp, size
        self.fusion: FusionGroup | None = None  # joined by join(), once learner 0 has forked what it forks

    @classmethod
    def start(cls, pod: Pod) -> _LearnerGroup:
        """Fork learners 1..K-1 and wait until each is built (a failure is named at once). The group is joined
        later (:meth:`join`): joining starts gloo's threads, and learner 0 still forks its rollout workers and
        its evaluator, which must not copy a thread that may hold a lock."""
        spec = pod.spec
        if spec.device != "cpu" and not spec.device.startswith("cuda"):
            raise ConfigError(f"learners > 1 needs a CPU or CUDA device, not {spec.device!r}")
        context = multiprocessing.get_context(start_method(spec, pod.env))
        tmp = Path(tempfile.mkdtemp(prefix="podium-learners-"))
        store = tmp / "rendezvous"
        state = clone_tensors(pod.agent.state_dict())  # every learner starts from learner 0's state
        processes, conns = [], []
        for rank in range(1, spec.learners):
            parent, child = context.Pipe()
            args = (rank, spec, pod.agent.config, pod.agent.num_envs, state, pod._replay, pod.steps, pod.iterations)
            args += (store, child)
            # a learner with rollout workers forks them, which a daemonic process may not; it still ends with
            # learner 0 (its fusion fails when learner 0 is gone) and the pod reaps it on every exit path
            daemon = not spec.workers
            proc = context.Process(target=_extra_learner, args=args, name=f"podium-learner-{rank}", daemon=daemon)
            proc.start()
            child.close()
            processes.append(proc)
            conns.append(parent)
        try:
            # a learner that fails while it is built never joins: say why at once (the rendezvous would wait
            # FUSION_TIMEOUT for it and then fail with "Wait timeout", naming nobody)
            failure = await_children(processes, conns, "learner", FUSION_TIMEOUT)
            if failure is not None:
                raise LearnerError(failure)
        except BaseException:  # the group never formed: the learners started for it must not outlive it
            reap(processes, conns)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls(processes, conns, tmp, spec.learners)

    def join(self) -> FusionGroup:
        """Join the fusion group as learner 0 (the others joined once built and wait for it)."""
        self.fusion = FusionGroup(self.tmp / "rendezvous", 0, self.size)
        return self.fusion

    def failure(self) -> str | None:
        """What the first failed learner reported (or how it died), None if none failed. A learner killed
        outright closes its pipe, and its gloo socket, a moment before the kernel reports its exit (on a busy
        machine, long enough for the fusion's "connection reset" to arrive first): one whose pipe is closed gets
        a second to end, so that its exit code names it."""
        for rank, (proc, conn) in enumerate(zip(self.processes, self.conns, strict=True), start=1):
            try:
                if conn.poll(0.5):
                    return f"learner {rank} failed: {conn.recv()}"
            except (EOFError, OSError):  # its end of the pipe is closed: it is ending
                proc.join(timeout=1.0)
            if proc.exitcode not in (None, 0):
                return f"learner {rank} ended with exit code {proc.exitcode}"
        return None

    def close(self) -> None:
        reap(self.processes, self.conns)
        if self.fusion is not None:
            self.fusion.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _init_file(init: str) -> Path:
    """The checkpoint file ``init_checkpoint`` names: the file itself, or a run directory's policy checkpoint
    (``best.pt``, else ``last.pt``, as :func:`podium.load` reads a run directory)."""
    path = Path(init)
    if not path.is_dir():
        return path
    found = PodDir(path).policy_checkpoint()
    if found is None:
        raise CheckpointError(
            f"init_checkpoint {init} is a folder without checkpoints/best.pt or checkpoints/last.pt: give a "
            "checkpoint file or a pod's run directory"
        )
    return found


def _divergence_advice(run_dir: PodDir, buffer: Any) -> str:
    """Where a diverged pod's last good state is (if it saved one yet) and what to change: the env's outputs
    when the training data itself holds NaN or inf (rewards, observations), else the learning rate."""
    saved = next((p for p in (run_dir.last, run_dir.best) if p.is_file()), None)
    where = f"The last good checkpoint is {saved}." if saved else "No checkpoint was saved before it."
    tainted = [
        name
        for name in ("rewards", "obs", "next_obs")
        if isinstance(getattr(buffer, name, None), torch.Tensor)
        and not bool(torch.isfinite(getattr(buffer, name)).all())
    ]
    if tainted:
        return (
            f"{where} The training data holds NaN or inf ({', '.join(tainted)}): check the env's rewards and "
            "observations (rewards of 1e38 overflow too: scale them)."
        )
    return f"{where} Lower the learning rate or enable normalisation."


def draw_curve(run_dir: Path | str, spec: PodSpec) -> None:
    """Draw the learning curve of the pod in ``run_dir`` (its ``curve.csv``) into its ``curve.png``, titled with
    ``spec``'s algorithm, env and seed; nothing when it has no evaluation yet."""
    pod_dir = PodDir(Path(run_dir))
    title = f"{spec.algo} on {spec.env} (seed {spec.seed})"
    plot_curve(read_curve(pod_dir.curve), pod_dir.curve_plot, title, spec.target)


def start_method(spec: PodSpec, env: Any) -> Literal["fork", "spawn"]:
    """How a pod starts its processes (evaluator, learners, rollout workers): ``fork`` (fast: the child has
    the pod's state at once) only on a CPU, with an env a forked child can use (``VecEnv.fork_safe``: not the
    MJX engine, whose JAX threads do not survive a fork) and a platform that forks; else ``spawn`` (a process
    that has started CUDA must not fork either)."""
    forkable = spec.device == "cpu" and env.fork_safe and "fork" in multiprocessing.get_all_start_methods()
    return "fork" if forkable else "spawn"


def _make_worker(spec: PodSpec, env: Any, agent: Agent, seed: int) -> Worker | WorkerGroup:
    """A learner's worker: it steps ``env`` itself, or (``spec.workers``) its own rollout-worker processes."""
    if spec.workers:
        build = functools.partial(_worker_parts, spec, agent.config)
        return WorkerGroup(agent, build, spec.workers, seed=seed, start_method=start_method(spec, env))
    return Worker(env, agent, seed=seed)


def learner_budget(spec: PodSpec) -> int | None:
    """One learner's share of the pod's env-step budget (``None`` without one): an agent counts the env steps
    of its own sub-envs, so a schedule over a fraction of the budget (DQN's ``exploration_fraction``) must
    be over this share, or with K learners it would last K times too long."""
    return None if spec.steps is None else max(1, spec.steps // spec.learners)


def _worker_parts(spec: PodSpec, config: AgentConfig, rank: int, num_envs: int) -> tuple[Any, Agent]:
    """Rollout worker ``rank``'s env (``num_envs`` sub-envs, on the CPU) and agent (a copy of the pod's,
    whose parameters the pod sends before each rollout)."""
    env = make(spec.env, num_envs=num_envs, device="cpu", native=spec.native_env, **spec.env_kwargs)
    agent = build_agent(spec, env.single_observation_space, env.single_action_space, num_envs, env.device, config)
    agent.budget_steps = learner_budget(spec)
    if hasattr(agent, "generator"):
        agent.generator.manual_seed(torch.initial_seed())  # the worker's own seed (WorkerGroup sets it)
    return env, agent


def _extra_learner(
    rank: int,
    spec: PodSpec,
    config: AgentConfig,
    num_envs: int,
    state: dict[str, Any],
    replay: dict[str, torch.Tensor] | None,
    steps: int,
    iterations: int,
    store: Path,
    conn: Any,
) -> None:
    """Learner ``rank`` (>= 1) of a pod: collect on its own env, learn, fuse; until told to stop. It starts
    from learner 0's ``state`` and, off-policy, the ``replay`` buffer learner 0 starts with (resumed or
    inherited): with an empty one it would skip the random warm-up (its counters say it is over) and take
    no gradient step until its buffer refilled, while every fusion halved learner 0's progress."""
    ignore_stop_signals()  # learner 0 decides when the learners stop
    code, fusion, worker = 0, None, None
    try:
        torch.set_num_threads(1)  # a forked copy must not enter the parent's OpenMP pool (it would hang)
        torch.manual_seed(spec.seed + LEARNER_SEED_STRIDE * rank)
        copies = 1 if spec.workers else num_envs  # with rollout workers, each worker process has its own env
        env = make(spec.env, num_envs=copies, device=spec.device, native=spec.native_env, **spec.env_kwargs)
        agent = build_agent(spec, env.single_observation_space, env.single_action_space, num_envs, env.device, config)
        agent.budget_steps = learner_budget(spec)  # before the state, which may hold the schedules' own
        agent.load_state_dict(state)
        if hasattr(agent, "generator"):
            agent.generator.manual_seed(spec.seed + AGENT_SEED_OFFSET + LEARNER_SEED_STRIDE * rank + iterations)
        worker = _make_worker(spec, env, agent, seed=spec.seed + LEARNER_SEED_STRIDE * rank + iterations)
        conn.send(READY)
        fusion = FusionGroup(store, rank, spec.learners)
        learner = Learner(agent, fusion, spec.fuse_every)
        buffer = agent.make_buffer()
        if replay is not None:
            buffer.load_state_dict(replay)
        stop = False
        while not stop:
            if spec.steps is not None and getattr(agent.config, "anneal_lr", False):
                agent.lr_fraction = max(0.0, 1.0 - steps / spec.steps)  # type: ignore[attr-defined]
            rollout = worker.collect(buffer)
            losses = learner.learn(buffer, worker.obs)
            steps += rollout.steps * spec.learners
            bad = [k for k, v in losses.items() if not math.isfinite(v)]
            if bad:
                raise TrainingDivergedError(f"{', '.join(bad)} became {losses[bad[0]]} at step {steps}")
            stop = learner.fuse()
    except BaseException as exc:
        code = 1
        report_failure(conn, exc)
    finally:
        if isinstance(worker, WorkerGroup):
            with contextlib.suppress(Exception):
                worker.close()
        close_quietly(conn, fusion)
    os._exit(code)  # skip the pod's exit handlers, which a forked learner inherited


@contextlib.contextmanager
def _deferred_signals() -> Iterator[list[int]]:
    """While inside, SIGINT and SIGTERM are noted (in the yielded list) instead of stopping the process, so
    the pod stops at the end of a learning phase with its state saved; a second signal stops it at once.
    Only the main thread can receive signals: elsewhere this does nothing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum: int, frame: object) -> None:
        if received:
            raise KeyboardInterrupt(f"{signal.Signals(signum).name} again: stopping at once, without saving")
        received.append(signum)

    # a signal this process was told to ignore (`cmd &` in a script ignores SIGINT) stays ignored
    stops = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, note) for sig in stops}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Progress:
    """A rich progress bar: steps (or seconds) done, SPS, latest and best evaluation score."""

    def __init__(self, spec: PodSpec, steps: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.by_steps = spec.steps is not None
        total = spec.steps if self.by_steps else (spec.seconds or None)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self.task = self.bar.add_task(f"{spec.algo} {spec.env}", total=total, info="", completed=steps)
        self.bar.start()

    def update(self, steps: int, wall: float, sps: float, last: Scored | None, best: float) -> None:
        info = f"{steps:,} steps | {sps:,.0f} SPS"
        if last is not None:
            info += f" | eval {last.result.mean:.1f} ± {last.result.std:.1f} (best {best:.1f})"
        self.bar.update(self.task, completed=steps if self.by_steps else wall, info=info)

    def close(self) -> None:
        self.bar.stop()
