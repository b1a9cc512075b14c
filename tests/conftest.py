"""Fixtures shared by test files of different areas."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the tests even when the suite was started with SIGINT ignored (``nohup``, a shell's
    background job, some CI runners): the tests that press Ctrl-C on a pod, in this process or in a child it
    starts, would otherwise see nothing happen and fail. A child inherits an ignored signal, not a handler, so
    this also gives the children the default Ctrl-C."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config, "workerinput"):
        # a pytest-xdist worker (``make test`` runs two) starts with COLUMNS=80, and rich's console, built when
        # podium.cli is imported, keeps a COLUMNS it finds then: the tests that widen the output for one command
        # (``env={"COLUMNS": ...}``) would get wrapped tables
        os.environ.pop("COLUMNS", None)


@pytest.fixture(autouse=True)
def no_child_process_left() -> Iterator[None]:
    """A test that leaves a multiprocessing child running (an env subprocess, a pod's evaluator or learner)
    fails itself, and the child is ended: left running, it failed every later test that checks that none is
    (a flaky test once failed seven others that way)."""
    yield
    left = multiprocessing.active_children()
    for child in left:  # a child on its way out (a close that just returned) gets a moment
        child.join(timeout=5)
    alive = [child for child in left if child.is_alive()]
    names = ", ".join(f"{child.name} (pid {child.pid})" for child in alive)
    for child in alive:
        child.kill()
        child.join(timeout=5)
    if alive:
        pytest.fail(f"the test left {len(alive)} child process(es) running: {names}", pytrace=False)


@pytest.fixture(autouse=True)
def no_run_left_in_the_checkout() -> Iterator[None]:
    """A test gives every pod a run directory under its ``tmp_path``: a pod without one writes to
    ``runs/ENV-ALGO-seedS-TIMESTAMP`` in the current directory, the checkout, where a run of the suite left
    a pair of them each time."""
    runs = Path("runs")
    before = set(runs.iterdir()) if runs.is_dir() else set()
    yield
    new = sorted(str(p) for p in (set(runs.iterdir()) if runs.is_dir() else set()) - before)
    if new:
        pytest.fail(f"the test wrote run directories into the checkout: {', '.join(new)}", pytrace=False)


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
