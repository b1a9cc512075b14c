"""Worker: collects transitions from a batched environment into the agent's buffer.

The paper's worker, in two forms:

* :class:`Worker` steps the pod's ``N`` sub-environments in the pod's own process, between learning
  phases (the default, ``workers: 0``). It loops over time only; each step handles all sub-envs at once,
  and episode statistics come from the env's ``info``.
* :class:`WorkerGroup` runs ``W`` rollout-worker processes (``workers: W``), each stepping ``N / W``
  sub-envs of its own env, that collect the *next* rollout while the learner learns on the previous one:
  acting and learning overlap (the paper's pipeline parallelism). It is for envs that cannot be
  tensor-batched, such as gymnasium's MuJoCo or Box2D envs through :class:`~podium.envs.GymVecEnv`, whose
  CPU stepping would otherwise leave the learner idle.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing
import multiprocessing.connection
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from podium.algos.base import Agent
from podium.envs.base import VecEnv
from podium.pod._child import close_quietly, ignore_stop_signals, reap, report_failure

__all__ = ["RolloutStats", "Transition", "Worker", "WorkerError", "WorkerGroup"]


@dataclass
class RolloutStats:
    """What one collection phase saw: env steps taken and the episodes that finished."""

    steps: int = 0
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)


@dataclass
class Transition:
    """One batched env step of ``N`` sub-envs, as the worker saw it (all tensors ``[N, ...]``).

    ``next_obs`` is the post-auto-reset observation, ``final_obs`` the true last observation of the
    sub-envs whose episode ended; ``episode_return``/``episode_length`` are valid where ``finished``."""

    obs: torch.Tensor
    actions: torch.Tensor
    extras: dict[str, torch.Tensor]
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    episode_return: torch.Tensor
    episode_length: torch.Tensor
    finished: torch.Tensor

    def record(self, agent: Agent, buffer: object) -> None:
        """Write this transition into ``buffer`` with ``agent.record``."""
        agent.record(
            buffer,
            self.obs,
            self.actions,
            self.extras,
            self.reward,
            self.next_obs,
            self.terminated,
            self.truncated,
            self.final_obs,
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by a flat name (extras as ``extras.KEY``): the layout of a shared rollout."""
        out = {k: v for k, v in vars(self).items() if k != "extras"}
        out.update({f"extras.{k}": v for k, v in self.extras.items()})
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]) -> Transition:
        """Inverse of :meth:`tensors`."""
        extras = {k[len("extras.") :]: v for k, v in tensors.items() if k.startswith("extras.")}
        return cls(**{k: v for k, v in tensors.items() if not k.startswith("extras.")}, extras=extras)


class Worker:
    """Steps ``env`` with ``agent.explore`` and writes transitions with ``agent.record``.

    Args:
        env: the batched training environment (``agent.num_envs`` sub-envs).
        agent: the agent whose exploration policy acts and whose buffer is filled.
        seed: seed of the first ``env.reset``.
    """

    def __init__(self, env: VecEnv, agent: Agent, seed: int | None = None) -> None:
        if env.num_envs != agent.num_envs:
            raise ValueError(f"env has {env.num_envs} sub-envs but the agent was built for {agent.num_envs}")
        self.env, self.agent = env, agent
        self.obs, _ = env.reset(seed=seed)

    def step(self) -> Transition:
        """One batched step of the exploration policy from ``self.obs`` (which moves on to the next one)."""
        obs = self.obs
        actions, extras = self.agent.explore(obs)
        next_obs, reward, terminated, truncated, info = self.env.step(actions)
        self.obs = next_obs
        return Transition(
            obs,
            actions,
            extras,
            reward,
            next_obs,
            terminated,
            truncated,
            info["final_obs"],
            info["episode_return"],
            info["episode_length"],
            info["_episode_return"],
        )

    def collect(self, buffer: object, steps: int | None = None) -> RolloutStats:
        """Collect ``steps`` (default ``agent.rollout_steps``) batched steps into ``buffer``."""
        steps = self.agent.rollout_steps if steps is None else steps
        returns, lengths, masks = [], [], []
        for _ in range(steps):
            step = self.step()
            step.record(self.agent, buffer)
            returns.append(step.episode_return)
            lengths.append(step.episode_length)
            masks.append(step.finished)
        return _stats(steps * self.env.num_envs, torch.stack(returns), torch.stack(lengths), torch.stack(masks))


def _stats(steps: int, returns: torch.Tensor, lengths: torch.Tensor, finished: torch.Tensor) -> RolloutStats:
    """The finished episodes of a rollout's ``[T, N]`` statistics, selected once per rollout."""
    return RolloutStats(steps, returns[finished].tolist(), lengths[finished].tolist())


# ----------------------------------------------------------------- pipelined rollout workers
WORKER_SEED_STRIDE = 7919
"""Rollout worker ``w`` seeds torch and its agent's generator with ``seed + WORKER_SEED_STRIDE * (w + 1)``
(its env's sub-envs keep the seeds they would have in one process: copy ``i`` of the pod gets ``seed + i``)."""

