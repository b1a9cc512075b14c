"""The process backend for real: pods are subprocesses; pods and the orchestrator are killed with
SIGKILL; the pool follows the CPU affinity of the orchestrator (what ``taskset -p`` changes)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from podium.tournament.backends.process import _alive
from podium.tournament.orchestrator import open_leaderboard

POD = {"eval_every": 4096, "eval_episodes": 4, "tensorboard": False, "num_envs": 16, "checkpoint_every": 0}


def _start(tmp_path: Path, **config) -> tuple[subprocess.Popen, Path]:
    cfg = {"env": "CartPole-v1", "algos": {"ppo": 1}, "backend": "process", **config}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    log = open(tmp_path / "orchestrator.log", "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "podium.cli",
            "tournament",
            str(tmp_path / "t.yaml"),
            "--run-dir",
            str(run_dir),
            "--no-progress",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return proc, run_dir


def _wait(condition, timeout: float, what: str, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the orchestrator exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running_pods(run_dir: Path):
    if not (run_dir / "tournament.yaml").exists():
        return []
    board = open_leaderboard(run_dir)
    try:
        return [p for p in board.pods("running") if p.handle and (Path(p.run_dir) / "curve.csv").exists()]
    finally:
        board.close()


def _pid(pod) -> int:
    return int(pod.handle.rpartition(":")[2])


def test_a_pod_killed_with_sigkill_is_recorded_as_failed_and_replaced(tmp_path):
    proc, run_dir = _start(tmp_path, seconds=16, pod={**POD, "seconds": 4}, pool={"max": 2})
    victim = _wait(lambda: _running_pods(run_dir), 60, "a training pod", proc)[0]
    os.kill(_pid(victim), signal.SIGKILL)
    assert proc.wait(120) == 0, (tmp_path / "orchestrator.log").read_text()
    board = open_leaderboard(run_dir)
    assert board.pod(victim.id).status == "failed"
    failed = [h for h in board.history() if h["outcome"] == "failed"]
    assert [h["pod_id"] for h in failed] == [victim.id] and "SIGKILL" in failed[0]["error"]
    later = [p for p in board.pods() if p.number > victim.number and p.started and p.started > victim.started]
    assert later, "no pod replaced the killed one"
    assert board.entries() and board.info()["stop_reason"] == "seconds"
    assert "FAILED: the pod process was killed by SIGKILL" in (tmp_path / "orchestrator.log").read_text()


def test_an_orchestrator_killed_with_sigkill_resumes_with_nothing_lost(
    tmp_path, board_from_history, assert_steps_counted_once
):
    """Every entry survives the kill (or is displaced by a better result, in the history); every pod's steps are
    counted exactly once, adopted and resumed ones included."""
    pod_steps, size = 16_384, 3  # pods long enough (seconds) that some still run when the orchestrator dies
    proc, run_dir = _start(
        tmp_path, steps=5 * pod_steps, leaderboard_size=size, pod={**POD, "steps": pod_steps}, pool={"max": 2}
    )

    def entries_and_running():
        if not (run_dir / "tournament.yaml").exists():
            return None
        board = open_leaderboard(run_dir)
        try:
            entries, running = board.entries(), _running_pods(run_dir)
            return (entries, running) if entries and running else None
        finally:
            board.close()

    _wait(entries_and_running, 90, "a leaderboard entry while a pod trains", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    board = open_leaderboard(run_dir)
    before_entries = board.entries()
    before_history = board.history()
    orphans = [p for p in board.pods("running") if p.handle]
    assert orphans and board.info()["status"] == "running"  # it never got to say goodbye
    board.close()

    resumed = subprocess.run(
        [sys.executable, "-m", "podium.cli", "tournament", "resume", str(run_dir), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    board = open_leaderboard(run_dir)
    info = board.info()
    assert info["status"] == "finished" and info["stop_reason"] == "steps"
    history = board.history()
    assert history[: len(before_history)] == before_history  # the history is intact and continues
    after = board.entries()
    assert [(e.pod_id, e.score_mean) for e in after] == board_from_history(history, size)
    for entry in before_entries:  # still there, or displaced by better ones
        kept = next((e for e in after if e.pod_id == entry.pod_id), None)
        if kept is None:
            assert len(after) == size and all(e.score_mean >= entry.score_mean for e in after), entry
        else:
            assert (kept.score_mean, kept.checkpoint) == (entry.score_mean, entry.checkpoint)
    assert all(Path(e.checkpoint).is_file() for e in after)
    finished = board.pods("finished")
    assert {p.steps for p in finished} == {pod_steps}  # exact: no pod counted its steps before the kill twice
    report = json.loads((run_dir / "report.json").read_text())
    assert report["total_steps"] >= 5 * pod_steps
    assert_steps_counted_once(board, report["total_steps"])
    for orphan in orphans:  # collected (it finished meanwhile), adopted (still running) or resumed: one of them
        now = board.pod(orphan.id)
        adopted = f"{orphan.id} {orphan.algo} still running: adopted" in resumed.stdout
        restarted = f"{orphan.id} {orphan.algo} resumed from its last checkpoint" in resumed.stdout
        assert not (adopted and restarted), resumed.stdout
        assert now.status == "finished" and now.attempts == orphan.attempts + restarted, now
        assert not _alive(_pid(orphan))
    assert not board.pods("running", "queued")


def test_sigterm_winds_the_orchestrator_down_like_ctrl_c(tmp_path):
    """`kill`, `docker stop` and Kubernetes send SIGTERM: the orchestrator used to die at once, leaving its pods
    training with nobody to collect them and itself recorded as the tournament's owner."""
    proc, run_dir = _start(tmp_path, seconds=120, pod={**POD, "seconds": 60}, pool={"max": 1})
    (pod,) = _wait(lambda: _running_pods(run_dir), 90, "a running pod", proc)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    board = open_leaderboard(run_dir)
    info, now = board.info(), board.pod(pod.id)
    board.close()
    assert info["status"] == "interrupted" and info["owner"] is None, info
    assert now.status == "preempted", now  # stopped with its checkpoint, to resume
    assert not _alive(_pid(pod))
    log = (tmp_path / "orchestrator.log").read_text()
    assert "Traceback" not in log, log


