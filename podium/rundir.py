"""Run directories: the one place that knows every file a pod or a tournament writes.

A **pod's** run directory::

    .podium.lock                   held while a pod is made and runs (:class:`DirLock`)
    spec.yaml                      the spec it was started with
    checkpoints/last.pt            periodic and final checkpoint (networks, optimisers, normalisers, counters)
    checkpoints/best.pt            the best evaluated snapshot
    checkpoints/replay.pt          off-policy pods: the replay buffer, written with last.pt
    checkpoints/snapshots/*.pt     optional snapshots every ``snapshot_every`` seconds of training
    curve.csv, curve.png           evaluation score against env steps and seconds
    metrics.csv, tb/               training scalars (CSV and TensorBoard)
    report.json                    the pod's report, once it finished (tournament pods)
    job.json, pod.pid, pod.log,    the process backend's protocol with a tournament pod's process
    done, error.txt

A **tournament's** run directory::

    tournament.yaml                name, database URL and config (what ``resume`` reads)
    leaderboard.db                 the SQLite database (default; PostgreSQL by URL instead)
    pods/p0001/ ...                each pod's run directory (above)
    pool.csv                       pool size over time and the resources it was sized from
    report.json, progress.png, champion.png

A directory belongs to one run: a new pod refuses a directory that holds another pod's run (unless told
to overwrite it) or a tournament; a new tournament refuses a directory that holds anything of either. While
a pod is made and runs, it holds its directory (:class:`DirLock`): a second pod, in this process or another,
is refused there, whether it would start anew, overwrite or resume.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import weakref
from pathlib import Path

try:  # advisory locks: POSIX only (elsewhere a run directory is not locked)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DirLock", "PodDir", "RunDirError", "TournamentDir", "pod_not_tournament", "safe_name"]


def safe_name(text: str) -> str:
    """``text`` as one directory name: each run of characters other than letters, digits, ``.``, ``_`` and
    ``-`` becomes ``-`` ("my_module:MyEnv-v0", "ALE/Pong-v5")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)


class RunDirError(ValueError):
    """A run directory cannot be used as asked (it holds another run); the message names the choices."""


_HELD: weakref.WeakSet[DirLock] = weakref.WeakSet()  # the locks this process holds


def _drop_inherited_locks() -> None:
    """In a forked child: close the lock descriptors it inherited. A child shares its parent's lock (flock
    belongs to the open file, which a fork shares), so a child outliving a killed pod (an evaluator, a rollout
    worker) kept its directory locked; closing its copy leaves the parent's lock as it was."""
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


