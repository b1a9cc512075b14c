"""Entry point of a tournament's pod process: ``python -m podium._pod_entry [POD_RUN_DIR]`` (the process backend
starts it; :mod:`podium.tournament.backends.process` runs the job), and how such a process is started.

It takes SIGTERM over before anything heavy is imported. torch, the pod and the tournament package take
seconds to import, and a pod process stopped in that time must still leave ``done`` (128 + the signal) in
its run directory: an orchestrator that adopted the pod gets no exit status, and without ``done`` it could
not tell a pod stopped from outside (which resumes) from one that failed. So this module imports only the
standard library, :mod:`podium.rundir` and :mod:`podium.machine` (none of them torch).

Without ``POD_RUN_DIR`` the process is *started ahead* (:func:`start_ahead`): it imports torch and the pod while
the tournament's own process is still importing them, then reads its first run directory from stdin, as a
reused pod process reads its next one. A tournament on a 2-core machine so starts its first pods about a second
sooner; on a machine with a core to spare for each, by a whole torch import.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from podium.machine import CPUS_ENV, local_cpus

if TYPE_CHECKING:
    from podium.tournament.config import TournamentConfig

__all__ = ["MODULE", "Terminated", "main", "release_ahead", "spawn", "start_ahead", "take_ahead"]

MODULE = "podium._pod_entry"
"""The module a pod process runs (``python -m MODULE [POD_RUN_DIR]``); its command line marks the process as a
pod's."""

_AHEAD: list[tuple[subprocess.Popen, int]] = []
"""Pod processes started ahead (:func:`start_ahead`) that no backend took yet, with their thread counts."""


class Terminated(SystemExit):
    """SIGTERM while no pod handles it (while importing, before a pod trains, between jobs): the process exits
    with 143."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def spawn(run_dir: Path | None, threads: int, gpu: str | None = None, reuse: bool = True) -> subprocess.Popen:
    """Start a pod process for ``run_dir`` (its output to the run directory's ``pod.log``), or, with ``None``, one
    that waits for its first run directory on stdin (its output, until then, discarded). Its torch and OpenMP
    threads are pinned to ``threads``; ``gpu``: its ``CUDA_VISIBLE_DEVICES``. In a session of its own, so
    that Ctrl-C in the terminal reaches only the orchestrator. ``reuse``: stdin stays open for further jobs."""
    from podium.rundir import PodDir

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", CPUS_ENV):
        env[var] = str(threads)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    command = [sys.executable, "-m", MODULE]
    if run_dir is None:
        out = subprocess.DEVNULL
    else:
        command.append(str(Path(run_dir).resolve()))
        out = open(PodDir(run_dir).log, "ab")  # noqa: SIM115 - the child has its own copy once it started
    try:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if reuse or run_dir is None else subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    finally:
        if run_dir is not None:
            out.close()


def start_ahead(config: TournamentConfig) -> int:
    """Start the pod processes a new tournament of ``config`` runs first, before the caller imports torch and
    the orchestrator: as many as its pool takes on this machine's cores (the orchestrator's own sizing), for
    the process backend and CPU pods only. The next :class:`~podium.tournament.backends.process.ProcessBackend`
    with that thread count takes them (:func:`take_ahead`); one that is never taken exits when this process
    does (its stdin closes). Returns how many were started."""
    if config.backend != "process" or config.pool.gpus_per_pod > 0 or config.pod.get("device", "cpu") != "cpu":
        return 0
    count = config.pool.size(local_cpus())
    threads = config.pool.pod_threads
    for _ in range(count):
        _AHEAD.append((spawn(None, threads), threads))
    return count


def take_ahead(threads: int) -> list[subprocess.Popen]:
    """The processes :func:`start_ahead` started with ``threads`` threads that still run, no longer held here;
    the others (another thread count) stay for another backend."""
    taken = [p for p, t in _AHEAD if t == threads]
    _AHEAD[:] = [(p, t) for p, t in _AHEAD if t != threads]
    return [p for p in taken if p.poll() is None]


def release_ahead() -> None:
    """End the processes :func:`start_ahead` started that no backend took (the tournament they were started for
    was refused, or ended before its backend was built): their stdin closes and they exit once their imports are
    done, instead of waiting for this process to end or becoming the first pods of a later tournament in it."""
    for popen, _ in _AHEAD:
        if popen.stdin is not None:
            with contextlib.suppress(OSError):
                popen.stdin.close()
    _AHEAD.clear()


def _handed_run_dir() -> str | None:
    """The run directory already waiting on stdin (a process started ahead and stopped while importing), or
    None: nothing waits there."""
    try:
        if select.select([sys.stdin], [], [], 0)[0]:
            return sys.stdin.readline().strip() or None
    except (OSError, ValueError):
        pass
    return None


def main(argv: list[str]) -> int:
    """Run the pod process for the run directory ``argv[1]`` (none: the first run directory read from stdin);
    returns its exit code."""
    signal.signal(signal.SIGTERM, _terminate)  # exit cleanly, with 143 (checkpoints are atomic anyway)
    run_dir = argv[1] if len(argv) > 1 else None
    try:
        from podium.tournament.backends.process import main as run_pods
    except Terminated:  # stopped while importing: no job ran, and none will
        from podium.rundir import PodDir

        job = run_dir if run_dir is not None else _handed_run_dir()
        if job is not None:
            PodDir(job).done.write_text(str(128 + signal.SIGTERM))
        return 128 + signal.SIGTERM
    return run_pods(run_dir)


if __name__ == "__main__":
    # through the importable module: the process backend catches *its* Terminated, not a copy made for __main__
    from podium._pod_entry import main as _main
    from podium.machine import exit_process

    exit_process(_main(sys.argv))  # the orchestrator that stops this process waits for its end
