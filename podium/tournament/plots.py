"""Plots of a finished tournament: every result over time (``progress.png``) and the champion's
lineage as one learning curve (``champion.png``)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from podium.logging import figure, save_figure
from podium.rundir import PodDir

__all__ = ["plot_champion", "plot_progress"]


def plot_progress(history: list[dict[str, Any]], path: Path, target: float | None = None) -> None:
    """Each pod's score when it reported (one colour per algorithm) and the leaderboard's best so far,
    against tournament wall-clock seconds."""
    scored = [h for h in history if h["score_mean"] is not None]
    if not scored:
        return
    fig, (ax,) = figure(7, 4)
    for algo in sorted({h["algo"] for h in scored}):
        rows = [h for h in scored if h["algo"] == algo]
        ax.scatter([h["elapsed"] for h in rows], [h["score_mean"] for h in rows], s=14, label=algo, alpha=0.8)
    best, xs, ys = -float("inf"), [], []
    for h in scored:
        best = max(best, h["score_mean"])
        xs.append(h["elapsed"])
        ys.append(best)
    ax.step(xs, ys, where="post", color="black", linewidth=1.2, label="leaderboard best")
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("tournament wall-clock seconds")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, path)


def plot_champion(lineage: list[dict[str, Any]], path: Path, target: float | None = None) -> None:
    """The champion's training history: the evaluation curves of its ancestors and itself, end to end
    along cumulative env steps (``lineage`` is champion first, as :meth:`Leaderboard.lineage` gives)."""
    if not lineage:
        return
    fig, (ax,) = figure(7, 4)
    offset = 0
    for pod in reversed(lineage):
        try:
            rows = list(csv.DictReader(PodDir(pod["run_dir"]).curve.open()))
        except FileNotFoundError:
            rows = []
        if rows:
            steps = [offset + float(r["step"]) for r in rows]
            ax.plot(
                steps,
                [float(r["eval_mean"]) for r in rows],
                marker="o",
                markersize=3,
                label=f"{pod['id']} ({pod['algo']})",
            )
        offset += int(pod["steps"] or 0)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("env steps along the lineage")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"champion {lineage[0]['id']} and its ancestors")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # (no curve and no target: nothing to name)
        ax.legend(loc="lower right", fontsize=8)
    save_figure(fig, path)
