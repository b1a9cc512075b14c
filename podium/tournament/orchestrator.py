"""Orchestrator: the tournament's runner. It carries out what :func:`podium.tournament.scheduler.decide`
decides, through a backend, records the results through the updater and shows them (:mod:`.view`).

The loop::

    backend.poll() -> finished / failed / lost pods -> updater   # leaderboard + history in the database
    state = the database's pods and best score, backend.resources(), elapsed, failures in a row
    decisions = decide(state)                                     # pure: no process, no file
    stop?    target reached / seconds / steps / too many failures in a row
    shrink:  backend.cancel() the pods to preempt                 # they keep their checkpoint, resume later
    grow:    backend.submit() the pods to resume, and new ones planned by the generator

The runner never asks which backend it drives: each backend is built from the config by its own
``from_config`` and waits in ``poll`` as long as it likes.

Everything the loop knows is in the database (see :mod:`podium.tournament.leaderboard`), so an
orchestrator killed at any moment continues with ``podium tournament resume RUN_DIR``: pods still
running are adopted, finished ones are collected, the rest resume from their last checkpoint.

The run directory's layout is :class:`~podium.rundir.TournamentDir`'s (config, database, ``pods/``, pool
log, report and plots).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from podium.config import ConfigError, load_yaml
from podium.pod import build_agent
from podium.rundir import DirLock, PodDir, RunDirError, TournamentDir, safe_name
from podium.tournament.backends import Backend, PodJob, PodOutcome, Resources, backend_for, read_error, read_report
from podium.tournament.config import TournamentConfig, load_tournament_config
from podium.tournament.generator import Generator, effective_hparams, members
from podium.tournament.leaderboard import (
    DatabaseError,
    Entry,
    Leaderboard,
    OwnershipLost,
    PodRecord,
    database_url,
)
from podium.tournament.scheduler import (
    MIN_ROUND_SECONDS,
    Decisions,
    Rules,
    State,
    decide,
    pool_size,
    reaches,
)
from podium.tournament.states import PodStatus, StopReason
from podium.tournament.updater import Updater, member_bar, score_of, selection_bar
from podium.tournament.view import PoolView

__all__ = ["MIN_ROUND_SECONDS", "Orchestrator", "TournamentReport", "open_leaderboard", "preflight"]

STOP_GRACE = 60.0
"""At the time or step budget, running pods get this long to hand in their (capped) rounds."""
OUT_OF_REACH_WAIT = 1800.0
"""Seconds a resume waits for a pod of steps alone that still runs out of its reach (then runs it anew)."""


@dataclass
class TournamentReport:
    """The outcome of a tournament.

    Attributes:
        stop_reason: ``target``, ``seconds``, ``steps``, ``failures`` or ``interrupted``.
        elapsed: wall-clock seconds the tournament ran (over all resumes).
        time_to_target: elapsed seconds when a pod's score first reached the target (None if never).
        champion: the best leaderboard entry; ``lineage``: its ancestry, champion first.
        entries: the whole leaderboard, best first.
        pods_started / pods_failed: counts; ``total_steps``: env steps of all finished pods.
    """

    run_dir: str
    name: str
    stop_reason: str
    elapsed: float
    reached_target: bool
    time_to_target: float | None
    champion: Entry | None
    lineage: list[dict[str, Any]]
    entries: list[Entry]
    pods_started: int
    pods_failed: int
    total_steps: int
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises KeyboardInterrupt, as SIGINT does (only the main thread can handle signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _judge_results(rules: Rules, history: list[dict[str, Any]], entries: list[Any]) -> tuple[int, float | None]:
    """A new target, judged on the results so far as :meth:`Orchestrator._collect` judges each as it comes
    in: every result at or above it is a try (in the order they came), and one reaches it by the margin its
    try asks for. Returns the tries and the tournament's elapsed seconds when one reached it (None: none)."""
    episodes = {e.pod_id: e.score_episodes for e in entries}  # a result's episodes: its leaderboard entry's
    tries = 0
    for row in history:
        mean = row.get("score_mean")
        if rules.target is None or mean is None or mean < rules.target:
            continue
        tries += 1
        n = episodes.get(row["pod_id"])  # a result off the leaderboard is a try that reaches nothing
        if n and reaches(rules, mean, row["score_std"], n, tries):
            return tries, float(row["elapsed"])
    return tries, None


