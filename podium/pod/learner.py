"""Learner: updates the agent's networks from collected data; several learners fuse by averaging.

The paper's learner runs the algorithm's learning phase (``agent.learn``). With several learners, each
trained on its own workers' data, their *parameters* are fused at the end of a learning phase by
element-wise averaging — networks and optimiser moments — not by all-reducing gradients at every step.
Normaliser statistics are pooled instead: after a fusion every learner holds the mean and variance of all
the learners' data (:meth:`~podium.algos.normalization.RunningMeanStd.to_fusable`).

* :func:`average_agents` fuses agents that live in one process (tests, tools).
* :class:`FusionGroup` fuses the agents of K learner *processes* with one ``torch.distributed``
  all-reduce per dtype (gloo; it also carries CUDA tensors, so learners may share a GPU). A pod with
  ``learners: K`` runs learner 0 itself and starts learners 1..K-1; see :mod:`podium.pod.pod`.

What is fused: every floating-point tensor in the agent's modules (parameters and buffers, e.g. PPO's
``log_std`` and observation statistics, the latter as pooled moments) and every floating-point optimiser
state tensor with a shape
(Adam's first and second moments). Integer and scalar optimiser state (Adam's step count) is equal on
every learner after equal numbers of updates and is left alone.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from podium.algos.base import Agent
from podium.algos.normalization import RunningMeanStd

__all__ = ["FUSION_TIMEOUT", "FusionGroup", "Learner", "average_agents", "fusable_tensors", "normalisers"]

FUSION_TIMEOUT = 900.0
"""Seconds a fusion waits for the other learners. Learner 0 alone evaluates (inline), confirms, and writes
checkpoints and replay buffers between two fusions, which can take minutes; a learner that died is noticed
at once anyway (its connection closes), so this bounds only a learner that hangs."""


def fusable_tensors(agent: Agent) -> list[torch.Tensor]:
    """The tensors that fusion averages, in a fixed order (the same on every learner of one algorithm):
    every floating tensor of the modules (0-dim ones too: normaliser counts, SAC's ``log_alpha``), then
    every floating optimiser state tensor except the step counts (Adam's moments, also those of 0-dim
    parameters such as ``log_alpha``)."""
    out = [v for m in agent.modules().values() for v in m.state_dict().values() if v.is_floating_point()]
    for state in _optimiser_states(agent):
        out += [v for k, v in sorted(state.items()) if k != "step" and torch.is_tensor(v) and v.is_floating_point()]
    return out


def step_counters(agent: Agent) -> list[torch.Tensor]:
    """Each optimised tensor's step count (Adam's bias correction), in the same fixed order. Fusion does
    not average them: every learner takes learner 0's (the first agent's), also when the learners took
    different numbers of steps (PPO's ``target_kl`` ends epochs early)."""
    return [s["step"] for s in _optimiser_states(agent) if torch.is_tensor(s.get("step"))]


def normalisers(agent: Agent) -> list[RunningMeanStd]:
    """The agent's running normalisers, which fusion pools rather than averages."""
    return [m for module in agent.modules().values() for m in module.modules() if isinstance(m, RunningMeanStd)]


def _optimiser_states(agent: Agent) -> list[dict[str, Any]]:
    return [
        optimizer.state.get(param, {})
        for optimizer in agent.optimizers().values()
        for group in optimizer.param_groups
        for param in group["params"]
    ]


@torch.no_grad()
def average_agents(agents: Sequence[Agent]) -> None:
    """Replace every agent's fusable tensors (see :func:`fusable_tensors`) by their element-wise mean, its
    normalisers by the pooled statistics of every agent's data since their shared base (the same start, a
    load, or the last fusion), and its step counts by the first agent's.

    All agents must be of one algorithm and architecture, with the same optimiser state layout.
    """
    if len(agents) < 2:
        return
    columns = [fusable_tensors(a) for a in agents]
    steps = [step_counters(a) for a in agents]
    if len({len(c) for c in columns}) != 1 or len({len(c) for c in steps}) != 1:
        raise ValueError("agents to fuse differ in their state (another algorithm, or optimisers not yet stepped)")
    for agent in agents:
        for rms in normalisers(agent):
            rms.to_fusable(len(agents))
    for tensors in zip(*columns, strict=True):
        mean = torch.stack([t.to(tensors[0].device) for t in tensors]).mean(0)
        for t in tensors:
            t.copy_(mean)
    for counters in zip(*steps, strict=True):
        for t in counters[1:]:
            t.copy_(counters[0])
    for agent in agents:
        for rms in normalisers(agent):
            rms.from_fusable()


class FusionGroup:
    """K learner processes that average their agents with ``torch.distributed``.

    The group meets through a file (``torch.distributed.FileStore``) — no listening socket for the
    rendezvous — and gloo's connections between the learners are bound to the loopback interface
    (``GLOO_SOCKET_IFNAME=lo``; ``lo0`` on macOS) unless the environment says otherwise, so a pod's learners are not
    reachable from the network.

    Args:
        store: path of the rendezvous file (the same for every learner; it must not exist before rank 0
            starts the group, and is removed by :meth:`close`).
        rank / world: this learner's index and the number of learners K.
        backend: ``gloo`` (CPU) or ``nccl`` (GPUs).
        timeout: seconds a collective waits for the other learners before failing.
    """

    def __init__(
        self, store: str | Path, rank: int, world: int, backend: str = "gloo", timeout: float = FUSION_TIMEOUT
    ) -> None:
        if backend == "gloo":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")  # loopback
        self.rank, self.world, self.path = rank, world, Path(store)
        file_store = dist.FileStore(str(self.path), world)
        self.group = _init(backend, file_store, rank, world, timeout)

    @torch.no_grad()
    def fuse(self, agent: Agent, stop: bool = False) -> bool:
        """Average ``agent`` with the other learners' (a collective: every learner calls it, in step).
        Any learner may ask to ``stop``; returns whether one did (all learners then end together)."""
        pooled = normalisers(agent)
        for rms in pooled:
            rms.to_fusable(self.world)
        tensors = fusable_tensors(agent)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        device = tensors[0].device if tensors else torch.device("cpu")
        flag = torch.tensor([1.0 if stop else 0.0], device=device)
        counters = step_counters(agent)
        if counters:  # learner 0's step counts for everyone: a sum to which only learner 0 contributes
            steps = torch.stack([c.detach().reshape(()).double().cpu() for c in counters])
            if self.rank != 0:
                steps.zero_()
            dist.all_reduce(steps, group=self.group)
            for c, value in zip(counters, steps, strict=True):
                c.copy_(value.to(c.dtype))
        requested = False
        for i, (dtype, group) in enumerate(sorted(by_dtype.items(), key=lambda kv: str(kv[0]))):
            flat = torch.cat([t.reshape(-1) for t in group] + ([flag.to(dtype)] if i == 0 else []))
            dist.all_reduce(flat, group=self.group)
            if i == 0:
                requested = bool(flat[-1] > 0)
                flat = flat[:-1]
            flat /= self.world
            offset = 0
            for t in group:
                n = t.numel()
                t.copy_(flat[offset : offset + n].view_as(t))
                offset += n
        if not by_dtype:
            dist.all_reduce(flag, group=self.group)
            requested = bool(flag[0] > 0)
        for rms in pooled:
            rms.from_fusable()
        return requested

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        if self.rank == 0:
            self.path.unlink(missing_ok=True)


def _init(backend: str, store: Any, rank: int, world: int, timeout: float) -> Any:
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    return dist.group.WORLD


class Learner:
    """Runs ``agent.learn(buffer, next_obs)`` and, in a group of learners, fuses after each phase."""

    def __init__(self, agent: Agent, fusion: FusionGroup | None = None, fuse_every: int = 1) -> None:
        self.agent, self.fusion, self.fuse_every = agent, fusion, fuse_every
        for rms in normalisers(agent):  # every learner starts from learner 0's statistics: the first base
            rms.mark_shared()
        self.updates = 0
        self.fusion_time = 0.0  # seconds spent fusing

    def learn(self, buffer: object, next_obs: torch.Tensor) -> dict[str, float]:
        stats = self.agent.learn(buffer, next_obs)
        self.updates += 1
        return stats

    @property
    def fusing(self) -> bool:
        """Whether the phase just learned ends with a fusion (every ``fuse_every`` phases, in a group)."""
        return self.fusion is not None and self.updates % self.fuse_every == 0

    def fuse(self, stop: bool = False) -> bool:
        """At a fusion phase, average with the other learners; any learner may ask to ``stop``, and the
        return says whether one did (they all end after this phase). Without a group: returns ``stop``."""
        if self.fusion is None:
            return stop
        if not self.fusing:
            return False
        t0 = time.perf_counter()
        requested = self.fusion.fuse(self.agent, stop)
        self.fusion_time += time.perf_counter() - t0
        return requested
