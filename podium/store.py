"""Checkpoints: written atomically, read without unpickling arbitrary objects.

A checkpoint is one file holding plain containers of tensors and numbers (``torch.save``), read
back with ``torch.load(weights_only=True)``, so a checkpoint from the internet cannot run code.
``torch.save`` writes a zip archive with a CRC-32 per entry, which ``torch.load`` does not check: a
checkpoint is checked against them before it is read, so flipped bytes (a bad disk, a broken copy)
are refused instead of loading as silently wrong weights.
Writes go to a temporary file in the same directory, are flushed to disk, then renamed over the
target: a process killed mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "load_checkpoint",
    "partial_file",
    "remove_partial_writes",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = "podium-checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, or not a podium checkpoint."""


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Atomically write ``payload`` (nested dicts/lists of tensors, numbers, strings) to ``path``: into a
    temporary file beside it (``.NAME.XXXX.tmp``), then renamed over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_PARTIAL = ".tmp"


def _umask() -> int:
    """This process's umask, read without changing it where Linux tells it (threads may be creating files)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mkstemp(path: Path) -> tuple[int, str]:
    """A temporary file beside ``path``, with the permissions ``open`` would give it (``mkstemp`` makes it
    0600, so checkpoints could not be read by a colleague or a serving container of another user)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_PARTIAL, dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, tmp


def partial_file(path: str | Path) -> Path:
    """A new empty file beside ``path`` (``.NAME.XXXX.tmp``) for a write that is renamed over ``path`` once
    complete; :func:`remove_partial_writes` finds those that a killed write left."""
    fd, tmp = _mkstemp(Path(path))
    os.close(fd)
    return Path(tmp)


def remove_partial_writes(directory: str | Path) -> list[Path]:
    """Delete the temporary files that writes killed mid-way (SIGKILL, power loss) left in ``directory``
    (a replay buffer's can be gigabytes); returns them. Only while nothing else writes there."""
    found = [p for p in Path(directory).glob(f".*{_PARTIAL}") if p.is_file()]
    for path in found:
        path.unlink(missing_ok=True)
    return found


def _check_crcs(path: Path) -> None:
    """Read every entry of the zip archive ``torch.save`` wrote, so that one whose bytes no longer match its
    CRC-32 raises ``zipfile.BadZipFile`` (entries stored without one, CRC 0, are read unchecked; a file that
    is not a zip archive is left to ``torch.load`` to judge)."""
    if not zipfile.is_zipfile(path):
        return
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.CRC == 0:
                continue
            with archive.open(info) as entry:  # ZipExtFile checks the CRC-32 as the last byte is read
                while entry.read(1 << 22):
                    pass


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Raises:
        CheckpointError: the file does not exist, is truncated/corrupt, or is not a podium checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        _check_crcs(path)
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for damaged files
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a podium checkpoint ({type(exc).__name__}: {exc}). "
            "If a run was killed while writing, use the other checkpoint in the same folder (best.pt / last.pt)."
        ) from exc
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} is not a podium checkpoint (it holds a {type(payload).__name__})")
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a podium checkpoint (format {payload.get('format')!r})")
    return payload
