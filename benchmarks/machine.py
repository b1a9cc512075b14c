"""The one description of the machine a benchmark ran on, printed at the top of every script's output.

Figures from two VMs of the same size but different CPUs differ by 2-3x (BENCHMARKS.md), so every result
names the CPU model, the cores the run may use, Python, torch and, where there is one, the GPU. The
scripts import it as ``from machine import describe`` (they run as ``python benchmarks/NAME.py``, which
puts this folder first on ``sys.path``).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["cores", "cpu_model", "describe"]


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    """The cores this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def describe(gpu: bool = True) -> str:
    """``CPU model, N cores (of M), arch, Python x.y.z, torch V[, GPU name]`` (``gpu``: name the first CUDA
    device when there is one; importing torch is left to the caller's choice of when)."""
    import torch

    total = os.cpu_count() or cores()
    text = (
        f"{cpu_model()}, {cores()} cores (of {total}), {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )
    if gpu and torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text
