"""Evaluator: scores policy snapshots by the mean and std of N episodic returns, beside training.

Two layers:

* :class:`Evaluator` runs ``env.num_envs`` episodes in parallel with an agent's (deterministic by
  default) policy, each sub-env until its first episode ends, and returns an :class:`EvalResult`. It
  steps only the sub-envs whose episode goes on (:meth:`~podium.envs.base.VecEnv.step_active`): through
  gymnasium's adapter, N episodes cost the sum of their lengths, not N times the longest.
* :class:`EvaluatorService` is the paper's evaluator *service*: the pod hands it a
  :class:`Snapshot` of the agent's state and goes on training; the service scores the snapshot with
  its own copy of the agent and its own envs, and the pod collects :class:`Scored` results when it
  next looks. A snapshot whose score reaches the pod's target is **confirmed** at once on
  ``confirm_episodes`` fresh episodes (seeds that neither training nor the routine evaluations use);
  only a confirmed score stops a pod at its target, and a confirmation passes only with a margin
  (:func:`confirms`).

Where the service runs (``mode``):

* ``process`` — a child process forked from the pod, on another core: evaluation leaves training's
  critical path entirely. The default for a CPU pod that has two or more cores.
* ``thread`` — a background thread. Training and evaluation share Python's interpreter lock, so on a
  CPU with small networks the two slow each other down (measured: BENCHMARKS.md); it suits GPU pods,
  whose work runs outside the lock.
* ``inline`` — training waits while a snapshot is scored: the cheapest choice on a single core, and
  reproducible to the step.

Seeds: a routine evaluation resets with the seed its snapshot carries (sub-env ``i`` of a gymnasium env
gets ``seed + i``); confirmation ``j`` with ``confirm_seed + j * episodes``. The pod chooses them far
from its training seeds (see :mod:`podium.pod.pod`).
"""

from __future__ import annotations

import contextlib
import io
import math
import multiprocessing
import os
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import torch

from podium.algos.base import Agent
from podium.envs.base import VecEnv
from podium.pod._child import ignore_stop_signals

__all__ = [
    "EvalMode",
    "EvalResult",
    "EvaluationCutWarning",
    "EvaluationError",
    "Evaluator",
    "EvaluatorService",
    "Scored",
    "Snapshot",
    "clone_tensors",
    "confirms",
    "lower_bound",
    "margin_for",
]

EvalMode = Literal["process", "thread", "inline"]

ACTION_SEED_OFFSET = 2**31
"""A stochastic policy's draws in an evaluation reset with ``seed + ACTION_SEED_OFFSET``, where the env resets
with ``seed``: a tensor env draws its initial states from a generator seeded ``seed``, and a policy seeded
alike drew the very same numbers as its first sampling noise (its actions were a function of the initial
states). Every reset seed of a pod lies below 2**31 (pod.py's offsets end near 10**9); and the offset must
stay below 2**32, since torch's CPU generator (a Mersenne Twister) keeps a seed's low 32 bits only."""


class EvaluationError(RuntimeError):
    """The evaluator failed (its env or the policy raised); the pod stops with this error."""


class EvaluationCutWarning(UserWarning):
    """Evaluation episodes of an env without a time limit ran into the evaluator's step cap (10,000 steps
    unless told) and were scored by their partial return. Warned once per evaluator."""


class _Abandoned(Exception):
    """An evaluation given up because its service closed (the pod no longer needs it)."""


@dataclass(frozen=True)
class EvalResult:
    """Scores of one evaluation: ``mean`` and ``std`` of ``episodes`` returns, ``seconds`` of wall time."""

    mean: float
    std: float
    episodes: int
    seconds: float
    returns: tuple[float, ...]

    @classmethod
    def of(cls, returns: list[float], seconds: float) -> EvalResult:
        """The result of episodes with these ``returns`` (the population std: all of them were scored)."""
        values = torch.tensor(returns, dtype=torch.float64)
        std = float(values.std(unbiased=False)) if values.numel() > 1 else 0.0
        return cls(float(values.mean()), std, values.numel(), seconds, tuple(values.tolist()))


def lower_bound(mean: float, std: float, episodes: int, margin: float) -> float:
    """``mean`` minus ``margin`` standard errors of it (``std / sqrt(episodes)``): the score a target is
    compared with, by a pod's confirmation (:func:`confirms`) and by a tournament's stop alike."""
    return mean - margin * std / max(episodes, 1) ** 0.5


