"""The orchestrator on the inline backend: leaderboard, lineage, pruning, elastic pool, failure limits."""

from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path

import pytest

from podium.config import ConfigError
from podium.envs import register, registry
from podium.envs.classic.cartpole import CartPoleVecEnv
from podium.tournament import leaderboard, load_tournament_config, resume_tournament, tournament
from podium.tournament.backends import Resources
from podium.tournament.backends.inline import InlineBackend
from podium.tournament.leaderboard import Leaderboard
from podium.tournament.orchestrator import Orchestrator, open_leaderboard

# tiny CartPole pods: 2,048 steps each, evaluated once at the end
POD = {"steps": 2048, "eval_every": 2048, "eval_episodes": 4, "tensorboard": False, "num_envs": 16}


def _config(**fields):
    return {"env": "CartPole-v1", "algos": {"ppo": 1}, "pod": POD, "backend": "inline", **fields}


def test_an_inline_tournament_fills_the_leaderboard_with_lineage_and_prunes_checkpoints(tmp_path):
    report = tournament(
        run_dir=tmp_path / "run",
        progress=False,
        steps=12 * 2048,
        leaderboard_size=3,
        algos={"ppo": 1, "dqn": 1},
        generator={"scheme": "leaderboard", "explore": 0.0},
        pool={"max": 2},
        **{k: v for k, v in _config().items() if k != "algos"},
    )
    assert report.stop_reason == "steps" and report.total_steps >= 12 * 2048
    entries = leaderboard(tmp_path / "run")
    assert len(entries) == 3 and entries == report.entries
    assert [e.rank for e in entries] == [1, 2, 3]
    means = [e.score_mean for e in entries]
    assert means == sorted(means, reverse=True)
    board = open_leaderboard(tmp_path / "run")
    pods = board.pods()
    assert {p.algo for p in pods} == {"ppo", "dqn"} and len(pods) >= 12
    assert sum(p.parent_id is not None for p in pods) >= 8  # explore 0: children once each algo has an entry
    child = next(p for p in pods if p.parent_id is not None)
    assert child.algo == board.pod(child.parent_id).algo  # a child inherits its parent's algorithm
    assert child.total_steps == board.pod(child.parent_id).total_steps + child.steps
    # every result is in the history; only the leaderboard's checkpoints (and those still needed) remain
    assert len(board.history()) == len([p for p in pods if p.status in ("finished", "failed")])
    on_board = {e.checkpoint for e in entries}
    for p in pods:
        if p.status == "finished":
            best = Path(p.run_dir) / "checkpoints" / "best.pt"
            assert best.exists() == (str(best) in on_board), p.id
            assert (Path(p.run_dir) / "curve.csv").exists()
    champion = report.champion
    assert report.lineage[0]["id"] == champion.pod_id
    assert [p["id"] for p in report.lineage] == [p.id for p in board.lineage(champion.pod_id)]
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["champion"]["pod_id"] == champion.pod_id
    assert (tmp_path / "run" / "progress.png").stat().st_size > 0 and (tmp_path / "run" / "champion.png").exists()
    board.close()


def test_the_tournament_stops_at_the_target_and_records_the_time(tmp_path):
    report = tournament(
        run_dir=tmp_path / "run", progress=False, target=30.0, seconds=120, **_config(pod={**POD, "steps": 8192})
    )
    assert report.stop_reason == "target" and report.reached_target
    assert report.champion.score_mean >= 30.0 and 0 < report.time_to_target <= report.elapsed


def test_the_pool_grows_and_shrinks_with_the_reported_resources(tmp_path):
    cpus = iter([1, 1, 3, 3, 3, 3, 2, 2, 2, 1] + [1] * 1000)  # read once per loop turn
    backend = InlineBackend(resources=lambda: Resources(cpus=next(cpus)))
    config = _config(steps=16 * 2048, pool={"min": 1, "max": 4})
    from podium.tournament import load_tournament_config

    orch = Orchestrator.start(load_tournament_config(None, **config), run_dir=tmp_path / "run", backend=backend)
    orch.run()
    rows = list(csv.DictReader((tmp_path / "run" / "pool.csv").open()))
    sizes = [int(r["pool_size"]) for r in rows]
    assert sizes == [1, 3, 2, 1]
    assert [float(r["cpus"]) for r in rows] == [1, 3, 2, 1]
    history = Leaderboard(orch.board.url, orch.board.name)
    events = [p.status for p in history.pods()]
    assert "finished" in events


