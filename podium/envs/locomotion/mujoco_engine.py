"""MuJoCo C on the CPU: the engine CI tests with, bit-identical to gymnasium's MuJoCo envs.

The worlds run in ``mujoco.batch.Batch`` (MuJoCo >= 4.0): the state rows (``qpos``, ``qvel``,
``qacc_warmstart``, ``ctrl``) are written in one numpy copy each, and the C library steps every
world on its own thread pool — no Python loop over worlds, and its results are bit-identical to a
loop over one ``MjData`` per world, i.e. to gymnasium's own env stepped from the same state.

One thing the batch cannot do is ``mj_rnePostConstraint`` (the call that fills ``cfrc_ext``, which
gymnasium runs after every env step and which Ant's and Humanoid's observations and contact costs
read): it must run on the integrator's last evaluation, which only the world's own ``MjData`` holds.
So the batch is *persistent* (one ``MjData`` per world) and, after each step, a Python loop copies
each world's ``MjData`` out (``Batch.get_data``) and runs ``mj_rnePostConstraint`` on it: about 20 us
per world, against 0.3-0.6 ms of physics per world and env step. This loop is the price of exact
contact forces; an engine without it would need a reimplementation of ``mj_contactForce`` and the
force transport, in the torch formulas, that could not be bit-identical.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from podium.envs.locomotion.engine import Engine, check_memory, require

if TYPE_CHECKING:
    import mujoco

__all__ = ["MujocoEngine"]


def _free_ram() -> float:
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not a POSIX system: do not guess
        return float("inf")


class MujocoEngine(Engine):
    """``num_worlds`` worlds of MuJoCo C (float64), stepped on a CPU thread pool.

    Args:
        threads: threads of the batch's pool (default: torch's intra-op thread count — all cores in a
            plain process, a pod's ``torch_threads``, 1 by default, in a pod — at most one per world).
            The ``mj_rnePostConstraint`` loop runs on the calling thread.
        Other arguments: see :class:`~podium.envs.locomotion.engine.Engine`. ``device`` may be any
        torch device: the physics runs on the CPU and the tensors are moved (a host copy per step).

    Raises:
        MissingDependencyError: MuJoCo (>= 4.0) is not installed: ``pip install "podium[mujoco]"``.
        ValueError: ``num_worlds`` worlds do not fit in the free memory (the message gives a count that does).
    """

    name: ClassVar[str] = "mujoco"
    dtype = torch.float64

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        device: torch.device,
        frame_skip: int,
        fields: Iterable[str],
        threads: int | None = None,
    ) -> None:
        super().__init__(model, num_worlds, device, frame_skip, fields)
        self._mujoco = mujoco_ = require("mujoco", "the MuJoCo C engine")
        batch = require("mujoco.batch", "the MuJoCo C engine")
        if threads is not None and threads <= 0:
            raise ValueError(f"threads must be a positive integer or None, got {threads}")
        # resident memory per world: a persistent MjData touches far less than its arena; nbuffer bounds it
        check_memory(self.num_worlds, model.nbuffer + 64 * 1024, _free_ram(), "memory", " or use engine='mjx' on a GPU")
        self.model = model
        nthread = min(threads or torch.get_num_threads(), self.num_worlds)
        self._batch = batch.Batch(model, nsim=self.num_worlds, nthread=nthread, persistent=True)
        self._reset_batch = batch.Batch(model, nsim=self.num_worlds, nthread=nthread)
        self.threads = nthread
        self._scratch = mujoco_.MjData(model)
        self._cfrc = np.zeros((self.num_worlds, model.nbody, 6))
        for b in (self._batch, self._reset_batch):
            for key in ("qpos", "qvel", "qacc_warmstart", "ctrl"):
                b.bind(key)
        self._outputs = {key: self._batch.bind(key) for key in self.fields if key != "cfrc_ext"}
        self._reset_outputs = {key: self._reset_batch.bind(key) for key in self.fields if key != "cfrc_ext"}

    def close(self) -> None:
        """Stop the batches' thread pools now, in this process (left to the garbage collector, a pool could be
        destroyed in a forked child, which has none of its threads, and hang it)."""
        super().close()
        self._outputs, self._reset_outputs = {}, {}
        self._batch = self._reset_batch = None  # type: ignore[assignment]

    def _host(self, t: torch.Tensor) -> np.ndarray:
        return t.detach().to("cpu", torch.float64).numpy()

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a, dtype=torch.float64, device=self.device)  # always a copy: the batch reuses `a`

    def forward(self, qpos: torch.Tensor, qvel: torch.Tensor) -> dict[str, torch.Tensor]:
        self._check_rows(qpos=qpos, qvel=qvel)
        k = qpos.shape[0]
        b = self._reset_batch
        ids = np.arange(k)
        b.bind("qpos")[:k] = self._host(qpos)
        b.bind("qvel")[:k] = self._host(qvel)
        b.bind("qacc_warmstart")[:k] = 0.0
        b.bind("ctrl")[:k] = 0.0
        b.forward(ids)
        out = {"qpos": self._tensor(b.bind("qpos")[:k]), "qvel": self._tensor(b.bind("qvel")[:k])}
        out["qacc_warmstart"] = torch.zeros(k, self.nv, dtype=torch.float64, device=self.device)
        for key, arr in self._reset_outputs.items():
            out[key] = self._tensor(arr[:k])
        if "cfrc_ext" in self.fields:
            out["cfrc_ext"] = torch.zeros(k, self.nbody, 6, dtype=torch.float64, device=self.device)
        return out

    def step(
        self, qpos: torch.Tensor, qvel: torch.Tensor, qacc_warmstart: torch.Tensor, ctrl: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        self._check_rows(qpos=qpos, qvel=qvel, qacc_warmstart=qacc_warmstart, ctrl=ctrl)
        if qpos.shape[0] != self.num_worlds:
            raise ValueError(f"{type(self).__name__}.step takes all {self.num_worlds} worlds, got {qpos.shape[0]}")
        b = self._batch
        b.bind("qpos")[:] = self._host(qpos)
        b.bind("qvel")[:] = self._host(qvel)
        b.bind("qacc_warmstart")[:] = self._host(qacc_warmstart)
        b.bind("ctrl")[:] = self._host(ctrl)
        b.step(nstep=self.frame_skip)
        out = {key: self._tensor(b.bind(key)) for key in ("qpos", "qvel", "qacc_warmstart")}
        for key, arr in self._outputs.items():
            out[key] = self._tensor(arr)
        if "cfrc_ext" in self.fields:
            mj, scratch, cfrc = self._mujoco, self._scratch, self._cfrc
            for i in range(self.num_worlds):
                b.get_data(i, scratch)
                mj.mj_rnePostConstraint(self.model, scratch)
                cfrc[i] = scratch.cfrc_ext
            out["cfrc_ext"] = self._tensor(cfrc)
        return out