def margin_for(margin: float, attempt: int) -> float:
    """The margin of a run's ``attempt``-th try (1-based) at a target, given the first try's ``margin``.

    A run tries every policy that looks good enough, so a policy whose true mean sits at the target can
    get dozens of tries, and a fixed margin lets one of them pass by luck sooner or later (a winner's curse
    on the confirmation itself: on MountainCar-v0, PPO policies that hovered near -110 for 300k steps
    confirmed it and then re-scored -110.2 to -110.4 on other fresh episodes). So the ``k``-th try asks for
    the normal quantile whose one-sided tail is the first try's tail divided by ``k**2``: whatever the
    number of tries, a policy exactly at the target passes one of them with probability at most
    ``pi**2 / 6`` times that of a single try (3.7% for the default margin 2, whose single try passes 2.3%).
    The margins for tries 1, 2, 5, 10, 30, 100 are 2, 2.53, 3.12, 3.51, 4.05, 4.58.
    """
    if margin <= 0 or attempt <= 1:
        return margin
    normal = NormalDist()
    tail = normal.cdf(-margin) / attempt**2
    return max(margin, -normal.inv_cdf(tail)) if tail > 0 else margin  # a margin of 40 or so: beyond floats


def confirms(result: EvalResult, target: float, margin: float, attempt: int = 1) -> bool:
    """Whether a confirmation ``result`` establishes ``target``: its mean minus ``margin_for(margin,
    attempt)`` standard errors (``std / sqrt(episodes)``) is at or above it.

    With a margin of 2 (the pod's default, ``confirm_margin``) a policy whose true mean is exactly the target
    passes a first try with probability about 2%, one whose mean is 2 standard errors above it half the
    time, and one 3 above it 84% of the time; later tries ask for more (:func:`margin_for`).
    """
    return lower_bound(result.mean, result.std, result.episodes, margin_for(margin, attempt)) >= target


DEFAULT_MAX_STEPS = 10_000
"""The evaluator's cap on the steps of one evaluation when the env has no time limit of its own."""


class Evaluator:
    """Runs ``env.num_envs`` evaluation episodes in parallel.

    Args:
        env: evaluation env; its ``num_envs`` is the number of episodes per evaluation.
        deterministic: use the deterministic policy (``agent.act(obs, deterministic=True)``).
        max_steps: safety cap on steps per evaluation (default: the env's time limit, else 10,000).
        seed: evaluations use seeds ``seed, seed + 1, ...`` so they are reproducible.
    """

    def __init__(self, env: VecEnv, deterministic: bool = True, max_steps: int | None = None, seed: int = 0) -> None:
        self.env, self.deterministic = env, deterministic
        self.max_steps = max_steps or env.max_episode_steps or DEFAULT_MAX_STEPS
        self._warn_cut = max_steps is None and env.max_episode_steps is None  # the cap the user never chose
        self.seed = seed
        self.best: EvalResult | None = None
        self.evaluations = 0
        self.abandon: Callable[[], bool] | None = None
        """If set, checked between steps: True gives the evaluation up (the service that runs it closed)."""

    @torch.inference_mode()  # nothing here enters autograd: skip its per-op bookkeeping
    def evaluate(self, agent: Agent, seed: int | None = None) -> EvalResult:
        """Score ``agent``'s policy; ``seed`` overrides the next routine seed (and does not advance it)."""
        start = time.perf_counter()
        env = self.env
        if seed is None:
            seed = self.seed + self.evaluations
            self.evaluations += 1
        obs, _ = env.reset(seed=seed)
        returns = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
        finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        check_every = 1 if env.device.type == "cpu" else 16  # a host sync per check on accelerators
        for t in range(self.max_steps):  # episodes longer than the cap count with their partial return
            # only the sub-envs whose episode goes on need to step (GymVecEnv then skips the others)
            running = ~finished
            actions = agent.act(obs, deterministic=self.deterministic)
            obs, reward, terminated, truncated, _ = env.step_active(actions, running)
            returns += reward.double() * running  # a sub-env's later episodes do not count
            finished |= terminated | truncated
            if t % check_every == 0 and bool(finished.all()):
                break
            if self.abandon is not None and self.abandon():
                raise _Abandoned
        if self._warn_cut and not bool(finished.all()):
            self._warn_cut = False
            warnings.warn(
                f"{int((~finished).sum())} of {env.num_envs} evaluation episodes were still running after "
                f"{self.max_steps:,} steps and count with their partial return: the env has no time limit. Give it "
                "one: max_episode_steps in the pod's env_kwargs, or where the env is registered with gymnasium",
                EvaluationCutWarning,
                stacklevel=2,
            )
        result = EvalResult.of(returns.tolist(), time.perf_counter() - start)
        if math.isnan(result.mean):
            raise FloatingPointError("evaluation returned NaN scores; the policy produces invalid actions")
        if self.best is None or (result.mean, -result.std) > (self.best.mean, -self.best.std):
            self.best = result
        return result


