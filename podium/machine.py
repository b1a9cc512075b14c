"""The machine this process runs on: the cores it may use and a one-line description for results.

:func:`local_cpus` is what a pod's thread plan and the tournament backends size themselves by (the affinity
mask, which ``taskset`` or a container limits, not the machine's total). :func:`describe` names the CPU model,
those cores, Python, torch and any GPU: every script under ``benchmarks/`` prints it first, because two VMs
of the same size with different CPUs ran the same runs 2-3x apart (BENCHMARKS.md).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import platform
import sys
import threading
from pathlib import Path
from typing import NoReturn

__all__ = ["CPUS_ENV", "cpu_budget", "cpu_model", "describe", "exit_process", "local_cpus"]

if hasattr(os, "register_at_fork"):
    # A forked child (a pod's evaluator, learners, rollout workers, a gymnasium env's subprocesses) never
    # garbage-collects what it inherited: the parent's garbage may hold native resources whose threads a fork
    # does not copy (a MuJoCo engine's thread pool), and a child that collected one hung for ever in its
    # destructor. The collector is off from just before the fork (other at-fork hooks of the child run before
    # this one, and allocate) until the inherited objects are frozen; then it is as it was.
    _forking = {"depth": 0, "collecting": True}  # forks in flight (threads may fork at once), and the state
    _forking_lock = threading.Lock()  # to give back when the last of them is done

    def _before_fork() -> None:
        with _forking_lock:
            if _forking["depth"] == 0:
                _forking["collecting"] = gc.isenabled()
                gc.disable()
            _forking["depth"] += 1

    def _after_fork_in_parent() -> None:
        with _forking_lock:
            _forking["depth"] -= 1
            if _forking["depth"] == 0 and _forking["collecting"]:
                gc.enable()

    def _after_fork_in_child() -> None:
        global _forking_lock
        _forking_lock = threading.Lock()  # another thread's fork may have held it: the child has one thread
        _forking["depth"] = 0
        gc.freeze()
        if _forking["collecting"]:
            gc.enable()

    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)

CPUS_ENV = "PODIUM_CPUS"
"""Environment variable with the CPU cores a process should keep busy (:func:`cpu_budget`); the tournament's
backends set it in each pod's process to the pod's share of the machine (``pool.cpus_per_pod``, rounded up)."""


def local_cpus() -> int:
    """CPU cores this process may run on (its affinity mask, which ``taskset`` or a container limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_budget() -> int:
    """CPU cores this process should keep busy: :func:`local_cpus`, capped by ``PODIUM_CPUS`` (:data:`CPUS_ENV`)
    when that is set, as the tournament's backends do for a pod. (Not ``OMP_NUM_THREADS``: many users set that
    to 1 for every process to keep OpenMP's threads in check, which says nothing about subprocesses.)

    Raises:
        ValueError: ``PODIUM_CPUS`` is set to something other than a positive whole number.
    """
    cores = local_cpus()
    value = os.environ.get(CPUS_ENV, "").strip()
    if not value:
        return cores
    if not (value.isascii() and value.isdigit()) or int(value) == 0:
        raise ValueError(
            f"{CPUS_ENV}={value!r}: expected a whole number of cores (1 or more); set it to one, e.g. "
            f"{CPUS_ENV}=1, or unset it to use all {cores} of this machine's"
        )
    return min(cores, int(value))


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(gpu: bool = True) -> str:
    """``CPU model, N cores (of M), arch, Python x.y.z, torch V[, GPU name]``; ``gpu``: name the first CUDA
    device when there is one."""
    import torch

    text = (
        f"{cpu_model()}, {local_cpus()} cores (of {os.cpu_count() or local_cpus()}), {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )
    if gpu and torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text


def exit_process(code: int | str | None = 0) -> NoReturn:
    """End this process with ``code``, as ``sys.exit(code)`` does, without Python tearing down every module:
    with torch loaded that teardown (and libtorch's destructors) takes 0.4-0.6 s of a 2-core VM after the work
    is done, which a user of the ``podium`` command waits for, and a tournament waits for in each pod
    process it stops. The ``atexit`` handlers run first (multiprocessing's joins its children there) and
    stdout and stderr are flushed; while a thread other than daemon threads still runs, this is
    ``sys.exit(code)`` (whose end waits for it)."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    if isinstance(code, str):  # sys.exit's meaning: print it, status 1
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0 if code is None else int(code) & 0xFF)