_DIES_AFTER_SUBMIT = """
import os, sys
from podium.tournament.leaderboard import Leaderboard
from podium.tournament.config import load_tournament_config
from podium.tournament.orchestrator import Orchestrator
recorded = Leaderboard.update_pod
def update_pod(self, pod_id, **fields):
    if fields.get("status") == "running":  # the pod's process is started, its row still says queued
        os._exit(9)
    return recorded(self, pod_id, **fields)
Leaderboard.update_pod = update_pod
Orchestrator.start(load_tournament_config(sys.argv[1]), run_dir=sys.argv[2], progress=False).run()
"""


def test_a_pod_started_just_before_the_orchestrator_died_is_adopted_not_started_twice(tmp_path):
    """The orchestrator starts a pod's process, then records it: a kill in between left a queued row and a live
    process, and resume started the pod a second time beside it (the first then failed on its deleted files)."""
    cfg = {"env": "CartPole-v1", "algos": {"ppo": 1}, "backend": "process", "seconds": 60, "pool": {"max": 1}}
    cfg["pod"] = {**POD, "seconds": 10}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    died = subprocess.run(
        [sys.executable, "-c", _DIES_AFTER_SUBMIT, str(tmp_path / "t.yaml"), str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert died.returncode == 9, died.stdout + died.stderr
    board = open_leaderboard(run_dir)
    (orphan,) = board.pods()
    board.close()
    assert orphan.status == "queued" and orphan.handle is None
    pid = int((Path(orphan.run_dir) / "pod.pid").read_text().split()[0])  # (its pid, then its start time)
    assert _alive(pid)
    resumed = subprocess.run(
        [sys.executable, "-m", "podium.cli", "tournament", "resume", str(run_dir), "--no-progress", "--seconds", "12"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{orphan.id} ppo still running: adopted" in resumed.stdout, resumed.stdout
    assert f"{orphan.id} ppo resumed" not in resumed.stdout
    board = open_leaderboard(run_dir)
    now = board.pod(orphan.id)
    board.close()
    assert now.status == "finished" and now.attempts == 1, now
    assert not (Path(orphan.run_dir) / "error.txt").exists()
    assert not _alive(pid)


_DIES_AFTER_RESUBMIT = """
import os, sys
from podium.tournament.backends.process import ProcessBackend
from podium.tournament.orchestrator import Orchestrator
submit = ProcessBackend.submit
def submit_then_die(self, job):
    handle = submit(self, job)
    if job.resume:  # the preempted pod's process is started again: the orchestrator dies before it does anything else
        os._exit(9)
    return handle
ProcessBackend.submit = submit_then_die
Orchestrator.resume(sys.argv[1], progress=False).run()
"""


def test_a_preempted_pod_resumed_just_before_the_orchestrator_died_is_adopted_not_started_twice(tmp_path):
    """As for a new pod (above), for a preempted one that is resumed: its row said preempted until its resumption
    was recorded, after the start, and the next orchestrator adopts only pods its rows say may run (queued or
    running). So it resumed the pod a second time beside its running process; that start failed on the locked
    run directory and the pod was recorded as failed."""
    proc, run_dir = _start(tmp_path, seconds=60, pod={**POD, "seconds": 8}, pool={"max": 1})
    (pod,) = _wait(lambda: _running_pods(run_dir), 90, "a training pod", proc)
    proc.send_signal(signal.SIGTERM)  # wound down: the pod saves its checkpoint and is preempted
    proc.wait(60)
    board = open_leaderboard(run_dir)
    assert board.pod(pod.id).status == "preempted"
    board.close()
    died = subprocess.run(
        [sys.executable, "-c", _DIES_AFTER_RESUBMIT, str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert died.returncode == 9, died.stdout + died.stderr
    pid = int((Path(pod.run_dir) / "pod.pid").read_text().split()[0])
    try:
        assert _alive(pid)
        board = open_leaderboard(run_dir)
        seconds = int(board.info()["elapsed"]) + 3  # (spent soon after the resume: it waits for the pod to finish)
        board.close()
        resume = ["tournament", "resume", str(run_dir), "--no-progress", "--seconds", str(seconds)]
        resumed = subprocess.run(
            [sys.executable, "-m", "podium.cli", *resume],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert f"{pod.id} ppo still running: adopted" in resumed.stdout, resumed.stdout
        assert f"{pod.id} ppo resumed" not in resumed.stdout
        board = open_leaderboard(run_dir)
        now = board.pod(pod.id)
        board.close()
        assert now.status == "finished" and now.attempts == 2, now  # its first start and its resumption
        assert not (Path(pod.run_dir) / "error.txt").exists()
        assert not _alive(pid)
    finally:
        if _alive(pid):  # (the old fault: nobody adopted the process, which still trains)
            os.killpg(pid, signal.SIGKILL)


def test_the_pool_follows_the_orchestrators_cpu_affinity(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        import pytest

        pytest.skip("needs at least two CPU cores to shrink the pool from two pods to one")
    cores = sorted(os.sched_getaffinity(0))[:2]
    proc, run_dir = _start(tmp_path, seconds=25, pod={**POD, "seconds": 6}, pool={"max": 2})
    pool_csv = run_dir / "pool.csv"

    def sizes():
        return [int(r["pool_size"]) for r in csv.DictReader(pool_csv.open())] if pool_csv.exists() else []

    _wait(lambda: len(_running_pods(run_dir)) == 2, 60, "two running pods", proc)
    os.sched_setaffinity(proc.pid, {cores[0]})  # what 'taskset -p' does to a running tournament
    _wait(lambda: sizes()[-1:] == [1], 30, "the pool to shrink", proc)
    _wait(lambda: len(_running_pods(run_dir)) <= 1, 30, "a pod to be preempted", proc)
    os.sched_setaffinity(proc.pid, set(cores))
    _wait(lambda: sizes()[-1:] == [2], 30, "the pool to grow", proc)
    log_file = tmp_path / "orchestrator.log"
    _wait(lambda: "resumed from its last checkpoint" in log_file.read_text(), 60, "the preempted pod to resume", proc)
    proc.send_signal(signal.SIGTERM)  # all there is to see: wind it down rather than wait out its budget
    proc.wait(60)
    assert sizes() == [2, 1, 2]
    board = open_leaderboard(run_dir)
    preempted = [p for p in board.pods() if p.attempts > 1]
    assert preempted, "the preempted pod was never resumed"
    log = (tmp_path / "orchestrator.log").read_text()
    assert "preempted: the pool shrank" in log and "resumed from its last checkpoint" in log


def _collect(backend, count: int, timeout: float = 90.0):
    outcomes, end = [], time.monotonic() + timeout
    while len(outcomes) < count and time.monotonic() < end:
        outcomes += backend.poll(1.0)
    assert len(outcomes) == count, f"only {len(outcomes)} of {count} pods finished in {timeout} s"
    return outcomes


def test_a_finished_pods_process_runs_the_next_pod_and_a_failed_one_is_not_reused(tmp_path):
    from podium.config import PodSpec
    from podium.tournament.backends import PodJob
    from podium.tournament.backends.process import ProcessBackend

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=2048, torch_threads=1, **POD)
    backend = ProcessBackend(cpus_per_pod=1, idle_timeout=60)
    try:
        first = backend.submit(PodJob("a", spec, tmp_path / "a"))
        [done] = _collect(backend, 1)
        assert done.pod_id == "a" and done.report is not None and done.report.steps >= 2048
        second = backend.submit(PodJob("b", spec.model_copy(update={"seed": 1}), tmp_path / "b"))
        assert second == first  # same host:pid: the idle process took the job
        [done] = _collect(backend, 1)
        assert done.report is not None and (tmp_path / "b" / "report.json").is_file()

        broken = spec.model_copy(update={"env": "NoSuchEnv-v0"})
        third = backend.submit(PodJob("c", broken, tmp_path / "c"))
        assert third == first
        [failed] = _collect(backend, 1)
        assert failed.report is None and "NoSuchEnv" in failed.error
        pid = int(first.rpartition(":")[2])
        _wait(lambda: not _alive(pid), 10, "the failed pod's process to exit")
        fourth = backend.submit(PodJob("d", spec, tmp_path / "d"))
        assert fourth != first  # a fresh process after a failure
        [done] = _collect(backend, 1)
        assert done.report is not None
    finally:
        backend.shutdown()
    pid = int(fourth.rpartition(":")[2])
    _wait(lambda: not _alive(pid), 10, "the idle process to exit at shutdown")


def test_a_pod_stopped_from_outside_is_lost_not_failed(tmp_path):
    """A `kill` (or a service manager) stopping a pod process made it a failure whose message told the user to
    run `podium train --resume`; the pod saved its checkpoint and only needs to resume."""
    from podium.tournament.backends.process import _outcome

    for code in (143, 130, -signal.SIGTERM):
        outcome = _outcome("p0001", tmp_path, code)
        assert outcome.lost and "from outside the tournament" in (outcome.error or "")
    assert not _outcome("p0001", tmp_path, 1).lost and not _outcome("p0001", tmp_path, -signal.SIGKILL).lost


def _started(pid: int) -> int:
    """When process ``pid`` started: clock ticks after boot (field 22 of /proc/PID/stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_a_pid_the_system_gave_to_another_pod_process_is_not_adopted(tmp_path):
    """pod.pid held the pid alone, checked against the process's command line: once a pod's process had ended and
    the system gave its pid to another pod's process (of this tournament or another one: the same command line),
    the next orchestrator adopted that process as the pod's, then waited for it or stopped it."""
    from podium.config import PodSpec
    from podium.tournament.backends import PodJob
    from podium.tournament.backends.process import ProcessBackend

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=10_000_000, torch_threads=1, **POD)
    first = ProcessBackend(reuse=False)
    a, b = tmp_path / "a", tmp_path / "b"
    try:
        pid_a = int(first.submit(PodJob("a", spec, a)).rpartition(":")[2])
        time.sleep(0.05)  # b's process starts at a later clock tick, as a process given a's pid after a ended does
        handle_b = first.submit(PodJob("b", spec, b))
        pid_b = int(handle_b.rpartition(":")[2])
        assert _started(pid_b) != _started(pid_a)
        first.cancel("a")  # a's process ends, and the system gives its pid to b's process:
        recorded = (a / "pod.pid").read_text().split()
        (a / "pod.pid").write_text(" ".join([str(pid_b), *recorded[1:]]))
        second = ProcessBackend(reuse=False)
        assert not second.adopt("a", None, a)
        assert not second.adopt("a", f"{socket.gethostname()}:{pid_b}", a)
        assert second.adopt("b", handle_b, b) and second.adopt("b", None, b)  # b's own process is b's
        second.detach()
    finally:
        first.shutdown()
    assert not _alive(pid_b)


def test_an_adopted_pod_stopped_from_outside_is_lost_as_is_one_this_orchestrator_started(tmp_path):
    """A SIGTERM from outside stops a pod after it saved its checkpoint: it is lost (it resumes), not failed. The
    backend read that from the exit status of a process it started; of an adopted pod (started by an orchestrator
    that died) it has none, and such a pod was recorded as failed ("ended without a report"), never resumed."""
    from podium.config import PodSpec
    from podium.tournament.backends import PodJob
    from podium.tournament.backends.process import ProcessBackend

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=10_000_000, torch_threads=1, **POD)
    starter, backend = ProcessBackend(reuse=False), ProcessBackend(reuse=False)  # the dead orchestrator's, ours
    pids = []
    try:
        handle = starter.submit(PodJob("adopted", spec, tmp_path / "adopted"))
        starter.detach()  # its orchestrator dies; the pod goes on
        pids.append(int(handle.rpartition(":")[2]))
        pids.append(int(backend.submit(PodJob("own", spec, tmp_path / "own")).rpartition(":")[2]))
        assert backend.adopt("adopted", handle, tmp_path / "adopted")
        _wait(lambda: all((tmp_path / n / "curve.csv").is_file() for n in ("own", "adopted")), 90, "both to train")
        for pid in pids:
            os.kill(pid, signal.SIGTERM)  # `kill PID`
        outcomes = {o.pod_id: o for o in _collect(backend, 2)}
        for pod_id, outcome in outcomes.items():
            assert outcome.lost and outcome.report is None, outcome
            assert "stopped by a SIGTERM from outside the tournament" in (outcome.error or ""), outcome
            assert (tmp_path / pod_id / "checkpoints" / "last.pt").is_file()  # what it resumes from
    finally:
        backend.shutdown()
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


def _handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler of its own for SIGTERM (its ``SigCgt`` mask in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def test_an_adopted_pod_stopped_while_its_process_imports_is_lost_not_failed(tmp_path):
    """A pod process spends seconds importing torch and the pod, and it took SIGTERM over only after that: a
    SIGTERM in that time killed it without leaving ``done``, so an orchestrator that had adopted the pod (it gets
    no exit status) recorded it as failed ("ended without a report") instead of resuming it."""
    from podium.tournament.backends.process import POD_ENTRY, ProcessBackend, _start_time, _write_pid

    run_dir = tmp_path / "p0001"
    run_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", POD_ENTRY, str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    backend = ProcessBackend()
    try:
        _wait(lambda: proc.poll() is not None or _handles_sigterm(proc.pid), 30, "the pod process to handle SIGTERM")
        _write_pid(run_dir, proc.pid, _start_time(proc.pid))  # as the orchestrator that started it (and died) did
        assert backend.adopt("p0001", None, run_dir)
        os.kill(proc.pid, signal.SIGTERM)  # `kill PID`, while the process still imports torch
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert (run_dir / "done").read_text() == str(128 + signal.SIGTERM)
        [outcome] = _collect(backend, 1)
        assert outcome.lost and "stopped by a SIGTERM from outside the tournament" in (outcome.error or ""), outcome
    finally:
        backend.detach()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_pod_is_pinned_to_the_gpu_the_orchestrator_was_given(monkeypatch):
    """With CUDA_VISIBLE_DEVICES=2,3 the orchestrator's pods ran on physical GPUs 0 and 1."""
    from podium.tournament.backends.process import _visible_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, GPU-8f3a")
    assert (_visible_gpu(0), _visible_gpu(1)) == ("2", "GPU-8f3a")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _visible_gpu(1) == "1"


def test_an_adopted_pods_gpu_is_read_back_so_new_pods_spread_beside_it(monkeypatch):
    """After a restart the orchestrator adopts a running pod; it must know which GPU that pod holds, or the
    next pods would all be put on the same one."""
    from podium.tournament.backends import process

    monkeypatch.setattr(process, "local_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the orchestrator's GPUs: a pod on its second has "3"
    pods = {gpu: subprocess.Popen(["sleep", "30"], env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu}) for gpu in "32"}
    cpu_pod = subprocess.Popen(["sleep", "30"])  # inherits "2,3": pinned to no one GPU
    try:
        assert process._gpu_of(pods["3"].pid) == 1 and process._gpu_of(pods["2"].pid) == 0
        assert process._gpu_of(cpu_pod.pid) is None
    finally:
        for proc in (*pods.values(), cpu_pod):
            proc.kill()
            proc.wait()
    assert process._gpu_of(cpu_pod.pid) is None  # gone


def test_a_pod_still_inside_exec_is_read_once_its_environment_appears(monkeypatch):
    """Just after ``Popen`` returns, a child still inside ``exec`` shows an empty ``/proc/PID/environ`` (on a
    loaded machine, most of the time): that is not "a CPU pod" (CI once read it so)."""
    from pathlib import Path

    from podium.tournament.backends import process

    monkeypatch.setattr(process, "local_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    reads = iter([b"", b"", b"HOME=/root\0CUDA_VISIBLE_DEVICES=3\0"])
    monkeypatch.setattr(Path, "read_bytes", lambda self: next(reads))
    pod = subprocess.Popen(["sleep", "30"])  # alive, so the empty reads are waited out
    try:
        assert process._gpu_of(pod.pid) == 1
    finally:
        pod.kill()
        pod.wait()


def test_detaching_leaves_running_pods_to_the_new_owner(tmp_path):
    """An orchestrator taken over leaves its pods running (they live in sessions of their own, and the new owner
    adopts them); shutting down stops them."""
    from podium.tournament.backends.process import ProcessBackend, _Running

    backend = ProcessBackend()
    pods = [subprocess.Popen(["sleep", "30"], start_new_session=True) for _ in range(2)]
    try:
        backend._running = {f"p{i}": _Running(tmp_path, p.pid, p, None) for i, p in enumerate(pods)}
        backend.detach()
        time.sleep(0.2)
        assert backend._running == {} and all(p.poll() is None for p in pods)
    finally:
        for p in pods:
            p.kill()
            p.wait()


def test_a_numbered_gpu_is_refused_where_each_pod_gets_its_own(tmp_path):
    import pytest

    from podium.config import ConfigError
    from podium.tournament import tournament

    pod = {**POD, "steps": 2048, "device": "cuda:1"}
    with pytest.raises(ConfigError, match=r"pod.device: 'cuda:1', but the process backend gives each pod a GPU"):
        tournament(run_dir=tmp_path / "r", backend="process", env="CartPole-v1", algos={"ppo": 1}, steps=2048, pod=pod)
    assert not (tmp_path / "r").exists()
    from podium.tournament.backends.process import ProcessBackend
    from podium.tournament.config import load_tournament_config
    from podium.tournament.orchestrator import _check_pods_can_run

    pod["device"] = "cuda:0"  # the one GPU each pod sees: accepted, as before (and resumable)
    config = load_tournament_config(None, env="CartPole-v1", algos={"ppo": 1}, steps=2048, pod=pod)
    _check_pods_can_run(config, ProcessBackend())


def test_a_pod_process_draws_its_curve_after_it_reported(tmp_path, monkeypatch, capfd):
    """The orchestrator acts on ``done`` and ``report.json``; matplotlib's drawing (about 0.8 s in a fresh
    process) comes after both, and a drawing that fails does not fail a pod that trained."""
    from podium.config import PodSpec
    from podium.tournament.backends import process

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1024, torch_threads=1, **POD)
    seen = []

    def draw(run_dir, pod_spec):
        seen.append(((Path(run_dir) / "done").read_text(), (Path(run_dir) / "report.json").is_file()))
        real(run_dir, pod_spec)

    real = process.draw_curve
    monkeypatch.setattr(process, "draw_curve", draw)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        job = {"pod_id": name, "spec": spec.model_dump(mode="json"), "resume": False}
        (tmp_path / name / "job.json").write_text(json.dumps(job))
    assert process.run_one(str(tmp_path / "a")) == 0
    assert seen == [("0", True)] and (tmp_path / "a" / "curve.png").is_file()

    def broken(run_dir, pod_spec):
        raise RuntimeError("no fonts today")

    monkeypatch.setattr(process, "draw_curve", broken)
    assert process.run_one(str(tmp_path / "b")) == 0
    assert (tmp_path / "b" / "done").read_text() == "0" and not (tmp_path / "b" / "error.txt").exists()
    assert "no fonts today" in capfd.readouterr().err


def test_pod_processes_started_ahead_run_the_first_pods_and_one_stopped_while_importing_leaves_done(tmp_path):
    """``start_ahead`` starts as many pod processes as the pool takes on this machine, before the caller imports
    torch; the next process backend hands them its first pods (the same pids), and none is left behind. One
    stopped while it still imports leaves ``done`` for the job it was already handed, as a pod process
    started for that job does."""
    from podium._pod_entry import _AHEAD, spawn, start_ahead
    from podium.config import PodSpec
    from podium.tournament import load_tournament_config
    from podium.tournament.backends import PodJob
    from podium.tournament.backends.process import ProcessBackend

    inline = load_tournament_config(None, env="CartPole-v1", algos={"ppo": 1}, seconds=9, backend="inline")
    assert start_ahead(inline) == 0 and not _AHEAD
    cfg = load_tournament_config(None, env="CartPole-v1", algos={"ppo": 1}, seconds=9, pool={"min": 1, "max": 1})
    assert start_ahead(cfg) == 1
    [(early, threads)] = _AHEAD
    assert threads == 1
    backend = ProcessBackend(cpus_per_pod=1, idle_timeout=60)
    assert not _AHEAD  # the backend took it
    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1024, torch_threads=1, **POD)
    try:
        handle = backend.submit(PodJob("a", spec, tmp_path / "a"))
        assert handle.endswith(f":{early.pid}")
        [done] = _collect(backend, 1)
        assert done.report is not None
        assert (tmp_path / "a" / "pod.log").is_file()  # its output went to the pod's log once it had a job
    finally:
        backend.shutdown()
    assert early.poll() is not None
    assert (tmp_path / "a" / "curve.png").is_file()  # drawn after its report, before it exited

    stopped = spawn(None, 1)
    try:
        _wait(lambda: stopped.poll() is not None or _handles_sigterm(stopped.pid), 30, "the process to take SIGTERM")
        (tmp_path / "b").mkdir()
        assert stopped.stdin is not None
        stopped.stdin.write(f"{tmp_path / 'b'}\n".encode())
        stopped.stdin.flush()
        os.kill(stopped.pid, signal.SIGTERM)  # while it still imports torch
        assert stopped.wait(timeout=60) == 128 + signal.SIGTERM
        assert (tmp_path / "b" / "done").read_text() == str(128 + signal.SIGTERM)
    finally:
        if stopped.poll() is None:
            os.killpg(stopped.pid, signal.SIGKILL)
            stopped.wait()


def test_idle_pod_processes_go_when_released_while_running_pods_are_still_stopping(tmp_path):
    from podium.config import PodSpec
    from podium.tournament.backends import PodJob
    from podium.tournament.backends.process import ProcessBackend

    spec = PodSpec(env="CartPole-v1", algo="ppo", steps=1024, torch_threads=1, **POD)
    backend = ProcessBackend(cpus_per_pod=1, idle_timeout=60)
    try:
        pid = int(backend.submit(PodJob("a", spec, tmp_path / "a")).rpartition(":")[2])
        _collect(backend, 1)
        assert _alive(pid)  # idle, waiting for the next pod
        backend.release_idle()
        _wait(lambda: not _alive(pid), 30, "the released process to exit")
    finally:
        backend.shutdown()


def test_a_tournament_starts_its_pods_before_torch_and_a_pod_process_imports_no_database_layer():
    """What starting pods ahead rests on: the config and ``start_ahead`` load without torch (the pods import
    it beside the orchestrator, not after it), a pod process loads neither the orchestrator nor SQLAlchemy,
    and ``podium.tournament.leaderboard`` stays the function although a submodule has that name."""
    code = (
        "import sys\n"
        "from podium.tournament import load_tournament_config, start_ahead, tournament\n"
        "assert 'torch' not in sys.modules, 'torch before the pods start'\n"
        "import podium.tournament.backends.process\n"
        "assert not {'sqlalchemy', 'podium.tournament.orchestrator'} & set(sys.modules), 'a pod loads the database'\n"
        "import podium.tournament.leaderboard, podium.tournament as t\n"
        "from podium.tournament import leaderboard\n"
        "assert callable(leaderboard) and t.leaderboard is leaderboard and leaderboard.__module__.endswith('api')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