class DirLock:
    """An exclusive advisory lock on a run directory, so that two processes never train into one directory.

    The lock is ``flock`` on an empty file in the directory, ``.podium.lock``, opened for writing (as NFS
    needs: Linux emulates ``flock`` there with record locks on the server). The operating system drops it
    when the holder exits, however it ends, so the file left behind is no stale lock. Where the file system
    has no locks, or the platform none (Windows), the directory is not locked.
    """

    FILE = ".podium.lock"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._fd: int | None = None
        self._made_file = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (creating the directory if needed); a no-op when this object holds it already.

        Raises:
            RunDirError: another process (or another pod in this one) holds the lock.
        """
        if self._fd is not None or fcntl is None:
            return
        not_a_file(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / self.FILE
        for _ in range(3):  # again when the file was replaced between our open and our lock (see below)
            self._made_file = not path.exists()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
            except PermissionError:  # made by another user: a read-only descriptor locks it too (not on NFS)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:
                    return
            except OSError:
                return  # not lockable here (a read-only directory, say): go on unlocked, as before locks existed
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunDirError(
                    f"{self.root} is in use: another pod is training into it right now (in another process, "
                    "or a pod of this process that has not finished). Wait for it to finish or stop it, or "
                    "choose another run directory"
                ) from None
            except OSError:
                os.close(fd)
                return
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)  # a refused holder deleted the file we opened and a newcomer may lock its successor
        else:
            return
        self._fd = fd
        _HELD.add(self)

    def release(self, remove: bool = False) -> None:
        """Drop the lock (a no-op when it is not held); ``remove``: delete its file first when this lock made
        it (the holder leaves nothing behind)."""
        _HELD.discard(self)
        if self._fd is not None:
            if remove and self._made_file:
                with contextlib.suppress(OSError):
                    (self.root / self.FILE).unlink()
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the lock

    def __del__(self) -> None:
        self.release()


def pod_not_tournament(path: str | Path) -> str | None:
    """When ``path``, given as a tournament's run directory, is a pod's run directory instead: a message that
    says so and names the commands for it; else None."""
    if TournamentDir(path).holds_tournament() or not PodDir(path).holds_run():
        return None
    return f"{path} holds no tournament; {PodDir(path).describe()}"


def not_a_file(path: Path, option: str = "--run-dir") -> None:
    """Refuse an output directory that is, or lies under, an existing file (before anything is built for it);
    ``option`` names the setting to change.

    Raises:
        RunDirError: naming the file.
    """
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                raise RunDirError(f"{path} cannot be a folder to write in: {folder} is a file; choose another {option}")
            return


class PodDir:
    """Paths of one pod's run directory (nothing is created until something is written)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"PodDir({str(self.root)!r})"

    @classmethod
    def of_checkpoint(cls, checkpoint: str | Path) -> PodDir:
        """The run directory a checkpoint file (``RUN/checkpoints/NAME.pt``) belongs to."""
        return cls(Path(checkpoint).parent.parent)

    # ----------------------------------------------------------------- outputs
    @property
    def spec(self) -> Path:
        return self.root / "spec.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / "last.pt"

    @property
    def best(self) -> Path:
        return self.checkpoints / "best.pt"

    @property
    def replay(self) -> Path:
        return self.checkpoints / "replay.pt"

    @property
    def snapshots(self) -> Path:
        return self.checkpoints / "snapshots"

    def snapshot(self, steps: int) -> Path:
        """The snapshot taken after ``steps`` env steps."""
        return self.snapshots / f"step{steps:012d}.pt"

    def snapshot_files(self) -> list[Path]:
        """Snapshots, oldest first."""
        return sorted(self.snapshots.glob("step*.pt"))

    def checkpoint(self, name: str) -> Path:
        """``best`` or ``last`` (the policy a user loads: best first)."""
        return self.checkpoints / f"{name}.pt"

    @staticmethod
    def exported(checkpoint: Path) -> Path:
        """Where ``podium export`` writes a checkpoint's policy: beside it, with its name (``best.onnx``)."""
        return checkpoint.with_suffix(".onnx")

    def policy_checkpoint(self) -> Path | None:
        """The checkpoint that holds this run's policy: ``best.pt``, else ``last.pt``, else None."""
        for path in (self.best, self.last):
            if path.is_file():
                return path
        return None

    @property
    def curve(self) -> Path:
        return self.root / "curve.csv"

    @property
    def curve_plot(self) -> Path:
        return self.root / "curve.png"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tb"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    # ----------------------------------------------------------------- process protocol (tournament pods)
    @property
    def job(self) -> Path:
        return self.root / "job.json"

    @property
    def pid(self) -> Path:
        """The pod's process as ``PID START`` (its start time in clock ticks after boot; an older podium wrote
        the pid alone), written and read by :mod:`podium.tournament.backends.process`."""
        return self.root / "pod.pid"

    @property
    def log(self) -> Path:
        return self.root / "pod.log"

    @property
    def done(self) -> Path:
        return self.root / "done"

    @property
    def error(self) -> Path:
        return self.root / "error.txt"

    # ----------------------------------------------------------------- ownership
    def tournament(self) -> TournamentDir | None:
        """The tournament this pod belongs to, when its directory is a tournament's ``pods/POD_ID``; else None."""
        short = len(self.root.parts) < 3 or ".." in self.root.parts  # "p0001" inside pods/, "../p0001"
        root = Path(os.path.abspath(self.root)) if short else self.root
        owner = TournamentDir(root.parent.parent)
        return owner if root.parent.name == owner.pods.name and owner.holds_tournament() else None

    def describe(self) -> str:
        """What this pod's run directory is and the commands for it, for a message that was given it where
        something else was expected (a tournament's run directory, a config file)."""
        path = shlex.quote(str(self.root))
        owner = self.tournament()
        if owner is not None:
            board = shlex.quote(str(owner.root))
            return (
                f"{self.root} is pod {self.root.name} of the tournament in {owner.root}: see it ranked with "
                f"'podium leaderboard {board}', or evaluate it with 'podium eval {path}'"
            )
        return (
            f"{self.root} is a single pod's run directory (podium train): evaluate its policy with "
            f"'podium eval {path}', or continue it with 'podium train --resume {path}' (its learning curve is "
            f"{self.curve})"
        )

    def _run_files(self) -> list[Path]:
        """The files a pod's run writes here, and the only ones ``--overwrite`` deletes: its spec, checkpoints,
        snapshots and their ONNX exports, learning curve, metrics, TensorBoard events and report (the protocol
        files of a tournament pod are not a run)."""
        checkpoints = [self.last, self.best, *self.snapshot_files()]
        return [
            self.spec, *checkpoints, self.replay, *(self.exported(c) for c in checkpoints), self.curve,
            self.curve_plot, self.metrics, self.report, *sorted(self.tensorboard.glob("events.out.tfevents.*")),
        ]  # fmt: skip

    def holds_run(self) -> bool:
        """Whether a pod has run (or started to run) here: its ``spec.yaml`` or a checkpoint of its own (a
        ``checkpoints/`` or ``tb/`` folder of another tool is not a run)."""
        return any(p.is_file() for p in (self.spec, self.last, self.best))

    def claim(self, overwrite: bool = False) -> bool:
        """Make sure a *new* pod may write here; True when a previous run's outputs must be deleted first
        (``overwrite``). Nothing is deleted here: the caller clears (:meth:`clear`) once everything else about
        the new run has been checked, so a mistake in it loses nothing.

        Raises:
            RunDirError: the directory holds a tournament, or another pod's run and ``overwrite`` is off.
        """
        if TournamentDir(self.root).holds_tournament():
            raise RunDirError(
                f"{self.root} holds a tournament; a pod never writes into it. Choose another run directory "
                f"(the tournament's pods are in {TournamentDir(self.root).pods})"
            )
        if not self.holds_run():
            return False
        if not overwrite and not self.last.is_file():
            raise RunDirError(
                f"{self.root} holds a run without a checkpoint (it stopped before its first one), so there is "
                "nothing to resume. Choose another --run-dir, or pass --overwrite (Python: overwrite=True) to "
                "delete it first"
            )
        if not overwrite:
            raise RunDirError(
                f"{self.root} already holds a run. Continue it (podium train --resume {shlex.quote(str(self.root))}; "
                "Python: podium.train(resume=...)), choose another --run-dir, or pass --overwrite "
                "(Python: overwrite=True) to delete that run first"
            )
        return True

    def clear(self) -> None:
        """Delete a previous run's files; other files, also in ``checkpoints/`` and ``tb/``, are left alone (and
        so are those folders when they hold any)."""
        for path in self._run_files():
            path.unlink(missing_ok=True)
        for folder in (self.snapshots, self.checkpoints, self.tensorboard):
            with contextlib.suppress(OSError):  # not empty (or absent): it stays
                folder.rmdir()

    def clear_protocol(self) -> None:
        """Delete the process protocol's result files before a new job runs here."""
        for path in (self.report, self.error, self.done, self.pid):
            path.unlink(missing_ok=True)


