"""The plumbing of a pod's forked children (extra learners, rollout workers): how a child ignores the stop
signals, reports a failure and lets go of what it holds before ``os._exit``, and how the pod reaps them."""

from __future__ import annotations

import contextlib
import signal
from typing import Any


def report_failure(conn: Any, exc: BaseException) -> None:
    """Send ``exc`` to the pod as one line (``"TypeName: message"``), if the pipe is still there."""
    with contextlib.suppress(BrokenPipeError, OSError):
        conn.send(f"{type(exc).__name__}: {exc}")


def close_quietly(*things: Any) -> None:
    """``close()`` each of ``things`` that is not None; a failing close does not hide why the child ends."""
    for thing in things:
        if thing is not None:
            with contextlib.suppress(Exception):
                thing.close()


def ignore_stop_signals() -> None:
    """In the child: SIGINT and SIGTERM are the pod's to act on (Ctrl-C reaches the whole process group)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def reap(processes: list[Any], conns: list[Any], timeout: float = 5.0) -> None:
    """In the pod: wait up to ``timeout`` seconds for each child to end, kill the ones that do not, and
    close the pipes to them."""
    for proc in processes:
        proc.join(timeout=timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()
