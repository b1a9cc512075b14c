"""Evaluator: scores policy snapshots by the mean and std of N episodic returns, beside training.

Two layers:

* :class:`Evaluator` runs ``env.num_envs`` episodes in parallel with an agent's (deterministic by
  default) policy, each sub-env until its first episode ends, and returns an :class:`EvalResult`.
* :class:`EvaluatorService` is the paper's evaluator *service*: the pod hands it a
  :class:`Snapshot` of the agent's state and goes on training; the service scores the snapshot in a
  background thread with its own copy of the agent and its own envs, and the pod collects
  :class:`Scored` results when it next looks. A snapshot whose score reaches the pod's target is
  **confirmed** at once on ``confirm_episodes`` fresh episodes (seeds that neither training nor the
  routine evaluations use); only a confirmed score stops a pod at its target. ``threaded=False``
  runs the same service inline (the evaluation blocks training), which is what a single core favours.

Seeds: routine evaluation ``k`` resets with ``seed + k`` (sub-env ``i`` of a gymnasium env gets
``seed + k + i``); confirmation ``j`` with ``confirm_seed + j * episodes``. The pod chooses
``seed`` and ``confirm_seed`` far from its training seeds (see :mod:`podium.pod.pod`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from podium.algos.base import Agent
from podium.envs.base import VecEnv

__all__ = ["EvalResult", "EvaluationError", "Evaluator", "EvaluatorService", "Scored", "Snapshot"]


class EvaluationError(RuntimeError):
    """The evaluator failed (its env or the policy raised); the pod stops with this error."""


@dataclass(frozen=True)
class EvalResult:
    """Scores of one evaluation: ``mean`` and ``std`` of ``episodes`` returns, ``seconds`` of wall time."""

    mean: float
    std: float
    episodes: int
    seconds: float
    returns: tuple[float, ...]


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
        self.max_steps = max_steps or env.max_episode_steps or 10_000
        self.seed = seed
        self.best: EvalResult | None = None
        self.evaluations = 0

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
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs, deterministic=self.deterministic))
            returns += reward.double() * ~finished  # a sub-env's later episodes do not count
            finished |= terminated | truncated
            if t % check_every == 0 and bool(finished.all()):
                break
        values = returns.double()
        std = float(values.std(unbiased=False)) if values.numel() > 1 else 0.0
        result = EvalResult(
            float(values.mean()), std, env.num_envs, time.perf_counter() - start, tuple(values.tolist())
        )
        if math.isnan(result.mean):
            raise FloatingPointError("evaluation returned NaN scores; the policy produces invalid actions")
        if self.best is None or (result.mean, -result.std) > (self.best.mean, -self.best.std):
            self.best = result
        return result


@dataclass
class Snapshot:
    """A copy of an agent's whole state (``Agent.state_dict``, tensors cloned) at ``steps`` env steps and
    ``wall_time`` seconds of training; ``extra`` is the pod's bookkeeping, returned untouched."""

    state: dict[str, Any]
    steps: int
    wall_time: float
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, agent: Agent, steps: int, wall_time: float, **extra: Any) -> Snapshot:
        return cls(_clone(agent.state_dict()), steps, wall_time, extra)


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

    @property
    def confirmed(self) -> bool:
        """Whether a confirmation ran (not whether it passed: compare :attr:`score` with the target)."""
        return self.confirmation is not None


class EvaluatorService:
    """Scores snapshots beside training (see the module docstring).

    Args:
        agent: the evaluator's own agent (same algorithm and configuration as the trained one); each
            snapshot's networks are loaded into it.
        evaluator: routine evaluations.
        confirmer: confirmations (more episodes, other seeds); None: never confirm.
        target: a routine mean at or above this is confirmed; None: no confirmation.
        confirm_seed: first seed of the confirmations.
        threaded: score in a background thread (True) or inline in :meth:`submit` (False).
    """

    def __init__(
        self,
        agent: Agent,
        evaluator: Evaluator,
        confirmer: Evaluator | None = None,
        target: float | None = None,
        confirm_seed: int = 0,
        threaded: bool = True,
    ) -> None:
        self.agent, self.evaluator, self.confirmer = agent, evaluator, confirmer
        self.target, self.confirm_seed = target, confirm_seed
        self.confirmations = 0
        self.seconds = 0.0  # time spent scoring, all snapshots together
        self.threaded = threaded
        self._lock = threading.Condition()
        self._pending: Snapshot | None = None
        self._working = False
        self._results: list[Scored] = []
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._serve, name="podium-evaluator", daemon=True)
            self._thread.start()

    # ----------------------------------------------------------------- the pod's side
    @property
    def busy(self) -> bool:
        """Whether a snapshot is being scored or waiting to be."""
        with self._lock:
            return self._working or self._pending is not None

    def submit(self, snapshot: Snapshot) -> None:
        """Score ``snapshot``. Threaded: returns at once, and a snapshot still waiting is replaced by this
        newer one (the evaluator never falls behind training). Inline: scores it before returning."""
        self._raise_error()
        if not self.threaded:
            self._results.append(self._score(snapshot))
            return
        with self._lock:
            self._pending = snapshot
            self._lock.notify_all()

    def results(self) -> list[Scored]:
        """The snapshots scored since the last call, oldest first (never blocks).

        Raises:
            EvaluationError: the evaluator failed.
        """
        self._raise_error()
        with self._lock:
            out, self._results = self._results, []
        return out

    def wait(self, timeout: float | None = None) -> list[Scored]:
        """Block until every submitted snapshot is scored (or ``timeout`` seconds); return the results."""
        with self._lock:
            self._lock.wait_for(lambda: not (self._working or self._pending) or self._error is not None, timeout)
        return self.results()

    def close(self) -> None:
        """Stop the service; a snapshot being scored finishes first, a waiting one is dropped."""
        with self._lock:
            self._closed = True
            self._pending = None
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> EvaluatorService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- the service's side
    def _serve(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._pending is not None or self._closed)
                if self._closed:
                    return
                snapshot, self._pending, self._working = self._pending, None, True
            try:
                scored = self._score(snapshot)
            except BaseException as exc:  # handed to the pod's thread, which stops the pod
                with self._lock:
                    self._error, self._working = exc, False
                    self._lock.notify_all()
                return
            with self._lock:
                self._results.append(scored)
                self._working = False
                self._lock.notify_all()

    def _score(self, snapshot: Snapshot) -> Scored:
        start = time.perf_counter()
        self.agent.load_modules(snapshot.state)
        result = self.evaluator.evaluate(self.agent)
        confirmation = None
        if self.confirmer is not None and self.target is not None and result.mean >= self.target:
            seed = self.confirm_seed + self.confirmations * self.confirmer.env.num_envs
            self.confirmations += 1
            confirmation = self.confirmer.evaluate(self.agent, seed=seed)
        seconds = time.perf_counter() - start
        self.seconds += seconds
        return Scored(snapshot, result, confirmation, seconds)

    def _raise_error(self) -> None:
        if self._error is not None:
            exc = self._error
            raise EvaluationError(f"the evaluator failed: {type(exc).__name__}: {exc}") from exc


def _clone(state: Any) -> Any:
    """A deep copy of nested dicts/lists of tensors (tensors cloned, detached), numbers and strings."""
    if torch.is_tensor(state):
        return state.detach().clone()
    if isinstance(state, dict):
        return {k: _clone(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(_clone(v) for v in state)
    return state
