"""Backends run pods for the orchestrator. The interface is small on purpose, so that each backend is an
addition beside the others and nothing outside a backend knows which one runs:

* :class:`~podium.tournament.backends.inline.InlineBackend` — pods run one at a time in this process
  (tests, debugging, stepping through with a debugger);
* :class:`~podium.tournament.backends.process.ProcessBackend` — each pod is a local subprocess with
  its torch threads pinned (the default);
* :class:`~podium.tournament.backends.ray.RayBackend` — each pod is a Ray actor on a Ray cluster
  (``pip install 'podium[ray]'``).

A backend is made from the tournament's config by its own :meth:`Backend.from_config` (the one place that
reads the options it needs), reports the resources it can give the tournament (:meth:`Backend.resources`;
the pool is sized from them), and runs what it is given: :meth:`Backend.submit`, :meth:`Backend.poll` (how
long it waits is its own business), :meth:`Backend.cancel`. A pod's results travel through its run
directory: ``report.json`` when it finished, ``error.txt`` when it failed.
"""

from __future__ import annotations

import importlib
import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from podium.config import PodSpec
from podium.pod import PodReport
from podium.rundir import PodDir

if TYPE_CHECKING:
    from podium.tournament.config import TournamentConfig

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendError",
    "PodJob",
    "PodOutcome",
    "Resources",
    "backend_class",
    "backend_for",
    "make_backend",
    "read_error",
    "read_report",
]

BACKENDS: dict[str, str] = {
    "inline": "podium.tournament.backends.inline:InlineBackend",
    "process": "podium.tournament.backends.process:ProcessBackend",
    "ray": "podium.tournament.backends.ray:RayBackend",
}
"""Backend name (``TournamentConfig.backend``) -> ``module:class``, imported only when chosen."""


class BackendError(RuntimeError):
    """A backend cannot run the tournament as configured (a cluster that does not answer, a pod bigger than
    any machine, a missing package); the message gives the numbers and the fix. Raised before any pod starts."""


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
    """A pod that stopped running: ``report`` if it finished, else ``error`` (what went wrong). ``lost``: the
    pod did nothing wrong, the machine it ran on went away (a Ray node died); it resumes from its last
    checkpoint instead of counting as a failure."""

    pod_id: str
    report: PodReport | None
    error: str | None = None
    lost: bool = False
    started: float | None = None
    """When the pod began to run (``time.time()``), where that is later than its submission (the inline
    backend runs its queue one pod at a time): the pod's overhead must not count its wait."""


class Backend(ABC):
    """Where pods run. Subclasses implement the four abstract methods below."""

    name: str = "backend"
    tick: float = 0.25
    """Seconds :meth:`poll` waits by default: the orchestrator's loop turns at this pace."""
    new_processes: bool = True
    """Whether pods run in new Python processes, which know only the envs any process knows (not those a
    running program registered)."""

    @classmethod
    def from_config(cls, config: TournamentConfig) -> Backend:
        """This backend with the options ``config`` gives it (the only place a backend reads the config).

        Raises:
            BackendError: it cannot run this tournament (the message says why, with the numbers).
        """
        return cls()

    def describe(self) -> str:
        """A few words for the tournament's first line, e.g. ``process backend``."""
        return f"{self.name} backend"

    @abstractmethod
    def resources(self) -> Resources:
        """The resources this backend can use now (the pool is sized from them)."""

    @abstractmethod
    def submit(self, job: PodJob) -> str:
        """Start ``job``; returns a handle the orchestrator stores (e.g. ``host:pid``) for :meth:`adopt`."""

    @abstractmethod
    def poll(self, timeout: float | None = None) -> list[PodOutcome]:
        """Wait up to ``timeout`` seconds (default: :attr:`tick`) for pods to stop; return those that did
        (finished, failed or lost)."""

    @abstractmethod
    def cancel(self, pod_id: str) -> None:
        """Stop a running pod now. Its periodic checkpoint stays, so it can be resumed later."""

    def cancel_many(self, pod_ids: list[str]) -> None:
        """Stop several running pods, all given the same time to save (default: one after another)."""
        for pod_id in pod_ids:
            self.cancel(pod_id)

    def adopt(self, pod_id: str, handle: str | None, run_dir: Path) -> bool:
        """Take over a pod started by an earlier orchestrator that died; False if it is not running. ``handle``
        is ``None`` when that orchestrator died between starting the pod and recording its handle."""
        return False

    def release_idle(self) -> None:
        """The tournament starts no more pods: what waits for work may go now, while the running pods are
        being stopped (:meth:`shutdown` then waits for it). Default: nothing to release."""
        return None

    def shutdown(self) -> None:
        """Stop everything still running (the orchestrator is leaving)."""
        return None

    def detach(self) -> None:
        """Leave, stopping no running pod: another orchestrator took the tournament over and adopts them.
        Default: :meth:`shutdown` (a backend whose pods cannot outlive it)."""
        self.shutdown()


def backend_class(name: str) -> type[Backend]:
    """The backend class registered as ``name`` in :data:`BACKENDS`."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: choose from {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(name: str, **kwargs: object) -> Backend:
    """A backend by name (``inline``, ``process``, ``ray``) with explicit options."""
    return backend_class(name)(**kwargs)


def backend_for(config: TournamentConfig) -> Backend:
    """The backend ``config.backend`` names, with the options it reads from ``config``."""
    return backend_class(config.backend).from_config(config)


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


def read_error(run_dir: Path) -> str | None:
    """The last line of the ``error.txt`` a failed pod left in ``run_dir`` (its exception), or None."""
    path = PodDir(run_dir).error
    if not path.is_file():
        return None
    lines = [ln for ln in path.read_text(errors="replace").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "the pod failed (its error.txt is empty)"


def write_report(run_dir: Path, report: PodReport) -> None:
    """Write ``report.json`` atomically (a reader never sees half of it)."""
    path = PodDir(run_dir).report
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report.to_dict()))
    os.replace(tmp, path)


def run_job(job: PodJob, plot: bool = True) -> PodReport:
    """Run one pod to the end of its budget (resuming it when asked and a checkpoint exists; a pod to resume
    that never wrote one starts again from the beginning, over its own earlier start) and write its report.
    ``plot=False``: the caller draws its ``curve.png`` (:func:`podium.pod.draw_curve`) once the report is out."""
    from podium.pod import Pod

    if job.resume and PodDir(job.run_dir).last.is_file():
        pod = Pod.resume(job.run_dir, progress=False)
        # the tournament's word on the selection bar as it stands now, not when the pod first started
        pod.spec = pod.spec.model_copy(update={"select_bar": job.spec.select_bar})
    else:
        pod = Pod(job.spec, job.run_dir, progress=False, overwrite=job.resume)
    report = pod.run(plot=plot)
    write_report(job.run_dir, report)
    return report