WorkerParts = Callable[[int, int], tuple[VecEnv, Agent]]
"""``build(rank, num_envs) -> (env, agent)``: what a rollout worker acts with. It runs in the worker's
process; a ``functools.partial`` of a module-level function, so that it also travels to a spawned process."""


class WorkerError(RuntimeError):
    """A rollout-worker process failed or died; the pod stops (its last checkpoint is intact)."""


class WorkerGroup:
    """``workers`` rollout-worker processes that collect the next rollout while the learner learns.

    Worker ``w`` steps sub-envs ``[w*n, (w+1)*n)`` of the pod's ``N = workers * n`` in an env of its own,
    acting with its own copy of the agent, and writes every batched step into a rollout in shared memory.
    :meth:`collect` waits for that rollout, replays it into the learner's buffer (``agent.explored`` and
    ``agent.record``, so normalisers, step counters and reward scaling see every sub-env in order), hands
    the workers the learner's current parameters and returns at once: the workers collect the next rollout
    while the caller learns on this one. The policy that acts is thus one learning phase behind the
    learner's — the usual price of pipelining, which PPO's clipped ratio (against the stored behaviour
    log-probabilities) and off-policy learning both tolerate.

    Workers act on the CPU (their envs simulate there); the learner may be on any device.

    Args:
        agent: the learner's agent (built for all ``N`` sub-envs); its buffer is filled by :meth:`collect`.
        build: makes a worker's env and agent in its process (see :data:`WorkerParts`).
        workers: number of worker processes ``W`` (``agent.num_envs`` must be a multiple of it).
        seed: seed of the first reset; sub-env ``i`` of the pod gets ``seed + i``, as in one process.
        start_method: ``"fork"`` (default; fast, CPU only) or ``"spawn"``.

    Raises:
        ValueError: ``agent.num_envs`` is not a multiple of ``workers``.
        WorkerError: (from :meth:`collect`) a worker failed; its message says which and why.
    """

    def __init__(
        self, agent: Agent, build: WorkerParts, workers: int, seed: int = 0, start_method: str = "fork"
    ) -> None:
        if workers < 1 or agent.num_envs % workers:
            raise ValueError(
                f"{agent.num_envs} sub-envs cannot be split evenly over {workers} rollout workers; "
                f"make num_envs a multiple of workers"
            )
        self.agent, self.workers = agent, workers
        self.steps = agent.rollout_steps  # T, for all workers: the learner's rollout length
        n = agent.num_envs // workers
        self.obs = torch.empty(0)  # [N, obs_dim] last observation of the rollout :meth:`collect` returned
        self.rollout = self._allocate(agent, self.steps)
        # shaped like Agent.state_dict()'s modules, so that a worker loads it with Agent.load_modules
        self.params = {
            f"module.{name}": {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in m.state_dict().items()}
            for name, m in agent.modules().items()
        }
        context = multiprocessing.get_context(start_method)
        self.stopping = context.Event()  # set by close: a worker abandons its rollout at the next step
        self.started = False  # whether the workers were ever set collecting (for what a death is named by)
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        try:  # a start that fails half-way must not leave the workers already started running
            for rank in range(workers):
                parent, child = context.Pipe()
                # the worker closes its copies of the learner's ends, so that it reads EOF once the learner is gone
                ends = [*self.conns, parent]
                args = (rank, build, n, self.steps, seed, self.rollout, self.params, self.stopping, child, ends)
                proc = context.Process(target=_serve, args=args, name=f"podium-worker-{rank}", daemon=True)
                self.conns.append(parent)
                proc.start()
                child.close()
                self.processes.append(proc)
            self._start_next()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _allocate(agent: Agent, steps: int) -> dict[str, torch.Tensor]:
        """The shared rollout ``{name: [T, N, ...]}`` (plus ``last_obs [N, obs_dim]``), shaped by one
        exploration step of a throwaway copy of ``agent`` (whose extras depend on the algorithm)."""
        probe = copy.deepcopy(agent)
        obs = torch.zeros(agent.num_envs, agent.obs_dim, device=agent.device)
        actions, extras = probe.explore(obs)
        flags = torch.zeros(agent.num_envs, dtype=torch.bool)
        one = Transition(
            obs, actions, extras, flags.float(), obs, flags, flags, obs, flags.float(), flags.long(), flags
        )
        rollout = {k: torch.zeros((steps, *v.shape), dtype=v.dtype).share_memory_() for k, v in one.tensors().items()}
        rollout["last_obs"] = torch.zeros(agent.num_envs, agent.obs_dim).share_memory_()
        return rollout

    def _start_next(self) -> None:
        """Publish the learner's parameters and set every worker collecting the next rollout."""
        for name, module in self.agent.modules().items():
            shared = self.params[f"module.{name}"]
            for k, v in module.state_dict().items():
                shared[k].copy_(v)
        extra = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in self.agent.extra_state().items()}
        for rank, conn in enumerate(self.conns):
            try:
                conn.send(extra)
            except (BrokenPipeError, OSError):  # it died before its first rollout (its build failed) or after one
                said = self._last_words(conn)
                if said is not None:
                    raise WorkerError(f"rollout worker {rank} failed: {said}") from None
                raise WorkerError(self._death(rank, "between rollouts" if self.started else "while starting")) from None
        self.started = True

    def _wait(self) -> None:
        pending = dict(enumerate(self.conns))
        while pending:
            ready = multiprocessing.connection.wait(list(pending.values()), timeout=1.0)
            for rank, conn in list(pending.items()):
                if conn not in ready:
                    continue
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    raise WorkerError(self._death(rank)) from None
                if message != "ready":
                    raise WorkerError(f"rollout worker {rank} failed: {message}")
                del pending[rank]
            dead = [rank for rank in pending if not ready and not self.processes[rank].is_alive()]
            if dead:
                raise WorkerError(self._death(dead[0]))

    @staticmethod
    def _last_words(conn: Any) -> str | None:
        """What a worker that died sent before it went (its failure, as ``report_failure`` words it), if any."""
        try:
            if conn.poll(1.0):
                message = conn.recv()
                return message if isinstance(message, str) and message != "ready" else None
        except (EOFError, OSError):
            pass
        return None

    def _death(self, rank: int, when: str = "before finishing its rollout") -> str:
        proc = self.processes[rank]
        proc.join(timeout=1.0)
        return f"rollout worker {rank} died (exit code {proc.exitcode}) {when}"

    def collect(self, buffer: object) -> RolloutStats:
        """Take the rollout the workers finished into ``buffer``, start them on the next one, and return.

        ``self.obs`` is then the observation each sub-env is in (the learner's bootstrap value needs it)."""
        self._wait()
        agent, device = self.agent, self.agent.device
        data = {k: v.to(device) for k, v in self.rollout.items()}  # one host-to-device copy per rollout
        self.obs = data.pop("last_obs").clone()  # (a copy: the workers overwrite the shared one)
        for t in range(self.steps):
            step = Transition.from_tensors({k: v[t] for k, v in data.items()})
            agent.explored(step.obs)
            step.record(agent, buffer)
        stats = _stats(self.steps * agent.num_envs, data["episode_return"], data["episode_length"], data["finished"])
        self._start_next()  # the workers overwrite the shared rollout from here on: nothing above refers to it
        return stats

    def close(self) -> None:
        """Stop the workers (the rollout in flight is abandoned: nothing has counted it) and reap them."""
        self.stopping.set()
        for conn in self.conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(None)
        reap(self.processes, self.conns)


