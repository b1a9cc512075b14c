"""Inline backend: pods run one after another inside the orchestrator's process.

Meant for tests and debugging (a breakpoint in an agent works; errors show their full traceback). It
reports the machine's CPUs like the process backend unless given ``resources`` — a fixed
:class:`~podium.tournament.backends.Resources` or a function returning one, which lets a test change
them while a tournament runs.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

import torch

from podium.machine import local_cpus
from podium.rundir import PodDir
from podium.tournament.backends import Backend, PodJob, PodOutcome, Resources, local_gpus, run_job

__all__ = ["InlineBackend"]


class InlineBackend(Backend):
    """Runs submitted pods in this process, one per :meth:`poll` call, in the order submitted."""

    name = "inline"
    new_processes = False
    tick = 0.0  # a poll runs a whole pod: the loop never needs to wait

    def __init__(self, resources: Resources | Callable[[], Resources] | None = None) -> None:
        self._resources = resources
        self._queue: list[PodJob] = []

    def resources(self) -> Resources:
        if self._resources is None:
            return Resources(cpus=local_cpus(), gpus=local_gpus())
        return self._resources() if callable(self._resources) else self._resources

    def submit(self, job: PodJob) -> str:
        self._queue.append(job)
        return f"inline:{job.pod_id}"

    def poll(self, timeout: float | None = None) -> list[PodOutcome]:
        if not self._queue:
            return []
        job = self._queue.pop(0)
        threads = torch.get_num_threads()
        began = time.time()  # (it waited in the queue since its submission)
        try:
            report = run_job(job)
        except Exception as exc:  # a pod's failure is a result, not the orchestrator's crash
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            PodDir(job.run_dir).error.write_text(traceback.format_exc())
            return [PodOutcome(job.pod_id, None, detail, started=began)]
        finally:
            torch.set_num_threads(threads)  # a pod pins its threads; give the orchestrator its own back
        return [PodOutcome(job.pod_id, report, started=began)]

    def cancel(self, pod_id: str) -> None:
        self._queue = [j for j in self._queue if j.pod_id != pod_id]

    def shutdown(self) -> None:
        self._queue.clear()