def test_a_step_budget_is_not_overrun_by_rounds_started_on_every_free_slot(tmp_path):
    """With eight slots, 1,024-step pods and a budget of 2,000 steps, every slot started a full round: nine pods
    and 9,216 steps. Now the pods hold the budget between them, the last round capped at the steps left."""
    from podium.tournament import load_tournament_config

    backend = InlineBackend(resources=lambda: Resources(cpus=8))
    config = _config(steps=2000, pool={"min": 1, "max": 8}, pod={**POD, "steps": 1024})
    orch = Orchestrator.start(load_tournament_config(None, **config), run_dir=tmp_path / "run", backend=backend)
    report = orch.run()
    pods = orch.board.pods()
    assert report.stop_reason == "steps" and len(pods) == 2
    assert sorted(int(p.spec["steps"]) for p in pods) == [976, 1024] and report.total_steps <= 2048


def test_a_step_budget_with_rounds_bound_by_time_still_fills_the_pool(tmp_path):
    """With a step budget and pods bound by seconds, the first new pod's round was capped at every step left,
    which counted as committed: the other slots never started, so a pool of four ran one pod at a time."""
    from podium.tournament import load_tournament_config
    from podium.tournament.backends import Backend

    class Hold(Backend):  # takes pods and never ends them; the third poll is a Ctrl-C
        name, new_processes = "hold", False

        def __init__(self) -> None:
            self.jobs: list = []
            self.polls = 0

        def resources(self) -> Resources:
            return Resources(cpus=4)

        def submit(self, job) -> str:
            self.jobs.append(job)
            return f"hold:{job.pod_id}"

        def poll(self, timeout=None) -> list:
            self.polls += 1
            if self.polls == 3:
                raise KeyboardInterrupt
            return []

        def cancel(self, pod_id: str) -> None:
            pass

    pod = {k: v for k, v in POD.items() if k not in ("steps", "eval_every")}
    config = load_tournament_config(None, **_config(steps=1_000_001, pool={"max": 4}, pod={**pod, "seconds": 5}))
    backend = Hold()
    orch = Orchestrator.start(config, run_dir=tmp_path / "run", backend=backend, progress=False)
    orch.run()
    assert len(backend.jobs) == 4
    steps = sorted(int(p.spec["steps"]) for p in open_leaderboard(tmp_path / "run").pods())
    assert steps == [250_000, 250_000, 250_000, 250_001]