def _serve(
    rank: int,
    build: WorkerParts,
    num_envs: int,
    steps: int,
    seed: int,
    rollout: dict[str, torch.Tensor],
    params: dict[str, dict[str, torch.Tensor]],
    stopping: Any,
    conn: Any,
    learner_ends: Sequence[Any] = (),
) -> None:
    """Rollout worker ``rank``: on each message load the parameters, collect ``steps`` steps into its
    columns of the shared rollout, say "ready"; until told to stop (``None``) or the pod is gone."""
    for end in learner_ends:  # forked copies of the learner's ends: with them open, no EOF would ever come
        end.close()
    ignore_stop_signals()  # the pod decides when its workers stop
    code, env = 0, None
    lo, hi = rank * num_envs, (rank + 1) * num_envs
    try:
        torch.set_num_threads(1)  # a forked copy must not enter the parent's OpenMP pool (it would hang)
        torch.manual_seed(seed + WORKER_SEED_STRIDE * (rank + 1))
        env, agent = build(rank, num_envs)
        worker = Worker(env, agent, seed=seed + lo)
        total = rollout["last_obs"].shape[0]  # the pod's sub-envs, all workers together
        while (extra := conn.recv()) is not None:
            agent.load_modules(params)
            agent.load_extra_state(extra)
            counted = getattr(agent, "env_steps", None)  # off-policy: the pod's env steps (warm-up, epsilon)
            for t in range(steps):
                if stopping.is_set():
                    break
                if counted is not None:  # the workers step together: the pod has taken t steps of every sub-env
                    agent.env_steps = counted + t * total  # type: ignore[attr-defined]
                step = worker.step()
                agent.episodes_ended(step.terminated | step.truncated)
                for k, v in step.tensors().items():
                    rollout[k][t, lo:hi] = v
            if stopping.is_set():
                break
            rollout["last_obs"][lo:hi] = worker.obs
            conn.send("ready")
    except EOFError:
        pass  # the pod is gone
    except BaseException as exc:
        code = 1
        report_failure(conn, exc)
    finally:
        close_quietly(conn, env)
    os._exit(code)  # skip the pod's exit handlers, which a forked worker inherited