@dataclass
class Snapshot:
    """A copy of an agent's whole state (``Agent.state_dict``, tensors cloned) at ``steps`` env steps and
    ``wall_time`` seconds of training, to be scored with evaluation seed ``seed``; ``extra`` is the pod's
    bookkeeping, returned untouched."""

    state: dict[str, Any]
    steps: int
    wall_time: float
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, agent: Agent, steps: int, wall_time: float, seed: int = 0, **extra: Any) -> Snapshot:
        return cls(clone_tensors(agent.state_dict()), steps, wall_time, seed, extra)

    def modules(self) -> dict[str, Any]:
        """The part of :attr:`state` that acting needs (networks and normalisers, not optimisers)."""
        return {k: v for k, v in self.state.items() if k.startswith("module.")}


@dataclass(frozen=True)
class Scored:
    """A scored snapshot: its routine ``result`` and, when that reached the target, its ``confirmation``."""

    snapshot: Snapshot
    result: EvalResult
    confirmation: EvalResult | None = None
    seconds: float = 0.0
    """Wall-clock seconds the evaluator spent on this snapshot (loading, scoring, confirming)."""

    @property
    def score(self) -> float:
        """The most trustworthy mean: the confirmation's when there is one."""
        return self.confirmation.mean if self.confirmation is not None else self.result.mean


class _Scorer:
    """What scores snapshots wherever the service runs: the evaluator's agent, its envs, the confirmation rule.

    ``build()`` returns ``(agent, routine evaluator, confirmer or None)``; it runs where the scoring runs
    (in the child process for ``process`` mode), so the envs belong to that process.
    """

    def __init__(
        self, build: Callable[[], tuple[Agent, Evaluator, Evaluator | None]], target: float | None, confirm_seed: int
    ) -> None:
        self.agent, self.evaluator, self.confirmer = build()
        self.target, self.confirm_seed = target, confirm_seed
        self.confirmations = 0

    def close(self) -> None:
        """Close the envs it scores on (a gymnasium env may hold subprocesses)."""
        for evaluator in (self.evaluator, self.confirmer):
            if evaluator is not None:
                with contextlib.suppress(Exception):
                    evaluator.env.close()

    def _seed_actions(self, seed: int) -> None:
        generator = getattr(self.agent, "generator", None)
        if isinstance(generator, torch.Generator):
            generator.manual_seed(seed + ACTION_SEED_OFFSET)

    def score(self, modules: dict[str, Any], seed: int) -> tuple[EvalResult, EvalResult | None, float]:
        start = time.perf_counter()
        self.agent.load_modules(modules)
        self._seed_actions(seed)  # a stochastic policy's draws depend on the seed only, not on earlier scores
        result = self.evaluator.evaluate(self.agent, seed=seed)
        confirmation = None
        if self.confirmer is not None and self.target is not None and result.mean >= self.target:
            confirm_seed = self.confirm_seed + self.confirmations * self.confirmer.env.num_envs
            self.confirmations += 1
            self._seed_actions(confirm_seed)
            confirmation = self.confirmer.evaluate(self.agent, seed=confirm_seed)
        return result, confirmation, time.perf_counter() - start