class TournamentDir:
    """Paths of one tournament's run directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"TournamentDir({str(self.root)!r})"

    @property
    def meta(self) -> Path:
        return self.root / "tournament.yaml"

    @property
    def database(self) -> Path:
        return self.root / "leaderboard.db"

    def database_files(self) -> list[Path]:
        """The SQLite file and its journal files."""
        return sorted(self.root.glob(f"{self.database.name}*"))

    @property
    def pods(self) -> Path:
        return self.root / "pods"

    def pod(self, pod_id: str) -> PodDir:
        return PodDir(self.pods / pod_id)

    def local(self, recorded: str | Path, pod_id: str) -> Path:
        """A path the leaderboard recorded for pod ``pod_id`` (its run directory, a checkpoint in it), in
        *this* tournament directory: the database holds absolute paths, and the directory may have been moved
        or copied since (out of a cluster, to another machine). A path outside a ``pods/POD_ID`` folder stays
        as recorded."""
        parts = Path(recorded).parts
        for i in range(len(parts) - 1, 0, -1):
            if parts[i] == pod_id and parts[i - 1] == self.pods.name:
                return self.pod(pod_id).root.joinpath(*parts[i + 1 :])
        return Path(recorded)

    def pod_dirs(self) -> list[PodDir]:
        """Every pod directory, in pod order."""
        return [PodDir(p) for p in sorted(self.pods.glob("*")) if p.is_dir()]

    @property
    def pool(self) -> Path:
        return self.root / "pool.csv"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    @property
    def progress_plot(self) -> Path:
        return self.root / "progress.png"

    @property
    def champion_plot(self) -> Path:
        return self.root / "champion.png"

    def exported(self, top_k: int) -> Path:
        """Where ``podium export`` writes the leaderboard's best policy (``top_k`` 1) or its top-k ensemble."""
        return self.root / ("champion.onnx" if top_k == 1 else f"top{top_k}.onnx")

    def holds_tournament(self) -> bool:
        return self.meta.is_file()

    def describe(self) -> str:
        """What this tournament's run directory is and the commands for it (see :meth:`PodDir.describe`)."""
        path = shlex.quote(str(self.root))
        return (
            f"{self.root} is a tournament's run directory: continue it with 'podium tournament resume {path}', "
            f"or see its leaderboard with 'podium leaderboard {path}'"
        )

    def claim(self) -> None:
        """Make sure a *new* tournament may write here.

        Raises:
            RunDirError: the directory holds a tournament or a pod's run.
        """
        not_a_file(self.root)
        if self.holds_tournament():
            raise RunDirError(
                f"{self.root} already holds a tournament; continue it with 'podium tournament resume {self.root}' "
                "or choose another --run-dir"
            )
        if PodDir(self.root).holds_run():
            raise RunDirError(
                f"{self.root} holds a pod's run (podium train); a tournament never writes into it. "
                "Choose another --run-dir"
            )
