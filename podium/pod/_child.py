"""The plumbing of a pod's forked children (extra learners, rollout workers): how a child ignores the stop
signals, reports a failure and lets go of what it holds before ``os._exit``, and how the pod reaps them."""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import signal
import sys
import time
import traceback
from typing import Any

READY = "podium:ready"
"""What a child sends the pod once it is built and about to join its group (see :func:`await_children`)."""


def report_failure(conn: Any, exc: BaseException) -> None:
    """Print ``exc``'s traceback on the child's stderr (the pod's terminal or log) and send the pod the
    exception as one line (``"TypeName: message"``), if the pipe is still there."""
    if isinstance(exc, Exception):
        with contextlib.suppress(Exception):
            traceback.print_exception(exc, file=sys.stderr)
            sys.stderr.flush()
    with contextlib.suppress(BrokenPipeError, OSError):
        conn.send(f"{type(exc).__name__}: {exc}")


def await_children(processes: list[Any], conns: list[Any], what: str, timeout: float) -> str | None:
    """In the pod: wait until every child has sent :data:`READY`; return why one did not (its failure, or
    how it ended), or None. ``what`` names a child in the message (``"learner"`` -> ``"learner 2 ..."``,
    children numbered from 1). Waits at most ``timeout`` seconds in all."""
    pending = {rank: pair for rank, pair in enumerate(zip(processes, conns, strict=True), start=1)}
    while pending:
        waiting = [c for _, c in pending.values()] + [p.sentinel for p, _ in pending.values()]
        ready = multiprocessing.connection.wait(waiting, timeout=timeout)
        if not ready:
            return f"{what}s {', '.join(map(str, pending))} did not start within {timeout:g} s"
        for rank, (proc, conn) in list(pending.items()):
            if conn in ready:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    message = None
                if message == READY:
                    del pending[rank]
                    continue
                if message is not None:
                    return f"{what} {rank} failed: {message}"
            if conn in ready or proc.sentinel in ready:
                proc.join(timeout=1.0)
                return f"{what} {rank} ended with exit code {proc.exitcode} before it started"
    return None


def close_quietly(*things: Any) -> None:
    """``close()`` each of ``things`` that is not None; a failing close does not hide why the child ends."""
    for thing in things:
        if thing is not None:
            with contextlib.suppress(Exception):
                thing.close()


def ignore_stop_signals() -> None:
    """In the child: SIGINT and SIGTERM are the pod's to act on (Ctrl-C reaches the whole process group).
    (What a forked child inherited is never garbage-collected in it: :mod:`podium.machine` sees to that at
    every fork.)"""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def reap(processes: list[Any], conns: list[Any], timeout: float = 5.0) -> None:
    """In the pod: wait up to ``timeout`` seconds (for all of them together) for the children to end, kill
    the ones that do not, and close the pipes to them."""
    deadline = time.monotonic() + timeout
    for proc in processes:  # children stuck together (in a fusion whose learner 0 failed) cost one timeout
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()
