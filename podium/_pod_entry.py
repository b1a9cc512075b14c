"""Entry point of a tournament's pod process: ``python -m podium._pod_entry POD_RUN_DIR`` (the process backend
starts it; :mod:`podium.tournament.backends.process` runs the job).

It takes SIGTERM over before anything heavy is imported. torch, the pod and the tournament package take
seconds to import, and a pod process stopped in that time must still leave ``done`` (128 + the signal) in
its run directory: an orchestrator that adopted the pod gets no exit status, and without ``done`` it could
not tell a pod stopped from outside (which resumes) from one that failed. So this module imports only the
standard library and :mod:`podium.rundir` before the handler is in place.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["Terminated", "main"]


class Terminated(SystemExit):
    """SIGTERM while no pod handles it (while importing, before a pod trains, between jobs): the process exits
    with 143."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str]) -> int:
    """Run the pod process for the run directory ``argv[1]``; returns its exit code."""
    signal.signal(signal.SIGTERM, _terminate)  # exit cleanly, with 143 (checkpoints are atomic anyway)
    run_dir = argv[1]
    try:
        from podium.tournament.backends.process import main as run_pods
    except Terminated:  # stopped while importing: no job ran, and none will
        from podium.rundir import PodDir

        PodDir(run_dir).done.write_text(str(128 + signal.SIGTERM))
        return 128 + signal.SIGTERM
    return run_pods(run_dir)


if __name__ == "__main__":
    # through the importable module: the process backend catches *its* Terminated, not a copy made for __main__
    from podium._pod_entry import main as _main

    sys.exit(_main(sys.argv))
