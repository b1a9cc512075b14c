"""The PNGs a run leaves (a pod's curve, a tournament's progress and champion) draw on matplotlib's Agg canvas
without pyplot: a user's backend stays as it was."""

from __future__ import annotations

import subprocess
import sys

PLOTS = """
import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")  # a user's choice (a notebook's inline backend): drawing a run's plots must keep it
from podium.logging import plot_curve
from podium.tournament.plots import plot_champion, plot_progress

out = Path(sys.argv[1])
rows = [{"step": 1000 * i, "wall_time": 0.5 * i, "eval_mean": -900.0 + 100 * i, "eval_std": 40.0} for i in range(5)]
plot_curve(rows, out / "curve.png", "ppo on Pendulum-v1 (seed 0)", target=-200)
scores = [("ppo", 3, -700), ("sac", 5, -300), ("ppo", 9, -180)]
history = [{"algo": a, "elapsed": t, "score_mean": s} for a, t, s in scores]
plot_progress(history, out / "progress.png", target=-200)
plot_champion([{"id": "p0001", "algo": "sac", "run_dir": str(out / "missing"), "steps": 5000}], out / "champion.png")
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
assert "matplotlib.pyplot" not in sys.modules, "pyplot was imported"
"""


def test_a_runs_plots_keep_the_users_matplotlib_backend(tmp_path):
    done = subprocess.run([sys.executable, "-c", PLOTS, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in ("curve.png", "progress.png", "champion.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_a_pod_told_not_to_plot_leaves_its_curve_to_the_caller(tmp_path):
    """``Pod.run(plot=False)`` (a tournament's pod process) draws no ``curve.png``; ``Pod.plot`` then draws it
    from ``curve.csv``, and a figure is written whole or not at all (no ``.tmp`` left beside it)."""
    from podium.config import PodSpec
    from podium.pod import Pod

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1024, num_envs=8, eval_episodes=4, tensorboard=False)
    pod = Pod(spec, tmp_path)
    pod.run(plot=False)
    assert (tmp_path / "curve.csv").is_file() and not (tmp_path / "curve.png").exists()
    pod.plot()
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
    assert not list(tmp_path.glob("*.tmp"))