def _check_pods_can_run(config: TournamentConfig, backend: Backend) -> None:
    """Refuse what a pod in a new process cannot use: an env that this program registered (unknown there:
    every pod would fail), naming the two ways out; a numbered GPU (the backend pins one GPU per pod).

    Raises:
        ConfigError: naming the problem and the fix (the backend is shut down first).
    """
    from podium.envs.registry import known_to_new_processes

    device = str(config.pod.get("device", "cpu"))
    if backend.new_processes and device.startswith("cuda:") and device != "cuda:0":
        backend.shutdown()
        raise ConfigError(
            f"pod.device: {device!r}, but the {backend.name} backend gives each pod a GPU of its own (the pod "
            "sees only that one, as cuda:0): use 'cuda'"  # (cuda:0 is that one)
        )
    if not backend.new_processes or known_to_new_processes(config.env):
        return
    backend.shutdown()
    raise ConfigError(
        f"env: {config.env!r} is registered in this Python process only, and the {backend.name} backend runs "
        "each pod in a new process, where it is unknown (every pod would fail). Register it in a module and "
        f"give the env as 'your_module:{config.env}' (each pod imports your_module first), or run the "
        "tournament with backend: inline"
    )


def preflight(config: TournamentConfig) -> None:
    """Check everything that can be checked before a pod starts: the env exists, every algorithm builds
    on it with its hyperparameters, mutable names exist, the target is reachable.

    Raises:
        ConfigError: naming the problem and the fix.
    """
    from podium.algos import get_algo
    from podium.envs import make
    from podium.envs.base import parse_device

    device = str(config.pod.get("device", "cpu"))
    try:
        parse_device(device)  # whether this machine has one is the backend's to say
    except ValueError:
        raise ConfigError(f"pod.device: {device!r} is not a device; use cpu, cuda, cuda:N or mps") from None
    try:
        env = make(config.env, num_envs=1, device="cpu", **config.env_kwargs)
    except KeyError as exc:
        raise ConfigError(f"env: {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env {config.env!r} with env_kwargs {config.env_kwargs}: {exc}") from None
    try:
        for algo in config.algos:
            spec = config.pod_spec(algo, seed=0, device="cpu")
            try:
                build_agent(spec, env.single_observation_space, env.single_action_space, 1, env.device)
            except (ValueError, TypeError) as exc:
                if isinstance(exc, ConfigError):
                    raise
                raise ConfigError(f"algos: {algo} cannot train on {config.env}: {exc}") from None
            config_cls = get_algo(algo).Config
            fields = config_cls.model_fields
            unknown = [n for n in config.mutable(algo) if n not in fields]
            if unknown:
                where = "ranges" if unknown[0] in config.generator.ranges.get(algo, {}) else "mutate"
                raise ConfigError(
                    f"generator.{where}.{algo}: {unknown[0]!r} is not a {algo} hyperparameter "
                    f"(choose from {', '.join(sorted(fields))})"
                )
            for name, (low, high) in config.generator.ranges.get(algo, {}).items():
                base = effective_hparams(spec).get(name)
                if isinstance(base, bool) or not isinstance(base, int | float):
                    raise ConfigError(
                        f"generator.ranges.{algo}.{name}: only numeric hyperparameters can have a range "
                        f"({name} is {base!r})"
                    )
                for end in (low, high):
                    try:
                        config_cls(**{**effective_hparams(spec), name: type(base)(end)})
                    except ValidationError as exc:
                        raise ConfigError(
                            f"generator.ranges.{algo}.{name}: {end:g} is not a valid value "
                            f"({exc.errors()[0]['msg']}); narrow the range"
                        ) from None
        problem = env.unreachable(config.target, config.env) if config.target is not None else None
        if problem is not None:
            raise ConfigError(problem)
        eval_kwargs = config.pod.get("eval_env_kwargs") or {}
        if eval_kwargs:  # the evaluation env (a validation period, a score) must build too
            try:
                make(config.env, num_envs=1, device="cpu", **{**config.env_kwargs, **eval_kwargs}).close()
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"pod.eval_env_kwargs {eval_kwargs}: {exc}") from None
        _check_data_split(config, env)
    finally:
        env.close()


def _check_data_split(config: TournamentConfig, env: Any) -> None:
    """A trading tournament trains, selects (its evaluation env) and backtests on disjoint periods."""
    market = getattr(env, "market", None)
    if market is None or not hasattr(market, "dates"):
        return
    from podium.finance.market import check_split

    def period(kwargs: dict[str, Any]) -> tuple[str, str] | None:
        return tuple(kwargs["period"]) if kwargs.get("period") else None  # type: ignore[return-value]

    train = (str(market.dates[0])[:10], str(market.dates[-1])[:10])
    validation = period(config.pod.get("eval_env_kwargs") or {})
    test = (config.backtest.start, config.backtest.end) if config.backtest else None
    try:
        check_split(train=train, validation=validation if validation != train else None, test=test)
    except ValueError as exc:
        raise ConfigError(f"{exc} (env_kwargs.period, pod.eval_env_kwargs.period, backtest.start/end)") from None


