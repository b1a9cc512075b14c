"""Run logging: TensorBoard scalars, a CSV of the same scalars, the learning curve (CSV + PNG)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from podium.rundir import PodDir

__all__ = ["CurveWriter", "ScalarLogger", "figure", "plot_curve", "read_curve", "save_figure"]

CURVE_FIELDS = ["step", "wall_time", "eval_mean", "eval_std", "eval_episodes", "best_mean", "confirm_mean", "scored_at"]
"""Columns of ``curve.csv``: the snapshot's env steps and seconds of training, its routine evaluation
(mean, std, episodes), the best score so far, the confirmation's mean (empty if none ran) and when the
score arrived (seconds of training; the evaluator scores beside training)."""
_INT_FIELDS = ("step", "eval_episodes")


class ScalarLogger:
    """Writes scalars to TensorBoard (``tb/``) and to ``metrics.csv`` with conventional names
    (``charts/episodic_return``, ``charts/SPS``, ``loss/policy`` ...)."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_at: int | None = None) -> None:
        """``resume_at``: the env steps of the checkpoint a resumed run goes on from; what an earlier leg logged
        after it (it was killed before its next checkpoint) is dropped, from ``metrics.csv`` and TensorBoard,
        so each step is logged once."""
        self.path = PodDir(run_dir).metrics
        self._writer = None
        if resume_at is not None and self.path.exists():
            _keep_until(self.path, resume_at)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_at is None else resume_at + 1  # TensorBoard hides its events from that step on
            self._writer = SummaryWriter(str(PodDir(run_dir).tensorboard), purge_step=purge)
        self._file = self.path.open("a", newline="")
        self._csv = csv.writer(self._file)
        if self.path.stat().st_size == 0:
            self._csv.writerow(["step", "name", "value"])

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            self._csv.writerow([step, name, f"{float(value):.6g}"])
            if self._writer is not None:
                self._writer.add_scalar(name, float(value), step)
        self._file.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._file.close()


def _keep_until(path: Path, step: int) -> None:
    """Rewrite ``metrics.csv`` with its rows up to ``step`` (and without a last line cut short by a crash)."""
    text = path.read_text()
    lines = text[: text.rfind("\n") + 1].splitlines(keepends=True)
    kept = lines[:1] + [line for line in lines[1:] if _step_of(line) is not None and _step_of(line) <= step]
    if len(kept) != len(lines) or not text.endswith("\n"):
        tmp = path.with_suffix(".csv.tmp")
        tmp.write_text("".join(kept))
        tmp.replace(path)


def _step_of(line: str) -> int | None:
    try:
        return int(line.split(",", 1)[0])
    except ValueError:
        return None


def read_curve(path: Path) -> list[dict[str, Any]]:
    """The rows of a learning curve file (``curve.csv``), oldest first; none if it does not exist. A row cut
    short by a crash (its last line) is skipped."""
    rows: list[dict[str, Any]] = []
    if path.exists():
        text = path.read_text()
        if not text.endswith("\n"):  # a last line cut short (a crash, or a write going on right now)
            text = text[: text.rfind("\n") + 1]
        for row in csv.DictReader(io.StringIO(text)):
            try:
                rows.append({k: _parse(k, row.get(k)) for k in CURVE_FIELDS})
            except ValueError:  # a damaged line
                continue
    return [r for r in rows if r["step"] is not None and r["eval_mean"] is not None]


class CurveWriter:
    """The learning curve: one row per evaluation (score vs env steps and vs wall-clock seconds).

    Rows are appended (a pod that evaluates continuously writes thousands); a row cut short by a crash is
    skipped when the curve is read back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = read_curve(path)

    def truncate_after(self, step: int) -> None:
        """Keep only the rows up to ``step`` (a resumed run drops what came after its checkpoint), rewritten
        atomically; later rows are appended."""
        self.rows = [r for r in self.rows if r["step"] <= step]
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CURVE_FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(self.path)

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=CURVE_FIELDS).writerow(row)


def _parse(name: str, text: str | None) -> int | float | None:
    """A curve cell: int or float, None for an empty cell or a column an older curve lacks."""
    if text is None or text == "":
        return None
    return int(text) if name in _INT_FIELDS else float(text)


def figure(width: float, height: float, rows: int = 1, cols: int = 1) -> tuple[Any, list[Any]]:
    """A matplotlib figure of ``rows`` x ``cols`` axes (inches; constrained layout) drawn by the Agg canvas, and
    its axes row by row. No pyplot: a caller's backend (a notebook's inline one) stays as it was, and nothing is
    left in pyplot's figure registry."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(fig.subplots(rows, cols, squeeze=False).ravel())


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` as a PNG to ``path`` atomically: a reader (the dashboard, a user's viewer) never sees half
    a file, and a process stopped while drawing leaves the previous plot."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=110, format="png")
    tmp.replace(path)


def plot_curve(rows: list[dict[str, Any]], path: Path, title: str, target: float | None = None) -> None:
    """Draw evaluation mean ± std against env steps and against wall-clock seconds into ``path`` (PNG)."""
    if not rows:
        return
    fig, axes = figure(10, 3.6, cols=2)
    mean = [r["eval_mean"] for r in rows]
    std = [r["eval_std"] for r in rows]
    for ax, key, label in ((axes[0], "step", "env steps"), (axes[1], "wall_time", "wall-clock seconds")):
        x = [r[key] for r in rows]
        ax.plot(x, mean, marker="o", markersize=3)
        ax.fill_between(
            x,
            [m - s for m, s in zip(mean, std, strict=True)],
            [m + s for m, s in zip(mean, std, strict=True)],
            alpha=0.25,
        )
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
            ax.legend(loc="lower right")
        ax.set_xlabel(label)
        ax.set_ylabel("evaluation return")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    save_figure(fig, path)