def test_a_pod_that_ended_while_still_recorded_as_queued_is_collected_on_resume(tmp_path, monkeypatch):
    """An orchestrator that died after starting a pod and before recording it as running left it queued; when
    the pod then ran to its end, resume ignored its report (only running pods were collected), marked it
    preempted and ran it again, or lost its result when the budget was spent."""
    from podium.tournament import load_tournament_config
    from podium.tournament.backends import run_job

    class Died(BaseException):
        pass

    class RunsAtOnce(InlineBackend):  # the pod runs to its end as it is submitted
        def submit(self, job):
            run_job(job)
            return f"inline:{job.pod_id}"

    record = Leaderboard.update_pod

    def dies_when_marked_running(self, pod_id, **fields):
        if fields.get("status") == "running":
            raise Died
        return record(self, pod_id, **fields)

    config = load_tournament_config(None, **_config(steps=2048, pool={"max": 1}))
    orch = Orchestrator.start(config, run_dir=tmp_path / "run", backend=RunsAtOnce(), progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(Leaderboard, "update_pod", dies_when_marked_running)
        with pytest.raises(Died):
            orch.run()
    board = open_leaderboard(tmp_path / "run")
    (pod,) = board.pods()
    assert pod.status == "queued" and (Path(pod.run_dir) / "report.json").exists()
    board.close()
    report = resume_tournament(tmp_path / "run", progress=False)
    board = open_leaderboard(tmp_path / "run")
    assert [(p.id, p.status, p.attempts) for p in board.pods()] == [(pod.id, "finished", 1)]  # not run again
    assert report.stop_reason == "steps" and [e.pod_id for e in report.entries] == [pod.id]
    assert [h["outcome"] for h in board.history()] == ["entered"]
    board.close()


def test_min_and_max_clamp_the_pool(tmp_path):
    from podium.tournament import load_tournament_config

    config = load_tournament_config(None, **_config(steps=2048, pool={"min": 2, "max": 3, "cpus_per_pod": 2}))
    orch = Orchestrator.start(config, run_dir=tmp_path / "run", backend=InlineBackend(Resources(cpus=1)))
    assert orch.pool_size(Resources(cpus=1)) == 2  # min wins on a small machine
    assert orch.pool_size(Resources(cpus=7)) == 3
    assert orch.pool_size(Resources(cpus=64)) == 3
    gpu = load_tournament_config(None, **_config(steps=2048, pool={"max": 8, "gpus_per_pod": 0.5}))
    orch_gpu = Orchestrator.start(gpu, run_dir=tmp_path / "gpu", backend=InlineBackend(Resources(cpus=1)))
    assert orch_gpu.pool_size(Resources(cpus=16, gpus=1)) == 2  # two pods share the one GPU


class _CrashingCartPole(CartPoleVecEnv):
    """Builds for the preflight check (one env) and crashes in a pod (many envs): a pod that fails at start."""

    def __init__(self, num_envs: int = 1, **kwargs):
        if num_envs > 1:
            raise RuntimeError("simulated crash at start")
        super().__init__(num_envs, **kwargs)


def test_pods_that_crash_at_start_stop_the_tournament_with_the_reason(tmp_path):
    register("CrashAtStart-v0", _CrashingCartPole, description="test only")
    try:
        report = tournament(
            run_dir=tmp_path / "run", progress=False, seconds=300, max_failures=3, **_config(env="CrashAtStart-v0")
        )
    finally:
        registry.pop("CrashAtStart-v0")
    assert report.stop_reason == "failures" and report.pods_failed == 3
    assert "3 pods failed in a row" in report.message and "simulated crash at start" in report.message
    board = open_leaderboard(tmp_path / "run")
    assert [h["outcome"] for h in board.history()] == ["failed"] * 3
    assert "simulated crash at start" in (Path(board.pods()[0].run_dir) / "error.txt").read_text()


def test_a_pod_whose_score_is_not_a_number_fails_and_the_tournament_goes_on(tmp_path, monkeypatch):
    """SQLite stores NaN as NULL, so offering a NaN score to the leaderboard crashed the orchestrator, and again
    on every resume (the pod stayed "running" with its report)."""
    import dataclasses

    import podium.tournament.backends.inline as inline

    real = inline.run_job
    runs = []

    def diverging(job):
        report = real(job)
        runs.append(job.pod_id)
        if len(runs) == 1:  # the first pod's score is NaN, as after a diverged policy
            return dataclasses.replace(report, score_mean=math.nan, selection_mean=math.nan)
        return report

    monkeypatch.setattr(inline, "run_job", diverging)
    report = tournament(run_dir=tmp_path / "run", progress=False, steps=3 * 2048, **_config())
    assert report.stop_reason == "steps" and report.pods_failed == 1
    board = open_leaderboard(tmp_path / "run")
    first = board.pod(runs[0])
    assert first.status == "failed" and "not a finite number" in first.error
    assert board.entries() and all(math.isfinite(e.score_mean) for e in board.entries())
    assert board.history()[0]["outcome"] == "failed"


def test_resume_extends_a_finished_tournament_and_keeps_its_leaderboard(
    tmp_path, board_from_history, assert_steps_counted_once
):
    """Entries stay unless better results displace them (as the history shows); steps are counted exactly once."""
    first = tournament(run_dir=tmp_path / "run", progress=False, steps=3 * 2048, leaderboard_size=2, **_config())
    board = open_leaderboard(tmp_path / "run")
    history_before, pods_before = board.history(), board.pods()
    assert_steps_counted_once(board, first.total_steps)
    board.close()
    second = resume_tournament(tmp_path / "run", progress=False, steps=6 * 2048)
    board = open_leaderboard(tmp_path / "run")
    history = board.history()
    assert history[: len(history_before)] == history_before and len(history) > len(history_before)
    after = [(e.pod_id, e.score_mean) for e in second.entries]
    assert after == board_from_history(history, 2)  # nothing vanished; displaced entries lost to better ones
    for entry in first.entries:
        kept = next((e for e in second.entries if e.pod_id == entry.pod_id), None)
        if kept is None:
            assert len(after) == 2 and all(mean >= entry.score_mean for _, mean in after), entry
        else:
            assert (kept.score_mean, kept.checkpoint) == (entry.score_mean, entry.checkpoint)
    assert all(Path(e.checkpoint).is_file() for e in second.entries)

    def state(p):
        return p.status, p.steps, p.attempts, p.score_mean, p.ended

    assert [state(board.pod(p.id)) for p in pods_before] == [state(p) for p in pods_before]  # not run again
    assert second.total_steps >= 6 * 2048 and second.pods_started > first.pods_started
    assert_steps_counted_once(board, second.total_steps)
    board.close()


def test_a_pod_that_failed_while_no_orchestrator_ran_is_recorded_as_failed(tmp_path):
    """A running pod whose process failed (``error.txt``, no report) while its orchestrator was dead was marked
    preempted and run again: its error never reached the history, nor counted towards ``max_failures``."""
    from podium.rundir import PodDir
    from podium.tournament.states import PodStatus

    _, run_dir = _a_tournament_left_with_a_running_pod(tmp_path, handle="inline")
    PodDir(run_dir).error.write_text("Traceback (most recent call last):\nRuntimeError: the simulator crashed\n")
    resume_tournament(tmp_path / "run", progress=False, steps=2048)  # nothing more to train: it only tidies up
    board = open_leaderboard(tmp_path / "run")
    failed = board.pod("p9999")
    board.close()
    assert failed.status == PodStatus.FAILED and "the simulator crashed" in failed.error


def test_a_run_dir_cannot_hold_two_tournaments_and_resume_needs_one(tmp_path):
    from podium.config import ConfigError

    tournament(run_dir=tmp_path / "run", progress=False, steps=2048, **_config())
    with pytest.raises(ConfigError, match="already holds a tournament"):
        tournament(run_dir=tmp_path / "run", progress=False, steps=2048, **_config())
    with pytest.raises(ConfigError, match="holds no tournament"):
        resume_tournament(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="URLs are not supported yet; give a path that every machine"):
        tournament(run_dir="s3://bucket/run", progress=False, steps=2048, **_config())


def test_an_env_registered_in_this_process_only_is_refused_for_pods_in_new_processes(tmp_path, monkeypatch):
    """Every pod of the process backend failed on it (unknown in a new process), one after the other."""
    register("OnlyHere-v0", _CrashingCartPole, description="test only")
    try:
        with pytest.raises(ConfigError, match=r"'OnlyHere-v0' is registered in this Python process only.*"
                           r"'your_module:OnlyHere-v0'.*backend: inline"):  # fmt: skip
            tournament(run_dir=tmp_path / "run", steps=2048, **_config(env="OnlyHere-v0", backend="process"))
    finally:
        registry.pop("OnlyHere-v0")
    assert not (tmp_path / "run").exists()
    (tmp_path / "mine.py").write_text(  # the way out: a module that registers it, named in the env id
        "from podium.envs import register\n"
        "register('Mine-v0', 'podium.envs.classic.cartpole:CartPoleVecEnv', override=True)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    report = tournament(
        run_dir=tmp_path / "ok", progress=False, steps=2048, **_config(env="mine:Mine-v0", backend="process")
    )
    assert report.pods_failed == 0 and report.pods_started >= 1


def test_a_resume_judges_a_new_target_on_the_results_already_in_and_says_when_its_budget_was_spent(tmp_path):
    """A lower target on resume ignored the leaderboard: the tournament trained on past a target its entries
    already reached. A budget spent before the resume stopped it with no word on why nothing ran."""
    first = tournament(run_dir=tmp_path / "run", progress=False, steps=2 * 2048, **_config())
    best = first.entries[0]
    spent = resume_tournament(tmp_path / "run", progress=False)  # same budget: nothing left
    assert spent.stop_reason == "steps" and "spent before this run started" in spent.message
    assert spent.total_steps == first.total_steps
    low = best.score_mean - 1000.0  # far below the best entry: it reaches it by any margin
    again = resume_tournament(tmp_path / "run", progress=False, steps=20 * 2048, target=low)
    assert again.stop_reason == "target" and again.reached_target and "already held" in again.message
    assert again.total_steps == first.total_steps  # no pod trained for a target already reached


def test_a_pod_that_ended_as_the_stop_reached_it_is_recorded_as_it_ended(tmp_path):
    """A pod that finished just before it was preempted was recorded as preempted: its result was never
    offered to the leaderboard, and it was run again."""
    from podium.rundir import PodDir
    from podium.tournament.backends import read_report, write_report
    from podium.tournament.orchestrator import _curve_steps
    from podium.tournament.states import PodStatus

    tournament(run_dir=tmp_path / "run", progress=False, steps=2048, **_config())
    orch = Orchestrator.resume(tmp_path / "run", backend=InlineBackend(), progress=False, steps=4096)
    board = orch.board
    (done,) = board.pods()
    run_dir = tmp_path / "run" / "pods" / "p9999"
    _add_running_pod(board, done, run_dir, handle="inline")
    run_dir.mkdir(parents=True)
    write_report(run_dir, read_report(Path(done.run_dir)))  # it finished as the stop came
    orch._elapsed0, orch._t0, orch._time_to_target, orch._tries = 0.0, time.monotonic(), None, 0  # as run() sets
    orch._failures_in_row, orch._last_beat = 0, 0.0
    orch._preempt(board.pod("p9999"))
    assert board.pod("p9999").status == PodStatus.FINISHED
    # a killed pod's curve may end in a cut row: its steps are the last whole row's
    PodDir(run_dir).curve.write_text("step,wall_time,eval_mean,eval_std\n1000,1.0,5.0,1.0\n12")
    assert _curve_steps(board.pod("p9999")) == 1000
    board.close()


def test_a_pod_running_out_of_reach_is_waited_for_not_run_twice(tmp_path):
    """A pod still running that the resuming orchestrator cannot adopt (another backend, another host) was
    marked preempted and run again: the second run, refused its directory, counted as a failure, and the
    first one's result was never collected."""
    import subprocess
    import sys

    from podium.rundir import PodDir
    from podium.tournament.states import PodStatus

    done, run_dir = _a_tournament_left_with_a_running_pod(tmp_path, handle="elsewhere:1")
    report = PodDir(done.run_dir).report.read_text()
    script = (  # the pod out of reach: it holds its directory, then hands in its report and lets go
        "import sys, time; from pathlib import Path; from podium.rundir import DirLock\n"
        "lock = DirLock(sys.argv[1]); lock.acquire(); print('held', flush=True); time.sleep(2)\n"
        "Path(sys.argv[1], 'report.json').write_text(sys.argv[2]); lock.release()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, str(run_dir), report], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    resume_tournament(tmp_path / "run", progress=False, steps=2048)
    holder.wait(30)
    board = open_leaderboard(tmp_path / "run")
    pod = board.pod("p9999")
    outcomes = [h["outcome"] for h in board.history() if h["pod_id"] == "p9999"]
    board.close()
    assert pod.status == PodStatus.FINISHED and "failed" not in outcomes


def _add_running_pod(board, done, run_dir, handle):
    """Record pod p9999 (like ``done``, in ``run_dir``) as running, started by an earlier orchestrator."""
    from podium.tournament.states import PodStatus

    board.add_pod(
        id="p9999", number=board.take_pod_number(), parent_id=None, lineage="p9999", algo="ppo", env="CartPole-v1",
        hparams=done.hparams, seed=9, spec=done.spec, status=PodStatus.QUEUED, run_dir=str(run_dir),
        init_checkpoint=None,
    )  # fmt: skip
    board.update_pod("p9999", status=PodStatus.RUNNING, started=1.0, handle=handle)


def _a_tournament_left_with_a_running_pod(tmp_path, handle):
    """A finished tournament in ``tmp_path/run`` whose database also holds p9999 as running (its directory
    made, empty): its one finished pod and p9999's directory."""
    tournament(run_dir=tmp_path / "run", progress=False, steps=2048, **_config())
    board = open_leaderboard(tmp_path / "run")
    (done,) = board.pods()
    run_dir = tmp_path / "run" / "pods" / "p9999"
    _add_running_pod(board, done, run_dir, handle=handle)
    board.close()
    run_dir.mkdir(parents=True)
    return done, run_dir


def test_an_inline_pods_overhead_does_not_count_its_wait_in_the_queue(tmp_path):
    """The inline backend runs its queue one pod at a time: a pod's start was its submission, so the time it
    waited for the pods before it counted as its overhead, and the last rounds of a timed tournament were cut
    short by it."""
    tournament(run_dir=tmp_path / "run", progress=False, steps=2 * 2048, pool={"min": 2, "max": 2}, **_config())
    board = open_leaderboard(tmp_path / "run")
    first, second = sorted(board.pods(), key=lambda p: p.number)
    board.close()
    assert second.started >= first.ended - 1e-3  # it began when the first had finished, not when both were queued


def test_an_orchestrator_taken_over_leaves_without_writing_or_stopping_pods(tmp_path):
    """An orchestrator that wakes up after another took its tournament over (its heartbeat had gone stale: a
    suspended laptop, a paused container) leaves at once: no result recorded, no pod marked preempted, no
    'finished' written over the new owner's tournament."""
    import threading

    from podium.tournament.leaderboard import OwnershipLost
    from podium.tournament.states import PodStatus

    orch = Orchestrator.start(
        load_tournament_config(None, **_config(seconds=60, pod={**POD, "steps": 40_960})), run_dir=tmp_path / "run"
    )
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run_catching(orch, errors))
    thread.start()
    board = open_leaderboard(tmp_path / "run")
    try:
        deadline = time.monotonic() + 60
        while not board.pods(PodStatus.RUNNING):
            assert time.monotonic() < deadline and thread.is_alive(), errors
            time.sleep(0.05)
        board.update_info(owner="another-host:1", heartbeat=time.time())  # the new owner
        thread.join(120)
        assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], OwnershipLost), errors
        info = board.info()
        assert (info["owner"], info["status"]) == ("another-host:1", "running")
        assert {p.status for p in board.pods()} == {PodStatus.RUNNING}  # left as they were, for the new owner
        assert board.history() == []
    finally:
        board.close()


def test_the_live_view_stops_when_the_wind_down_finds_the_tournament_taken_over(tmp_path, monkeypatch):
    """Taken over during the wind-down itself: the live view (a refresh thread) still stops."""
    from podium.tournament.leaderboard import OwnershipLost
    from podium.tournament.states import StopReason

    orch = Orchestrator.start(load_tournament_config(None, **_config(seconds=60)), run_dir=tmp_path / "run")
    stops: list[bool] = []
    monkeypatch.setattr(orch, "_loop", lambda: StopReason.SECONDS)

    def taken_over(stop, lost):
        raise OwnershipLost("another-host:1 owns it now")

    monkeypatch.setattr(orch, "_wind_down", taken_over)
    monkeypatch.setattr(orch.view, "stop", lambda: stops.append(True))
    with pytest.raises(OwnershipLost):
        orch.run()
    assert stops == [True]


def _run_catching(orch: Orchestrator, errors: list[BaseException]) -> None:
    try:
        orch.run()
    except BaseException as exc:
        errors.append(exc)
