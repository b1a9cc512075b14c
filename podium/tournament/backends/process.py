"""Process backend: every pod is a local subprocess (the embedded default).

A pod process runs ``python -m podium._pod_entry POD_RUN_DIR`` (which takes SIGTERM over before it imports
torch, then calls :func:`main` here), reading its job from ``POD_RUN_DIR/job.json`` and writing
``report.json`` (finished) or ``error.txt`` (failed), then ``done`` (its exit code: 0, 1, or 128 + the
signal that stopped it, also while it was still importing); its output goes to ``POD_RUN_DIR/pod.log``.
The backend writes ``POD_RUN_DIR/pod.pid`` when it hands the job to a process: the process's pid and its
start time, which together name that one process (the system gives a pid to another process once its
process ended). CPU pods pin their torch/OpenMP threads to ``ceil(cpus_per_pod)`` so the pool does not
oversubscribe the cores; GPU pods are spread over the visible GPUs.

Pod processes are reused: after a job succeeds, the process reads the next pod's run directory from its
standard input instead of exiting, so a tournament of short rounds pays Python's and torch's start-up
(about 2 s of CPU per process on a laptop core) once per pool slot rather than once per pod. A process
whose job failed exits; an idle process exits when its stdin closes (the orchestrator ended) and is
stopped by the backend after ``idle_timeout`` seconds without work. The pod processes that
:func:`podium._pod_entry.start_ahead` started before the tournament's process imported torch are the first
idle ones of the next backend with their thread count. A pod process draws its pod's
``curve.png`` after it wrote ``done``: the orchestrator acts on the report while matplotlib draws.

Pods run in their own session: Ctrl-C in the terminal reaches the orchestrator, which stops them in
order. A pod that outlives a killed orchestrator is adopted by the next one (``podium tournament
resume``) if it is still running.

Resources are the CPU cores this process may use (its affinity mask: ``taskset -p`` on the
orchestrator, or a container's CPU set, resizes the pool while it runs) and the visible GPUs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from podium._pod_entry import MODULE, Terminated, spawn, take_ahead
from podium.config import PodSpec
from podium.machine import local_cpus
from podium.pod import PodInterrupted, draw_curve
from podium.rundir import PodDir
from podium.tournament.backends import (
    Backend,
    PodJob,
    PodOutcome,
    Resources,
    local_gpus,
    read_error,
    read_report,
    run_job,
)
from podium.tournament.config import pod_threads

if TYPE_CHECKING:
    from podium.tournament.config import TournamentConfig

__all__ = ["POD_ENTRY", "ProcessBackend"]

POD_ENTRY = MODULE
"""The module a pod process runs (``python -m POD_ENTRY [POD_RUN_DIR]``); its command line marks the process as
a pod's."""
_OLD_POD_ENTRY = "podium.tournament.backends.process"
"""What pod processes of an older podium ran: still adopted (a tournament resumed after an upgrade)."""


@dataclass
class _Running:
    job_dir: Path
    pid: int
    popen: subprocess.Popen | None  # None for an adopted pod (started by an earlier orchestrator)
    gpu: int | None
    start: int | None = None  # the process's start time (:func:`_start_time`); None: unknown


@dataclass
class _Idle:
    popen: subprocess.Popen
    gpu: int | None
    since: float
    start: int | None = None