def open_leaderboard(run_dir: str | Path) -> Leaderboard:
    """The leaderboard of the tournament in ``run_dir`` (read from its ``tournament.yaml``).

    Raises:
        ConfigError: ``run_dir`` holds no tournament.
        DatabaseError: its database cannot be reached.
    """
    meta = read_meta(Path(run_dir))
    return Leaderboard(database_url(meta.get("db"), run_dir), meta["name"])


def read_config(run_dir: str | Path) -> TournamentConfig:
    """The config of the tournament in ``run_dir`` (as last resumed)."""
    return load_tournament_config(None, **read_meta(Path(run_dir))["config"])


def read_meta(run_dir: Path) -> dict[str, Any]:
    """A tournament's ``tournament.yaml``: its ``name``, ``config`` and database URL (``db``), read-only.

    Raises:
        ConfigError: the directory holds no tournament, or the file is damaged.
    """
    path = TournamentDir(run_dir).meta
    if not path.is_file():
        raise ConfigError(f"{run_dir} holds no tournament (no tournament.yaml); start one with 'podium tournament'")
    meta = load_yaml(path)
    if "name" not in meta or "config" not in meta:
        raise ConfigError(f"{path} is damaged: it needs 'name' and 'config'")
    return meta


class Orchestrator:
    """Runs one tournament. Create it with :meth:`start` (new) or :meth:`resume` (continue), then :meth:`run`.

    Args:
        config: the tournament's config.
        run_dir: its directory.
        board: its leaderboard database.
        backend: where pods run (default: the one ``config.backend`` names, built from the config).
        progress: live view of the pool (default: when the output is a terminal).
    """

    def __init__(
        self,
        config: TournamentConfig,
        run_dir: Path,
        board: Leaderboard,
        backend: Backend | None = None,
        progress: bool | None = None,
    ) -> None:
        self.config, self.run_dir, self.board = config, run_dir, board
        self.backend = backend if backend is not None else backend_for(config)
        self.rules = Rules.of(config)
        self.generator = Generator(config)
        self.updater = Updater(
            board,
            config.leaderboard_size,
            config.selection.margin,
            keep_members=config.generator.scheme == "truncation",
        )
        self.view = PoolView(config, live=progress, backend=self.backend.describe())
        self.capacity: int | None = None
        self._time_to_target: float | None = None  # (re)read from the database when it runs
        self._tries = 0  # pod scores at or above the target so far (each asks for a wider margin)
        self._last_error = ""

    # ----------------------------------------------------------------- construction
    @classmethod
    def start(
        cls,
        config: TournamentConfig,
        run_dir: str | Path | None = None,
        backend: Backend | str | None = None,
        progress: bool | None = None,
    ) -> Orchestrator:
        """Check ``config``, reach the backend, create the run directory and the database entry, and return
        the orchestrator.

        Raises:
            ConfigError: bad config or a run directory that already holds a tournament.
            BackendError: the backend cannot run it (e.g. a Ray cluster that does not answer); nothing is created.
            DatabaseError: the database cannot be reached (nothing has started).
        """
        if isinstance(backend, str):
            config = config.model_copy(update={"backend": backend})
        preflight(config)
        run_dir = _local_path(run_dir) if run_dir is not None else _default_run_dir(config)
        try:
            TournamentDir(run_dir).claim()
        except RunDirError as exc:
            raise ConfigError(str(exc)) from None
        runner = backend if isinstance(backend, Backend) else backend_for(config)  # before anything is created
        _check_pods_can_run(config, runner)
        device = str(config.pod.get("device", "cpu"))
        if device.startswith("cuda") and runner.resources().gpus <= 0:
            runner.shutdown()
            raise ConfigError(
                f"pod.device: {device!r}, but the {runner.name} backend reports no GPU (0 GPUs); use "
                "pod.device: cpu, or run the tournament where the backend has GPUs"
            )
        created = not run_dir.exists()
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            run_dir = run_dir.resolve()
            name = f"{run_dir.name}-{uuid.uuid4().hex[:8]}"
            board = Leaderboard(database_url(config.db, run_dir), name)
            board.create(config.model_dump(mode="json"))
        except DatabaseError:
            runner.shutdown()
            if created:
                for leftover in TournamentDir(run_dir).database_files():
                    leftover.unlink()
                run_dir.rmdir()
            raise
        meta = {"name": name, "db": config.db, "config": config.model_dump(mode="json")}
        TournamentDir(run_dir).meta.write_text(yaml.safe_dump(meta, sort_keys=False))
        return cls(config, run_dir, board, runner, progress)

    @classmethod
    def resume(
        cls,
        run_dir: str | Path,
        backend: Backend | str | None = None,
        progress: bool | None = None,
        address: str | None = None,
        **budget: Any,
    ) -> Orchestrator:
        """Continue the tournament in ``run_dir`` (after a crash, Ctrl-C or to extend it), on its backend or on
        ``backend`` (``address``: the Ray cluster's, which may differ from the last run's).

        Args:
            budget: new values for ``seconds``, ``steps``, ``target`` or ``max_failures`` (None = keep).
        """
        run_dir = Path(run_dir).resolve()
        meta = read_meta(run_dir)
        changes = {k: v for k, v in budget.items() if v is not None}
        if isinstance(backend, str):
            changes["backend"] = backend
            if backend != "ray":
                changes["address"] = None
        if address is not None:
            changes["address"] = address
        data = {k: v for k, v in {**meta["config"], **changes}.items() if v is not None}  # None: the default
        config = load_tournament_config(None, **data)
        board = Leaderboard(database_url(meta.get("db"), run_dir), meta["name"])
        board.info()
        runner = backend if isinstance(backend, Backend) else backend_for(config)
        _check_pods_can_run(config, runner)
        if config.target != meta["config"].get("target"):  # a new target is judged anew, on the results so far
            tries, reached_at = _judge_results(Rules.of(config), board.history(), board.entries())
            board.update_info(time_to_target=reached_at, target_tries=tries)
        if changes:
            board.update_info(config=config.model_dump(mode="json"))
            meta["config"] = config.model_dump(mode="json")
            TournamentDir(run_dir).meta.write_text(yaml.safe_dump(meta, sort_keys=False))
        return cls(config, run_dir, board, runner, progress)

    # ----------------------------------------------------------------- the loop
    def run(self, force: bool = False) -> TournamentReport:
        """Run until a stop condition; returns the report (also written to ``RUN_DIR/report.json``).

        Raises:
            DatabaseError: another orchestrator runs this tournament (``force`` takes over a stale one).
            OwnershipLost: another orchestrator took it over while this one ran: this one leaves at once, its
                pods running on for the new owner (the process backend's; Ray's end with this process and are
                resumed by the new owner from their checkpoints).
        """
        board = self.board
        try:
            board.claim(force=force)
        except DatabaseError:
            self.backend.shutdown()
            raise
        info = board.info()
        self._elapsed0, self._t0 = float(info["elapsed"]), time.monotonic()
        self._time_to_target = info["time_to_target"]
        self._tries = int(info.get("target_tries") or 0)
        self._failures_in_row = 0
        self._last_error = ""
        self._last_beat = 0.0
        self._submitted = 0  # pods submitted by this run (none: its budget was spent before it started)
        self.view.start(self.run_dir)
        stop = StopReason.INTERRUPTED
        try:
            with _sigterm_as_interrupt():  # `kill`, `docker stop`, Kubernetes: wind down as for Ctrl-C
                lost = False
                try:
                    self._reconcile()
                    stop = self._loop()
                except KeyboardInterrupt:
                    stop = StopReason.INTERRUPTED
                except OwnershipLost:
                    lost = True
                    raise
                finally:
                    try:
                        self._wind_down(stop, lost)
                    finally:  # also when the wind-down itself finds the tournament taken over
                        self.view.stop()
        except OwnershipLost as exc:  # the tournament is another's now: write nothing more, stop no pod
            self.view.event(f"leaving: {exc}")
            board.close()
            raise
        except BaseException:  # a crash: give up ownership, so that a resume need not wait for it to go stale
            with contextlib.suppress(Exception):
                board.release("interrupted", stop_reason=str(StopReason.INTERRUPTED), elapsed=self.elapsed())
                board.close()
            raise
        try:
            board.heartbeat(self.elapsed())  # still the owner? (its report and plots would go over the new one's)
        except OwnershipLost as exc:
            self.view.event(f"leaving: {exc}")
            board.close()
            raise
        report = self._report(stop)
        status = "interrupted" if stop == StopReason.INTERRUPTED else "finished"
        board.release(status, stop_reason=str(stop), elapsed=report.elapsed)
        board.close()
        return report

    def elapsed(self) -> float:
        return self._elapsed0 + time.monotonic() - self._t0

    def _loop(self) -> StopReason:
        while True:
            for outcome in self.backend.poll():
                self._collect(outcome)
            self._beat()
            state = self.state()
            decisions = decide(state)
            if decisions.stop is not None:
                return decisions.stop
            self._apply(decisions, state)
            self.view.update(self.board, self.elapsed(), self.capacity or 0)

    def state(self) -> State:
        """What :func:`~podium.tournament.scheduler.decide` decides from: the database's pods, whether a pod's
        score reached the target, the backend's resources, the elapsed time and the failures in a row."""
        return State(
            rules=self.rules,
            pods=tuple(self.board.pods()),
            reached=self._time_to_target is not None,
            resources=self.backend.resources(),
            elapsed=self.elapsed(),
            failures_in_row=self._failures_in_row,
        )

    def _beat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= 2.0:
            self.board.heartbeat(self.elapsed())
            self._last_beat = now

    def pool_size(self, resources: Resources) -> int:
        """Pods that fit in ``resources`` given each pod's declared need, clamped to ``[pool.min, pool.max]``."""
        return pool_size(self.rules, resources)

    # ----------------------------------------------------------------- carrying out decisions
    def _apply(self, decisions: Decisions, state: State) -> None:
        if decisions.pool_size != self.capacity:
            r = state.resources
            self.view.event(
                f"pool: {self.capacity if self.capacity is not None else 0} -> {decisions.pool_size} pods "
                f"(resources: {r.cpus:g} CPUs, {r.gpus:g} GPUs)"
            )
            self.capacity = decisions.pool_size
            running = sum(p.status == PodStatus.RUNNING for p in state.pods)
            self._log_pool(r, decisions.pool_size, running)
        pods = {p.id: p for p in state.pods}
        if decisions.resume or decisions.start:  # still the owner? (else OwnershipLost, before a pod starts)
            self.board.heartbeat(self.elapsed())
        self._preempt(*(pods[pod_id] for pod_id in decisions.preempt))
        for pod_id in decisions.preempt:
            algo = pods[pod_id].algo
            self.view.event(f"{pod_id} ({algo}) preempted: the pool shrank; it will resume when there is room")
        for pod_id in decisions.resume:
            self._submit(pods[pod_id], resume=True)
        left = decisions.round_steps  # the steps the new pods may share (each round is capped at what is left)
        for k in range(decisions.start):
            if left is not None and left <= 0:
                break
            cap = left
            if left is not None and self.rules.pod_steps is None:
                # rounds bound by time: each new pod a fair share of what is left (a cap of all of it would be
                # committed to the first, and the other slots would wait until it ended)
                cap = -(-left // (decisions.start - k))
            record = self._plan(decisions.round_seconds, cap)
            if left is not None:
                left -= int(record.spec["steps"])
            self._submit(record, resume=False)

    def _preempt(self, *pods: PodRecord) -> None:
        """Stop running pods now, together (each keeps its checkpoint), and record each as preempted, with its
        steps so far; a pod that finished or failed just before the stop reached it is recorded as it ended."""
        if not pods:
            return
        self.board.heartbeat(self.elapsed())  # still the owner? (else OwnershipLost, before any pod is stopped)
        self.backend.cancel_many([pod.id for pod in pods])
        self._beat()
        for pod in pods:
            if not self._collect_ended(pod):
                self.board.update_pod(pod.id, status=PodStatus.PREEMPTED, handle=None, steps=_curve_steps(pod))

    def _collect_ended(self, pod: PodRecord) -> bool:
        """Record a running pod that ended with nobody watching as it ended, from the report or the error it
        left in its directory; False when it left neither."""
        report = read_report(Path(pod.run_dir))
        error = read_error(Path(pod.run_dir)) if report is None else None
        if pod.status != PodStatus.RUNNING or (report is None and error is None):
            return False
        self._collect(PodOutcome(pod.id, report, error))
        return True

    def _log_pool(self, resources: Resources, size: int, running: int) -> None:
        path = TournamentDir(self.run_dir).pool
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["elapsed", "cpus", "gpus", "pool_size", "running"])
            writer.writerow([round(self.elapsed(), 3), resources.cpus, resources.gpus, size, running])

    def _plan(self, round_seconds: float | None, round_steps: int | None = None) -> PodRecord:
        pods = self.board.pods()
        running = [p.algo for p in pods if p.status == PodStatus.RUNNING]
        number = self.board.take_pod_number()
        plan = self.generator.next(number, self.board.entries(), running, [p.algo for p in pods], pods)
        spec = plan.spec
        if round_seconds is not None:  # a round (plus its start-up and final evaluation) never outlasts the tournament
            spec = spec.model_copy(update={"seconds": min(spec.seconds or math.inf, round_seconds)})
        if round_steps is not None:  # nor trains more steps than the tournament has left
            spec = spec.model_copy(update={"steps": int(min(spec.steps or math.inf, max(1, round_steps)))})
        pod_id = f"p{number:04d}"
        record = self.board.add_pod(
            id=pod_id,
            number=number,
            parent_id=plan.parent_id,
            lineage=plan.lineage or pod_id,
            algo=spec.algo,
            env=spec.env,
            hparams=effective_hparams(spec),
            seed=spec.seed,
            spec=spec.model_dump(mode="json"),
            status=PodStatus.QUEUED,
            run_dir=str(TournamentDir(self.run_dir).pod(pod_id).root),
            init_checkpoint=spec.init_checkpoint,
        )
        origin = "fresh"
        if plan.sampled:
            origin += " (" + ", ".join(f"{k} {_shown(v)}" for k, v in plan.sampled.items()) + ")"
        changes = ", ".join(f"{k} {_shown(a)}->{_shown(b)}" for k, (a, b) in plan.mutated.items()) or "no mutation"
        if plan.parent is not None:
            origin = f"from {plan.parent.pod_id} (#{plan.parent.rank}, {plan.parent.score_mean:.1f}; {changes})"
        elif plan.source is not None and plan.source.lineage == plan.lineage:
            origin = f"continues {plan.lineage} from {plan.source.id}"
        elif plan.source is not None:
            score = plan.source.score_mean or 0.0
            origin = f"{plan.lineage} copies {plan.source.id} ({score:.1f}; {changes})"
        elif plan.lineage is not None:
            origin = f"restarts {plan.lineage} fresh"
        self.view.event(f"{pod_id} {spec.algo} started {origin}")
        return record

    def _submit(self, pod: PodRecord, resume: bool) -> None:
        from podium.config import PodSpec

        run_dir = Path(pod.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        spec = PodSpec(**pod.spec)
        # the score a pod's selection must be able to reach to make a difference, as the board, the target and
        # (truncation) its algorithm's members stand now; a resumed pod takes it too
        bar = None
        if spec.select_episodes > 0 and self.config.generator.scheme == "leaderboard":
            bar = selection_bar(self.board.entries(), self.config.leaderboard_size, self.config.target)
        elif spec.select_episodes > 0:
            counts = Counter(member[0].algo for member in members(self.board.pods()).values())
            mix = [algo for algo, weight in self.config.algos.items() if weight > 0]
            bar = member_bar(pod.algo, counts, mix, self.capacity or 0, self.config.target)
        spec = spec.model_copy(update={"select_bar": bar})
        record = {
            "status": PodStatus.RUNNING,
            "started": time.time(),
            "attempts": pod.attempts + 1,
            "spec": spec.model_dump(mode="json"),
        }
        if resume:
            # a preempted pod is recorded as running (with no handle yet) *before* it starts: an orchestrator that
            # dies between the start and the record must leave a row that the next one's reconciliation looks at
            # (running or queued; it adopts the pod from its run directory when the backend can), or the next one
            # resumes the pod a second time beside its still-running process. A new pod's queued row does that.
            self.board.update_pod(pod.id, handle=None, **record)
            record = {}
            self.view.event(f"{pod.id} {pod.algo} resumed from its last checkpoint")  # (once recorded)
        handle = self.backend.submit(PodJob(pod.id, spec, run_dir, resume=resume))
        self._submitted += 1
        self.board.update_pod(pod.id, handle=handle, **record)

    # ----------------------------------------------------------------- results
    def _collect(self, outcome: PodOutcome) -> None:
        if outcome.started is not None:  # it began later than it was submitted: its overhead is from then
            self.board.update_pod(outcome.pod_id, started=outcome.started)
        pod = self.board.pod(outcome.pod_id)
        elapsed = self.elapsed()
        if outcome.report is not None and not all(math.isfinite(x) for x in score_of(outcome.report)[:2]):
            mean, std, _ = score_of(outcome.report)  # a diverged policy or env; no leaderboard can rank it
            error = f"its score is not a finite number ({mean} ± {std}): the policy or the env diverged"
            outcome = PodOutcome(outcome.pod_id, None, error)
        if outcome.report is not None:
            r = outcome.report
            # the result and whether it reached the target land together: an orchestrator killed in between
            # would leave a finished pod that no resume collects again, and a target nobody checked
            tries, time_to_target = self._tries, self._time_to_target
            with self.board.transaction():
                rank = self.updater.offer(pod, r, elapsed, prune=False)
                # judged by the score the leaderboard ranks by, and by the rule that stops a pod: every score at
                # or above the target is a try, and each try asks for a wider margin than the one before
                mean, std, episodes = score_of(r)
                target = self.config.target
                if time_to_target is None and target is not None and mean >= target:
                    tries += 1
                    if reaches(self.rules, mean, std, episodes, tries):
                        time_to_target = elapsed
                    self.board.update_info(time_to_target=time_to_target, target_tries=tries)
            self._tries, self._time_to_target = tries, time_to_target  # as the database has them now
            self.updater.prune()
            self._failures_in_row = 0
            where = f"rank {rank}" if rank is not None else "not on the leaderboard"
            self.view.event(
                f"{pod.id} {pod.algo} finished: {mean:.1f} ± {std:.1f} ({episodes} episodes) "
                f"after {r.steps:,} steps, {r.wall_time:.0f} s -> {where}"
            )
        elif outcome.lost:
            reason = outcome.error or "its machine went away"
            self.updater.lose(pod, reason, elapsed, steps=_curve_steps(pod))
            self.view.event(f"{pod.id} {pod.algo} lost ({reason}); it will resume from its last checkpoint")
        else:
            error = outcome.error or "unknown error"
            self.updater.fail(pod, error, elapsed, steps=_curve_steps(pod))
            self._failures_in_row += 1
            self._last_error = f"{pod.id} ({pod.algo}): {error}"
            self.view.event(f"{pod.id} {pod.algo} FAILED: {error} (log: {PodDir(pod.run_dir).log})")

    def _reconcile(self) -> None:
        """Pick up the pods an earlier orchestrator left behind (it was killed or interrupted)."""
        for pod in self.board.pods(PodStatus.RUNNING, PodStatus.QUEUED):
            # a queued pod may be running too: its orchestrator died after starting it, before recording that;
            # so may a running one with no handle: a preempted pod resumed just before its orchestrator died
            if self.backend.adopt(pod.id, pod.handle, Path(pod.run_dir)):
                if pod.status == PodStatus.QUEUED:
                    self.board.update_pod(
                        pod.id, status=PodStatus.RUNNING, started=time.time(), attempts=pod.attempts + 1
                    )
                self.view.event(f"{pod.id} {pod.algo} still running: adopted")
                continue
            if _in_use(Path(pod.run_dir)):  # alive, but not this backend's to adopt (another backend or host)
                self.view.event(f"{pod.id} {pod.algo} still runs out of this orchestrator's reach: waiting for it")
                self._wait_unlocked(pod)
            run_dir = Path(pod.run_dir)
            if pod.status == PodStatus.QUEUED and (read_report(run_dir) or read_error(run_dir)) is not None:
                # it ran to its end after its orchestrator died before recording that it had started: collected
                # as it ended (marked preempted, it would have been run again or its result lost)
                self.board.update_pod(pod.id, status=PodStatus.RUNNING, attempts=pod.attempts + 1)
                pod = self.board.pod(pod.id)
            if not self._collect_ended(pod):
                self.board.update_pod(pod.id, status=PodStatus.PREEMPTED, handle=None, steps=_curve_steps(pod))
        for pod in self.board.pods(PodStatus.PREEMPTED, PodStatus.FAILED):
            if pod.steps is None:  # recorded by an older podium, which read the curve on every turn instead
                self.board.update_pod(pod.id, steps=_curve_steps(pod))

    def _wait_unlocked(self, pod: PodRecord) -> None:
        """Wait (beating) until a pod that runs out of reach lets its directory go, at most its round's seconds
        and :data:`STOP_GRACE` (then it is preempted and resubmitted, and refused while it still runs)."""
        seconds = pod.spec.get("seconds")  # a round of steps alone: no time bound of its own, allow half an hour
        limit = (float(seconds) if seconds else OUT_OF_REACH_WAIT) + STOP_GRACE
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and _in_use(Path(pod.run_dir)):
            self._beat()
            time.sleep(0.5)

    def _wind_down(self, stop: StopReason, lost: bool = False) -> None:
        """At the end: let running pods hand in their rounds (time/step budget), preempt the rest. A tournament
        another orchestrator took over (``lost``) is left as it is: its pods are the new owner's."""
        try:
            if lost:
                return
            if stop.drains:
                deadline = time.monotonic() + STOP_GRACE
                while self.board.pods(PodStatus.RUNNING) and time.monotonic() < deadline:
                    for outcome in self.backend.poll():
                        self._collect(outcome)
                    self._beat()  # the owner still lives: a second orchestrator must not take over meanwhile
            self.backend.release_idle()  # idle pod processes end while the running pods save and stop
            self._preempt(*self.board.pods(PodStatus.RUNNING))
        except OwnershipLost:
            lost = True
            raise
        finally:
            if lost:
                self.backend.detach()
            else:
                self.backend.shutdown()

    # ----------------------------------------------------------------- the report
    def _report(self, stop: StopReason) -> TournamentReport:
        entries = self.board.entries()
        pods = self.board.pods()
        champion = entries[0] if entries else None
        lineage = [asdict(p) for p in self.board.lineage(champion.pod_id)] if champion else []
        target = self.config.target
        messages = {
            StopReason.TARGET: "a pod's policy reached the target on fresh episodes",
            StopReason.SECONDS: "the time budget is spent",
            StopReason.STEPS: "the step budget is spent",
            StopReason.FAILURES: f"{self.config.max_failures} pods failed in a row; the last: {self._last_error}",
            StopReason.INTERRUPTED: f"interrupted; continue with: podium tournament resume {self.run_dir}",
        }
        message = messages[stop]
        if stop in (StopReason.SECONDS, StopReason.STEPS) and not getattr(self, "_submitted", 1):
            field = "seconds" if stop == StopReason.SECONDS else "steps"
            budget = self.config.seconds if stop == StopReason.SECONDS else self.config.steps
            message += (
                f" (it was spent before this run started: {field}: {budget:g} is a total over the whole "
                f"tournament, not an amount to add; resume with a larger {field} to train on)"
            )
        elif stop == StopReason.TARGET and not getattr(self, "_submitted", 1):
            message += " (the leaderboard already held a score that reaches it)"
        report = TournamentReport(
            run_dir=str(self.run_dir),
            name=self.board.name,
            stop_reason=str(stop),
            elapsed=self.elapsed(),
            reached_target=target is not None and self._time_to_target is not None,
            time_to_target=self._time_to_target,
            champion=champion,
            lineage=lineage,
            entries=entries,
            pods_started=sum(p.status != PodStatus.QUEUED for p in pods),
            pods_failed=sum(p.status == PodStatus.FAILED for p in pods),
            total_steps=sum(_pod_steps(p) for p in pods),
            message=message,
        )
        layout = TournamentDir(self.run_dir)
        layout.report.write_text(json.dumps(report.to_dict(), indent=1, default=str))
        from podium.tournament.plots import plot_champion, plot_progress

        plot_progress(self.board.history(), layout.progress_plot, target)
        plot_champion(lineage, layout.champion_plot, target)
        return report


def _pod_steps(pod: PodRecord) -> int:
    """Env steps a pod took: recorded when it finished, failed or was preempted; else from its curve."""
    if pod.steps is not None and pod.status != PodStatus.RUNNING:
        return int(pod.steps)
    return _curve_steps(pod) or 0


def _in_use(run_dir: Path) -> bool:
    """Whether a pod (of any process, any machine sharing the directory) holds ``run_dir`` now."""
    if not run_dir.is_dir():
        return False
    lock = DirLock(run_dir)
    try:
        lock.acquire()
    except RunDirError:
        return True
    lock.release()
    return False


def _curve_steps(pod: PodRecord) -> int | None:
    """The env steps of a pod's last evaluation (its curve's last row), None before its first."""
    try:
        with PodDir(pod.run_dir).curve.open() as f:
            rows = list(csv.DictReader(f))
    except (FileNotFoundError, csv.Error):
        return None
    whole = [r for r in rows if r.get("eval_mean") not in (None, "")]  # a killed pod may have cut its last row
    try:
        return int(float(whole[-1]["step"])) if whole else None
    except (KeyError, ValueError):
        return None


def _local_path(run_dir: str | Path) -> Path:
    """``run_dir`` as a local path; a URL (``s3://...``) is refused with what to do instead."""
    if "://" in str(run_dir):
        raise ConfigError(
            f"run directory {run_dir}: URLs are not supported yet; give a path that every machine running pods "
            "reaches at the same place (a shared file system such as NFS, or a bucket mounted with a FUSE driver)"
        )
    return Path(run_dir)


def _default_run_dir(config: TournamentConfig) -> Path:
    """``runs/NAME`` for a named config (the YAML file's name), ``runs/NAME-2``, ... when it is taken;
    else ``runs/tournament-ENV-TIMESTAMP``. The run directory is printed when the tournament starts."""
    if config.name is None:
        return Path("runs") / f"tournament-{safe_name(config.env)}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, number = Path("runs") / config.name, 1
    while path.exists():
        number += 1
        path = Path("runs") / f"{config.name}-{number}"
    return path


def _shown(value: Any) -> str:
    """A hyperparameter's value in a log line: numbers to 3 significant digits, a choice as it is."""
    return f"{value:.3g}" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)