class EvaluatorService:
    """Scores snapshots beside training (see the module docstring).

    Args:
        build: returns ``(agent, evaluator, confirmer)``: the evaluator's own agent (same algorithm and
            configuration as the trained one; each snapshot's networks are loaded into it), the routine
            evaluator and the confirmer (more episodes, other seeds; None: never confirm). It is called
            where the scoring runs.
        target: a routine mean at or above this is confirmed; None: no confirmation.
        confirm_seed: first seed of the confirmations.
        mode: ``process``, ``thread`` or ``inline`` (see the module docstring). ``process`` forks this
            process, so it needs a CPU pod (CUDA does not survive a fork) and a platform with fork.
    """

    def __init__(
        self,
        build: Callable[[], tuple[Agent, Evaluator, Evaluator | None]],
        target: float | None = None,
        confirm_seed: int = 0,
        mode: EvalMode = "thread",
    ) -> None:
        self.mode = mode
        self.seconds = 0.0  # time spent scoring, all snapshots together
        self._pending: Snapshot | None = None  # waiting for the scorer (the newest replaces an older one)
        self._working: Snapshot | None = None  # being scored
        self._results: list[Scored] = []
        self._error: str | None = None
        self._closed = False
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._process: Any = None
        self._scorer: _Scorer | None = None
        if mode == "inline":
            self._scorer = _Scorer(build, target, confirm_seed)
        elif mode == "thread":
            self._thread = threading.Thread(
                target=self._serve, args=(build, target, confirm_seed), name="podium-evaluator", daemon=True
            )
            self._thread.start()
        elif mode == "process":
            context = multiprocessing.get_context("fork")
            self._conn, child = context.Pipe()
            self._process = context.Process(
                target=_evaluator_process,
                args=(child, self._conn, build, target, confirm_seed),
                name="podium-evaluator",
                daemon=True,
            )
            self._process.start()
            child.close()
        else:
            raise ValueError(f"eval mode must be 'process', 'thread' or 'inline', got {mode!r}")

    # ----------------------------------------------------------------- the pod's side
    @property
    def busy(self) -> bool:
        """Whether a snapshot is being scored or waiting to be."""
        if self.mode == "process":
            self._pump()
        with self._lock:
            return self._working is not None or self._pending is not None

    def submit(self, snapshot: Snapshot) -> None:
        """Score ``snapshot``. ``process``/``thread``: returns at once, and a snapshot still waiting is
        replaced by this newer one (the evaluator never falls behind training). ``inline``: scores it
        before returning."""
        self._raise_error()
        if self._scorer is not None:  # inline
            try:
                result, confirmation, seconds = self._scorer.score(snapshot.modules(), snapshot.seed)
            except Exception as exc:
                raise EvaluationError(f"the evaluator failed: {type(exc).__name__}: {exc}") from exc
            self.seconds += seconds
            self._results.append(Scored(snapshot, result, confirmation, seconds))
            return
        with self._lock:
            self._pending = snapshot
            self._lock.notify_all()
        if self.mode == "process":
            self._pump()

    def waiting(self) -> list[Scored]:
        """The snapshots scored since the last :meth:`results`, oldest first, left for it (never blocks). An
        evaluator that failed has none waiting: :meth:`results` raises its error."""
        if self.mode == "process":
            self._pump()
        with self._lock:
            return [] if self._error is not None else list(self._results)

    def results(self) -> list[Scored]:
        """The snapshots scored since the last call, oldest first (never blocks).

        Raises:
            EvaluationError: the evaluator failed.
        """
        if self.mode == "process":
            self._pump()
        self._raise_error()
        with self._lock:
            out, self._results = self._results, []
        return out

    def wait(self, timeout: float | None = None) -> list[Scored]:
        """Block until every submitted snapshot is scored (or ``timeout`` seconds); return the results."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.mode == "process":
            while (self._working is not None or self._pending is not None) and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._pump(wait=0.05 if left is None else min(0.05, left))
        else:
            with self._lock:
                self._lock.wait_for(
                    lambda: (self._working is None and self._pending is None) or self._error is not None, timeout
                )
        return self.results()

    def close(self) -> None:
        """Stop the service at once; a snapshot being scored is dropped (a pod that stops does not wait for
        an evaluation it no longer needs: the thread gives it up at its next env step, the process is ended)."""
        with self._lock:
            self._closed = True
            self._pending = None
            self._lock.notify_all()
            working = self._working is not None
        if self._thread is not None:  # one scoring gives up at its next env step; one stuck elsewhere is left
            self._thread.join(timeout=0.5 if working else None)
        if self._scorer is not None:
            self._scorer.close()
        if self._process is not None:
            if self._working is not None:
                self._process.kill()
            else:
                with contextlib.suppress(BrokenPipeError, OSError):
                    self._conn.send_bytes(b"")  # stop
                self._process.join(timeout=5.0)
                if self._process.is_alive():
                    self._process.kill()
            self._process.join()
            self._conn.close()
            self._process = None

    def __enter__(self) -> EvaluatorService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- thread mode
    def _serve(self, build: Callable, target: float | None, confirm_seed: int) -> None:
        try:
            scorer = _Scorer(build, target, confirm_seed)
        except BaseException as exc:
            self._fail(exc)
            return
        for evaluator in (scorer.evaluator, scorer.confirmer):
            if evaluator is not None:
                evaluator.abandon = lambda: self._closed
        try:
            self._score_until_closed(scorer)
        finally:
            scorer.close()

    def _score_until_closed(self, scorer: _Scorer) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._pending is not None or self._closed)
                if self._closed:
                    return
                snapshot, self._pending = self._pending, None
                self._working = snapshot
            try:
                result, confirmation, seconds = scorer.score(snapshot.modules(), snapshot.seed)
            except _Abandoned:
                return
            except BaseException as exc:  # handed to the pod's thread, which stops the pod
                self._fail(exc)
                return
            with self._lock:
                self.seconds += seconds
                self._results.append(Scored(snapshot, result, confirmation, seconds))
                self._working = None
                self._lock.notify_all()

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._error = f"{type(exc).__name__}: {exc}"
            self._working = None
            self._lock.notify_all()

    # ----------------------------------------------------------------- process mode
    def _pump(self, wait: float = 0.0) -> None:
        """Collect what the child process finished and hand it the pending snapshot when it is free."""
        if self._process is None or self._error is not None:
            return
        try:
            while self._conn.poll(wait):
                wait = 0.0
                message = self._conn.recv()
                if message[0] == "error":
                    self._error = message[1]
                    self._working = None
                    return
                _, result, confirmation, seconds = message
                self.seconds += seconds
                self._results.append(Scored(self._working, result, confirmation, seconds))
                self._working = None
            if self._working is None and self._pending is not None:
                snapshot, self._pending = self._pending, None
                self._conn.send_bytes(_to_bytes((snapshot.modules(), snapshot.seed)))
                self._working = snapshot
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self._process.join(timeout=5.0)
            code = self._process.exitcode
            self._error = self._last_words() or f"the evaluator process ended unexpectedly (exit code {code})"
            self._working = None

    def _last_words(self) -> str | None:
        """The error a child that ended sent before it went, if it is still in the pipe: a send to the child
        can fail on the closed pipe before the pod has read why the child stopped."""
        with contextlib.suppress(EOFError, OSError):
            while self._conn.poll(0):
                message = self._conn.recv()
                if message[0] == "error":
                    return message[1]
        return None

    def _raise_error(self) -> None:
        if self._error is not None:
            raise EvaluationError(f"the evaluator failed: {self._error}")


def _evaluator_process(conn: Any, parent_end: Any, build: Callable, target: float | None, confirm_seed: int) -> None:
    """The child process of ``process`` mode: score what arrives until told to stop or the pod is gone."""
    parent_end.close()  # so that the pod's death closes the pipe and ends this loop
    ignore_stop_signals()  # the pod decides when its evaluator stops
    torch.set_num_threads(1)  # a forked copy must not enter the parent's OpenMP pool (it would hang)
    code = 0
    try:
        scorer = _Scorer(build, target, confirm_seed)
        while True:
            message = conn.recv_bytes()
            if not message:
                break
            modules, seed = torch.load(io.BytesIO(message), weights_only=True)
            conn.send(("scored", *scorer.score(modules, seed)))
    except EOFError:
        pass
    except BaseException as exc:
        code = 1
        traceback.print_exc()  # the whole story goes to the pod's log; the pod gets one line
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
    os._exit(code)  # skip the pod's exit handlers, which this forked copy inherited


def _to_bytes(obj: Any) -> bytes:
    """Tensors as plain bytes for the pipe (``torch.save``): multiprocessing's own pickling of tensors would
    move them through shared-memory file descriptors, a server thread and a socket per message."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def clone_tensors(state: Any) -> Any:
    """A deep copy of nested dicts/lists of tensors (tensors cloned, detached), numbers and strings."""
    if torch.is_tensor(state):
        return state.detach().clone()
    if isinstance(state, dict):
        return {k: clone_tensors(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(clone_tensors(v) for v in state)
    return state