class ProcessBackend(Backend):
    """Runs each pod in a subprocess of this machine.

    Args:
        cpus_per_pod: threads a CPU pod may use (its torch and OpenMP thread count).
        resources: override what :meth:`resources` reports (fixed, or a function); default: the
            affinity mask's cores and the visible GPUs.
        reuse: run the next pod in a finished pod's process (saves the interpreter and torch start-up);
            ``False`` starts a fresh process for every pod.
        idle_timeout: seconds an idle reusable process waits for work before the backend stops it.
    """

    name = "process"

    def __init__(
        self,
        cpus_per_pod: float = 1.0,
        resources: Resources | None = None,
        reuse: bool = True,
        idle_timeout: float = 30.0,
    ) -> None:
        self.threads = pod_threads(cpus_per_pod)
        self._resources = resources
        self._running: dict[str, _Running] = {}
        # pod processes started ahead of this tournament (podium._pod_entry.start_ahead) are its first idle ones
        now = time.monotonic()
        ahead = take_ahead(self.threads) if reuse else []
        self._idle: list[_Idle] = [_Idle(p, None, now, _start_time(p.pid)) for p in ahead]
        self.reuse = reuse
        self.idle_timeout = idle_timeout
        self._host = socket.gethostname()

    @classmethod
    def from_config(cls, config: TournamentConfig) -> ProcessBackend:
        return cls(cpus_per_pod=config.pool.cpus_per_pod)

    def resources(self) -> Resources:
        if self._resources is not None:
            return self._resources() if callable(self._resources) else self._resources
        return Resources(cpus=local_cpus(), gpus=local_gpus())

    def submit(self, job: PodJob) -> str:
        run_dir = Path(job.run_dir)
        pod_dir = PodDir(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        pod_dir.clear_protocol()
        pod_dir.job.write_text(
            json.dumps({"pod_id": job.pod_id, "spec": job.spec.model_dump(mode="json"), "resume": job.resume})
        )
        gpu = None
        if job.spec.device.startswith("cuda") and local_gpus() > 0:
            used = [r.gpu for r in self._running.values() if r.gpu is not None]
            gpu = min(range(local_gpus()), key=used.count)
        reused = self._reuse(run_dir, gpu) if self.reuse else None
        popen, start = reused if reused is not None else (None, None)
        if popen is None:
            popen = spawn(run_dir, self.threads, _visible_gpu(gpu) if gpu is not None else None, self.reuse)
            start = _start_time(popen.pid)  # our child, not reaped yet: its /proc entry is still its own
            _write_pid(run_dir, popen.pid, start)
        self._running[job.pod_id] = _Running(run_dir, popen.pid, popen, gpu, start)
        return f"{self._host}:{popen.pid}"

    def _reuse(self, run_dir: Path, gpu: int | None) -> tuple[subprocess.Popen, int | None] | None:
        """Hand ``run_dir`` to an idle pod process on the same GPU: that process and its start time; ``None``
        when there is none."""
        for idle in list(self._idle):
            if idle.gpu != gpu:
                continue
            self._idle.remove(idle)
            if idle.popen.poll() is not None or idle.popen.stdin is None:
                continue
            # pod.pid first: an orchestrator that dies right after this line still finds (adopts) the pod
            _write_pid(run_dir, idle.popen.pid, idle.start)
            try:
                idle.popen.stdin.write(f"{run_dir.resolve()}\n".encode())
                idle.popen.stdin.flush()
            except (BrokenPipeError, OSError):
                PodDir(run_dir).pid.unlink(missing_ok=True)
                _stop(_Running(run_dir, idle.popen.pid, idle.popen, gpu, idle.start))
                continue
            return idle.popen, idle.start
        return None

    def adopt(self, pod_id: str, handle: str | None, run_dir: Path) -> bool:
        recorded = _read_pid(Path(run_dir))
        if recorded is None:
            return False
        pid, start = recorded
        if handle is not None:  # (None: started, but its handle never reached the database: the pid file names it)
            host, _, pid_text = handle.rpartition(":")
            if host != self._host or pid_text != str(pid):
                return False
        if not _is_pod_process(pid, Path(run_dir)) or PodDir(run_dir).done.exists():
            return False
        self._running[pod_id] = _Running(Path(run_dir), pid, None, _gpu_of(pid), start)  # new pods spread beside it
        return True

    def poll(self, timeout: float | None = None) -> list[PodOutcome]:
        deadline = time.monotonic() + (self.tick if timeout is None else timeout)
        while True:
            done = []
            for pod_id, run in list(self._running.items()):
                marker = _read_done(run.job_dir)
                if run.popen is not None:
                    code = run.popen.poll()
                    if code is None and marker is None:
                        continue
                    if code is None and marker == 0 and self.reuse:
                        # ready for the next pod
                        self._idle.append(_Idle(run.popen, run.gpu, time.monotonic(), run.start))
                    code = marker if code is None else code
                elif marker is not None:
                    code = marker
                elif _is_pod_process(run.pid, run.job_dir):  # (not a recycled pid: an adopted pod's is not ours)
                    continue
                else:  # an adopted pod: its exit status went to the orchestrator that started it, its ``done`` here
                    code = _read_done(run.job_dir)  # (again: it may have written it after the first look, then ended)
                del self._running[pod_id]
                done.append(_outcome(pod_id, run.job_dir, code))
            self._retire_idle(self.idle_timeout)
            if done or time.monotonic() >= deadline:
                return done
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def cancel(self, pod_id: str) -> None:
        run = self._running.pop(pod_id, None)
        if run is not None:
            _stop(run)

    def cancel_many(self, pod_ids: list[str]) -> None:
        runs = [self._running.pop(pod_id) for pod_id in pod_ids if pod_id in self._running]
        _stop(*runs)  # all signalled at once: the last pod gets as long to save as the first

    def release_idle(self) -> None:
        for idle in self._idle:  # stdin closed: it exits (after drawing its last pod's curve); shutdown waits
            with contextlib.suppress(OSError):
                if idle.popen.stdin is not None:
                    idle.popen.stdin.close()

    def shutdown(self) -> None:
        self.release_idle()
        self.cancel_many(list(self._running))
        self._retire_idle(0.0)

    def detach(self) -> None:
        self._running.clear()  # pod processes live in sessions of their own: they go on, the new owner adopts them
        self._retire_idle(0.0)

    def _retire_idle(self, older_than: float) -> None:
        """Stop idle pod processes that waited more than ``older_than`` seconds (closing stdin ends them)."""
        now = time.monotonic()
        retired = [i for i in self._idle if now - i.since >= older_than]
        for idle in retired:  # all told first: one still drawing its last pod's curve finishes beside the others
            self._idle.remove(idle)
            with contextlib.suppress(OSError):
                if idle.popen.stdin is not None:
                    idle.popen.stdin.close()
        for idle in retired:
            try:
                idle.popen.wait(timeout=IDLE_EXIT_S)
            except subprocess.TimeoutExpired:
                _stop(_Running(Path("."), idle.popen.pid, idle.popen, idle.gpu, idle.start))


def _visible_gpu(index: int) -> str:
    """What ``CUDA_VISIBLE_DEVICES`` names the orchestrator's ``index``-th GPU by: its entry in the
    orchestrator's own list when that is set (GPUs it was told to use, ids or UUIDs), else the index."""
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return visible[index] if index < len(visible) else str(index)


def _gpu_of(pid: int, wait_s: float = 2.0) -> int | None:
    """The orchestrator's GPU that the pod process ``pid`` was pinned to (its ``CUDA_VISIBLE_DEVICES``, read
    back from ``/proc``, as :func:`_visible_gpu` wrote it), or None: a CPU pod, or no ``/proc`` to read.

    A process still inside ``exec`` (its parent's ``Popen`` has returned, its new image is not yet set up)
    shows an empty environment; that is waited out, up to ``wait_s`` seconds, rather than read as "no GPU"."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return None
        if raw or time.monotonic() > deadline or not _alive(pid):
            break
        time.sleep(0.005)
    environ = raw.split(b"\0")
    value = next((e.split(b"=", 1)[1] for e in environ if e.startswith(b"CUDA_VISIBLE_DEVICES=")), None)
    if value is None:
        return None
    text = value.decode(errors="replace").strip()
    return next((i for i in range(local_gpus()) if _visible_gpu(i) == text), None)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (field 22 of ``/proc/PID/stat``); None when there
    is no such process (or no ``/proc``). It never changes while the process lives, and a later process that
    is given the same pid has a later one: with the pid it names one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _write_pid(run_dir: Path, pid: int, start: int | None) -> None:
    """Record in ``run_dir/pod.pid`` that process ``pid``, started at ``start`` (:func:`_start_time`), runs its job."""
    PodDir(run_dir).pid.write_text(f"{pid} {start}" if start is not None else str(pid))


def _read_pid(run_dir: Path) -> tuple[int, int | None] | None:
    """The (pid, start time) ``run_dir/pod.pid`` records; the start time is None in a file written by an older
    podium (the pid alone). None when there is no such file, or it is damaged."""
    try:
        fields = PodDir(run_dir).pid.read_text().split()
    except OSError:
        return None
    if not 1 <= len(fields) <= 2 or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1]) if len(fields) == 2 else None


def _is_pod_process(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` is the live pod process that ``run_dir/pod.pid`` records (and not a recycled pid).

    The pid file names the process by its pid *and start time*. A pod's process may end and the system may give
    its pid to another process — another pod's process of this tournament or of another, whose command line
    looks the same — so the pid and the command line alone would accept the wrong process. Nor can the command
    line name the run directory: a reused pod process keeps the first job's directory in its command line
    while it runs later jobs (they arrive on its stdin). A pid file from an older podium (no start time) is
    still read, checked by the pid and the command line only."""
    recorded = _read_pid(run_dir)
    if recorded is None or recorded[0] != pid:
        return False
    start = _start_time(pid)
    if start is None or (recorded[1] is not None and recorded[1] != start):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        return False
    return _alive(pid) and any(name.encode() in cmdline for name in (POD_ENTRY, _OLD_POD_ENTRY))


def _read_done(run_dir: Path) -> int | None:
    """The exit code a pod process left in ``run_dir/done`` once it finished that job, else ``None``."""
    try:
        return int(PodDir(run_dir).done.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


IDLE_EXIT_S = 5.0
"""Seconds an idle pod process has to exit once its stdin closed (it may be drawing its last pod's curve:
about 1 s in a process that has not drawn before) before it is stopped."""

STOP_GRACE = 15.0
"""Seconds a stopped pod has to save its checkpoint (and an off-policy pod its replay buffer) before SIGKILL."""


def _stop(*runs: _Running, grace: float = STOP_GRACE) -> None:
    """SIGTERM the pods' process groups, then SIGKILL whatever is left after ``grace`` seconds."""

    def ended(run: _Running) -> bool:
        return run.popen.poll() is not None if run.popen is not None else not _alive(run.pid)

    def recycled(run: _Running) -> bool:
        """An adopted pod's pid that now belongs to another process (its own ended): never signalled."""
        now = _start_time(run.pid) if run.popen is None and run.start is not None else None
        return now is not None and now != run.start

    left = list(runs)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for run in left:
            if recycled(run):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.pid, sig)
        end = time.monotonic() + grace
        while left and time.monotonic() < end:
            left = [run for run in left if not ended(run)]
            time.sleep(0.05)
        if not left:
            return


def _outcome(pod_id: str, run_dir: Path, code: int | None) -> PodOutcome:
    report = read_report(run_dir)
    if report is not None:
        return PodOutcome(pod_id, report)
    if code is None:
        return PodOutcome(pod_id, None, "the pod process (adopted after a restart) ended without a report")
    stop_signals = (signal.SIGTERM, signal.SIGINT)
    if code in [128 + s for s in stop_signals] + [-s for s in stop_signals] and read_error(run_dir) is None:
        name = signal.Signals(code - 128 if code > 0 else -code).name  # not the tournament's: it had let go of it
        return PodOutcome(
            pod_id, None, f"the pod process was stopped by a {name} from outside the tournament", lost=True
        )  # it saved its checkpoint (or had one): it resumes, as a pod whose machine went away
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return PodOutcome(pod_id, None, f"the pod process was killed by {name}")
    error = read_error(run_dir)
    if error is not None:
        return PodOutcome(pod_id, None, error)
    log = PodDir(run_dir).log
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
    return PodOutcome(
        pod_id, None, f"the pod process exited with code {code} and no report" + (f": {tail[0]}" if tail else "")
    )


def run_one(run_dir: str) -> int:
    """Run the job in ``run_dir``; 0 = report written, 1 = failed (``error.txt``), 128 + the signal number =
    stopped by SIGTERM or SIGINT (the orchestrator preempting or cancelling it, or a signal from outside; a pod
    that was training saved its checkpoint first). Leaves ``done`` with that code in every case, so that an
    orchestrator that did not start this process (it adopted the pod, and gets no exit status) learns how it
    ended just as the one that started it does."""
    path = PodDir(run_dir)
    spec: PodSpec | None = None
    try:
        job = json.loads(path.job.read_text())
        spec = PodSpec(**job["spec"])
        run_job(PodJob(job["pod_id"], spec, path.root, bool(job.get("resume"))), plot=False)
        code = 0
    except Terminated:  # before the pod took SIGTERM over, or after it let it go
        code = 128 + signal.SIGTERM
    except KeyboardInterrupt as exc:  # PodInterrupted: checkpoint saved; else a second signal stopped it at once
        print(exc, flush=True)
        code = exc.exit_code if isinstance(exc, PodInterrupted) else 128 + signal.SIGINT
    except Exception:
        path.error.write_text(traceback.format_exc())
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    path.done.write_text(str(code))
    if spec is not None:  # the learning curve after the report: the orchestrator does not wait for it
        _draw_curve(path, spec)
    return code


def _draw_curve(path: PodDir, spec: PodSpec) -> None:
    """Draw the pod's ``curve.png``; a failure to draw is printed to ``pod.log``, it does not fail the pod."""
    try:
        draw_curve(path.root, spec)
    except Exception:
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()


def _log_to(run_dir: Path) -> None:
    """Send this process's output (file descriptors 1 and 2) to ``run_dir/pod.log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(PodDir(run_dir).log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(run_dir: str | None) -> int:
    """Entry point of a pod process: run the job in ``run_dir``, then, while the jobs succeed, the jobs
    whose run directories arrive one per line on stdin (empty stdin: one job only); with no ``run_dir`` (a
    process started ahead), the first job too comes on stdin. Returns the exit code of the process: the last
    job's (:func:`run_one`)."""
    code = 0 if run_dir is None else run_one(run_dir)
    while code == 0:
        line = sys.stdin.readline()
        if not line.strip():
            break
        _log_to(Path(line.strip()))
        code = run_one(line.strip())
    return code


if __name__ == "__main__":  # what pod processes of an older podium ran; now podium._pod_entry
    from podium._pod_entry import main as _entry

    sys.exit(_entry(sys.argv))
