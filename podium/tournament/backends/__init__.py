"""Backends run pods for the orchestrator. The interface is small on purpose, so that a new one (Ray
actors on a cluster) drops in beside the two that exist:

* :class:`~podium.tournament.backends.inline.InlineBackend` — pods run one at a time in this process
  (tests, debugging, stepping through with a debugger);
* :class:`~podium.tournament.backends.process.ProcessBackend` — each pod is a local subprocess with
  its torch threads pinned (the default).

A backend reports the resources it can give the tournament (:meth:`Backend.resources`); the
orchestrator sizes the pool from them and calls :meth:`Backend.submit`, :meth:`Backend.poll` and
:meth:`Backend.cancel`. A pod's results travel through its run directory: ``report.json`` when it
finished, ``error.txt`` when it failed.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from podium.config import PodSpec
from podium.pod import PodReport
from podium.rundir import PodDir

__all__ = ["Backend", "PodJob", "PodOutcome", "Resources", "make_backend", "read_report"]


@dataclass(frozen=True)
class Resources:
    """What a backend can give the tournament right now: CPU cores and GPUs (in total, not free)."""

    cpus: float
    gpus: float = 0.0


@dataclass(frozen=True)
class PodJob:
    """One pod to run: its id, spec, run directory, and whether to resume it from ``checkpoints/last.pt``."""

    pod_id: str
    spec: PodSpec
    run_dir: Path
    resume: bool = False


@dataclass(frozen=True)
class PodOutcome:
    """A pod that stopped running: ``report`` if it finished, else ``error`` (what went wrong)."""

    pod_id: str
    report: PodReport | None
    error: str | None = None


class Backend(ABC):
    """Where pods run. Subclasses implement the five methods below."""

    name: str = "backend"

    @abstractmethod
    def resources(self) -> Resources:
        """The resources this backend can use now (the pool is sized from them)."""

    @abstractmethod
    def submit(self, job: PodJob) -> str:
        """Start ``job``; returns a handle the orchestrator stores (e.g. ``host:pid``) for :meth:`adopt`."""

    @abstractmethod
    def poll(self, timeout: float) -> list[PodOutcome]:
        """Wait up to ``timeout`` seconds for pods to stop; return those that did (finished or failed)."""

    @abstractmethod
    def cancel(self, pod_id: str) -> None:
        """Stop a running pod now. Its periodic checkpoint stays, so it can be resumed later."""

    def adopt(self, pod_id: str, handle: str, run_dir: Path) -> bool:
        """Take over a pod started by an earlier orchestrator that died; False if it is not running."""
        return False

    def shutdown(self) -> None:
        """Stop everything still running (the orchestrator is leaving)."""
        return None


def make_backend(name: str, **kwargs: object) -> Backend:
    """A backend by name: ``inline`` or ``process``."""
    if name == "inline":
        from podium.tournament.backends.inline import InlineBackend

        return InlineBackend(**kwargs)  # type: ignore[arg-type]
    if name == "process":
        from podium.tournament.backends.process import ProcessBackend

        return ProcessBackend(**kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unknown backend {name!r}: use 'process' (local subprocesses) or 'inline' (this process)")


def local_cpus() -> int:
    """CPU cores this process may run on (its affinity mask, which ``taskset`` or a container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def read_report(run_dir: Path) -> PodReport | None:
    """The ``report.json`` a finished pod left in ``run_dir``, or None."""
    path = PodDir(run_dir).report
    if not path.is_file():
        return None
    try:
        return PodReport(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def write_report(run_dir: Path, report: PodReport) -> None:
    """Write ``report.json`` atomically (a reader never sees half of it)."""
    path = PodDir(run_dir).report
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report.to_dict()))
    os.replace(tmp, path)


def run_job(job: PodJob) -> PodReport:
    """Run one pod to the end of its budget (resuming it when asked and a checkpoint exists; a pod to resume
    that never wrote one starts again from the beginning, over its own earlier start)."""
    from podium.pod import Pod

    if job.resume and PodDir(job.run_dir).last.is_file():
        pod = Pod.resume(job.run_dir, progress=False)
    else:
        pod = Pod(job.spec, job.run_dir, progress=False, overwrite=job.resume)
    report = pod.run()
    write_report(job.run_dir, report)
    return report
