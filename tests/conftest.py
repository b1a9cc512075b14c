"""Fixtures shared by test files of different areas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def small_tournament(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Runs a finished tournament of tiny CartPole pods (1,024 steps each, inline backend, one at a time,
    a leaderboard of 3) and returns its run directory: ``small_tournament(name, algos, pods, eval_every)``."""

    def make(name: str, algos: dict[str, int], pods: int, eval_every: int) -> Path:
        from podium.tournament import tournament

        path = tmp_path_factory.mktemp(name) / "run"
        pod = {"steps": 1024, "eval_every": eval_every, "eval_episodes": 4, "tensorboard": False, "num_envs": 16}
        tournament(
            run_dir=path,
            progress=False,
            env="CartPole-v1",
            algos=algos,
            pod=pod,
            backend="inline",
            steps=pods * 1024,
            target=500.0,
            leaderboard_size=3,
            pool={"max": 1},
        )
        return path

    return make
