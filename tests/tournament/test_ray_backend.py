"""The Ray backend on a real Ray cluster started here, on 127.0.0.1 only: the same config as on the process
backend gives an equivalent leaderboard; every Ray process listens on loopback only; preemption keeps a
pod's progress and reuses its actor, and several pods preempted together are all signalled before any is
waited for; a killed actor fails its pod; a learner that dies fails its pod with no
process left behind; an address that does not answer and a pod bigger than any node are refused at once;
and a node killed mid-tournament loses its pods, which resume on the other node from their checkpoints.

Ray binds every interface unless its node address is 127.0.0.1, which on Linux takes
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in the environment *before* ``import ray`` (see
``podium.tournament.backends.ray``): set at the top of this module, before anything imports Ray.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from podium.tournament.backends.ray import LOOPBACK_ENV

for _name, _value in {**LOOPBACK_ENV, "RAY_AUTH_MODE": "disabled"}.items():
    os.environ.setdefault(_name, _value)
_OWN_TMPDIR = None
if "RAY_TMPDIR" not in os.environ:  # a private temp dir: no other Ray cluster on the machine is found or touched
    _OWN_TMPDIR = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="podium-ray-", dir="/tmp")

ray = pytest.importorskip("ray", reason="the ray backend needs Ray: pip install 'podium[ray]' (the test extra has it)")

from podium.cli import app  # noqa: E402
from podium.config import PodSpec  # noqa: E402
from podium.rundir import DirLock, PodDir  # noqa: E402
from podium.store import load_checkpoint  # noqa: E402
from podium.tournament.backends import BackendError, PodJob  # noqa: E402
from podium.tournament.backends.ray import RayBackend  # noqa: E402
from podium.tournament.orchestrator import open_leaderboard  # noqa: E402

runner = CliRunner()
WIDE = {"COLUMNS": "200"}
POD = {"eval_episodes": 4, "tensorboard": False, "num_envs": 16, "checkpoint_every": 0}
FAST_HEALTH_CHECK = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}
"""A dead node is noticed in about 1.5 s instead of Ray's default half minute."""
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of one head node with 2 CPUs on 127.0.0.1, run by this test process (its processes are this
    process's descendants). Tests join it through its address like a user would; one test adds a node."""
    from ray.cluster_utils import Cluster

    if ray.util.get_node_ip_address() != "127.0.0.1":
        pytest.fail("Ray would listen on every interface: it was imported before this module set its environment")
    head = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "node_ip_address": "127.0.0.1",
            "_system_config": FAST_HEALTH_CHECK,
        },
    )
    try:
        yield head
    finally:
        if ray.is_initialized():
            ray.shutdown()
        with contextlib.suppress(Exception):
            head.shutdown()
        if _OWN_TMPDIR is not None:
            shutil.rmtree(_OWN_TMPDIR, ignore_errors=True)
            if os.environ.get("RAY_TMPDIR") == _OWN_TMPDIR:
                del os.environ["RAY_TMPDIR"]


def _config(tmp_path: Path, **fields) -> str:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"env": "CartPole-v1", "algos": {"ppo": 1}, "pod": POD, **fields}))
    return str(path)


def _tournament(*args: str):
    result = runner.invoke(app, ["tournament", *args, "--no-progress"], env=WIDE)
    return result


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _listening(pids: list[int]) -> list[tuple[int, str, str, int]]:
    """(pid, process name, address, port) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    listen: dict[str, tuple[str, int]] = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] != "0A":  # LISTEN
                    continue
                hex_addr, hex_port = cols[1].split(":")
                raw = bytes.fromhex(hex_addr)
                # /proc prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                addr = socket.inet_ntop(socket.AF_INET if width == 8 else socket.AF_INET6, raw)
                listen[cols[9]] = (addr, int(hex_port, 16))
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and target[8:-1] in listen:
                        out.append((pid, name, *listen[target[8:-1]]))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _wait(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _collect(backend: RayBackend, count: int = 1, timeout: float = 60.0):
    outcomes, end = [], time.monotonic() + timeout
    while len(outcomes) < count and time.monotonic() < end:
        outcomes += backend.poll(0.5)
    assert len(outcomes) == count, f"only {len(outcomes)} of {count} pods stopped in {timeout} s"
    return outcomes


# ------------------------------------------------------------------------------------------ equivalence
def test_the_same_config_runs_on_ray_and_on_processes_to_equivalent_leaderboards(
    cluster, tmp_path, assert_steps_counted_once
):
    """One YAML, two backends (``--backend process``; ``--backend ray --address``): both spend the step budget,
    collect every pod exactly once and fill a leaderboard of the same shape with CartPole scores; a tournament
    started on processes then continues on Ray (``podium tournament resume RUN --backend ray``)."""
    budget, size = 4 * 2048, 3
    config = _config(
        tmp_path,
        algos={"ppo": 1, "dqn": 1},
        pod={**POD, "steps": 2048, "eval_every": 2048},
        steps=budget,
        leaderboard_size=size,
        pool={"max": 2},
        generator={"scheme": "leaderboard", "explore": 0.0},
    )
    runs = {}
    for backend in ("process", "ray"):
        run_dir = tmp_path / backend
        extra = ["--address", cluster.address] if backend == "ray" else []
        result = _tournament(config, "--backend", backend, *extra, "--run-dir", str(run_dir))
        assert result.exit_code == 0, result.output
        assert "the step budget is spent" in result.output
        runs[backend] = (run_dir, result.output)
    assert f"ray backend at {cluster.address}" in runs["ray"][1]
    assert not ray.is_initialized()  # the backend left the cluster when the tournament ended

    shapes = {}
    for backend, (run_dir, _) in runs.items():
        report = json.loads((run_dir / "report.json").read_text())
        board = open_leaderboard(run_dir)
        pods, entries, history = board.pods(), board.entries(), board.history()
        assert report["stop_reason"] == "steps" and report["total_steps"] >= budget, backend
        assert {p.status for p in pods} == {"finished"}, backend  # all collected: none failed, none left running
        assert sorted(h["pod_id"] for h in history) == sorted(p.id for p in pods), backend  # each exactly once
        assert len(entries) == size and [e.rank for e in entries] == [1, 2, 3], backend
        assert all(0 < e.score_mean <= 500 and e.score_std >= 0 for e in entries), backend  # CartPole returns
        assert [e.score_mean for e in entries] == sorted((e.score_mean for e in entries), reverse=True)
        assert {p.algo for p in pods} == {"ppo", "dqn"} and all(Path(e.checkpoint).is_file() for e in entries)
        assert_steps_counted_once(board, report["total_steps"])
        shapes[backend] = (sorted(report), sorted(entries[0].to_dict()), len(pods) >= budget // 2048)
        board.close()
    assert shapes["process"] == shapes["ray"]

    run_dir = runs["process"][0]
    board = open_leaderboard(run_dir)
    pods_before = len(board.pods())
    board.close()
    more = str(json.loads((run_dir / "report.json").read_text())["total_steps"] + 1)  # one more round
    result = _tournament("resume", str(run_dir), "--backend", "ray", "--address", cluster.address, "--steps", more)
    assert result.exit_code == 0, result.output
    assert "ray backend at" in result.output and "the step budget is spent" in result.output
    board = open_leaderboard(run_dir)
    assert yaml.safe_load((run_dir / "tournament.yaml").read_text())["config"]["backend"] == "ray"
    assert {p.status for p in board.pods()} == {"finished"} and len(board.pods()) > pods_before
    board.close()


# ------------------------------------------------------------------------------------------ the backend itself
def _spec(**fields) -> PodSpec:
    return PodSpec(env="CartPole-v1", algo="ppo", torch_threads=1, eval_every=2048, **{**POD, **fields})


def test_every_ray_process_listens_on_loopback_only_and_preemption_keeps_progress(cluster, tmp_path):
    """The guard: while a pod trains in an actor, no process of the Ray cluster (or this driver) listens on a
    non-loopback address. Then preempting the pod (SIGTERM to its actor) saves its checkpoint, and the next
    pod runs in the same actor process."""
    backend = RayBackend(address=cluster.address, cpus_per_pod=1)
    spec, pod_dir = _spec(steps=24_576), PodDir(tmp_path / "a")
    try:
        first = backend.submit(PodJob("a", spec, pod_dir.root))
        _wait(lambda: pod_dir.last.is_file() and pod_dir.curve.is_file(), 60, "the pod's first checkpoint")
        listeners = _listening(_descendants(os.getpid()))
        names = {name for _, name, _, _ in listeners}
        assert "gcs_server" in names and "raylet" in names and any("PodActor" in n for n in names), listeners
        exposed = [(pid, name, addr, port) for pid, name, addr, port in listeners if addr not in LOOPBACK]
        assert not exposed, f"Ray listens beyond loopback: {exposed}"

        actor_pid = backend.where("a")[1]
        t0 = time.monotonic()
        backend.cancel("a")
        assert time.monotonic() - t0 < backend.grace
        log = pod_dir.log.read_text()
        assert "SIGTERM: training stopped after" in log, log
        saved = load_checkpoint(pod_dir.last)["counters"]["steps"]
        assert 0 < saved < spec.steps and _alive(actor_pid)
        curve = list(csv.DictReader(pod_dir.curve.open()))

        second = backend.submit(PodJob("a", spec, pod_dir.root, resume=True))
        assert second == first and backend.where("a")[1] == actor_pid  # the same actor process, reused
        [done] = _collect(backend)
        assert done.report is not None and done.report.steps == spec.steps
        assert list(csv.DictReader(pod_dir.curve.open()))[: len(curve)] == curve  # continued, not restarted
    finally:
        backend.shutdown()
    _wait(lambda: not _alive(actor_pid), 10, "the idle actor's process to end at shutdown")


def test_preempting_a_pod_that_already_ended_leaves_its_actor_able_to_run_the_next(cluster, tmp_path):
    """The orchestrator may preempt a pod whose task ended a moment ago (its outcome not yet polled): its actor
    is then idle, outside the pod's signal handling, and a SIGTERM would end its process; the next pod given
    that actor would fail with "the pod's Ray actor died" (seen in CI when a node died mid-tournament)."""
    backend = RayBackend(address=cluster.address, cpus_per_pod=1)
    spec, pod_dir = _spec(steps=2048), PodDir(tmp_path / "b")
    try:
        backend.submit(PodJob("b", spec, pod_dir.root))
        ref = backend._running["b"].ref  # the pod's task, to know that it ended without polling its outcome
        _wait(lambda: ray.wait([ref], timeout=0)[0], 60, "the pod's task to end")
        actor_pid = backend.where("b")[1]
        backend.cancel("b")
        time.sleep(1.0)  # a signal sent to the idle actor would have ended its process by now
        assert _alive(actor_pid)
        backend.submit(PodJob("c", spec, tmp_path / "c"))
        [done] = _collect(backend)
        assert done.pod_id == "c" and done.report is not None, done.error
    finally:
        backend.shutdown()


def test_a_pod_killed_because_it_did_not_stop_in_time_is_gone_when_cancel_returns(cluster, tmp_path):
    """A pod that does not save within the grace period is killed. ``ray.kill`` only asks Ray to; the
    orchestrator may resume the pod at once, and its new process would find the run directory still locked
    by the old one (and its files still being written): cancel returns once the old process is gone."""
    backend = RayBackend(address=cluster.address, cpus_per_pod=1)
    spec, pod_dir = _spec(steps=200_000), PodDir(tmp_path / "slow")
    try:
        backend.submit(PodJob("slow", spec, pod_dir.root))
        _wait(lambda: pod_dir.curve.is_file(), 60, "the pod to train")
        actor_pid = backend.where("slow")[1]
        backend.grace = 0.0  # no time to save: the kill path
        backend.cancel("slow")
        assert not _alive(actor_pid)
        lock = DirLock(pod_dir.root)
        lock.acquire()  # free at once for the pod's resumption
        lock.release()
    finally:
        backend.shutdown()


def test_preempting_many_pods_signals_them_all_before_waiting_for_any(cluster, tmp_path):
    """A wind-down stopped the pods one after another: each was signalled only once the one before had saved and
    stopped (or been killed after the grace period), so stopping N pods took up to N grace periods, with no
    heartbeat meanwhile. All are signalled first, then waited for together; each saves and its actor is kept."""
    backend = RayBackend(address=cluster.address, cpus_per_pod=1)
    dirs = {name: PodDir(tmp_path / name) for name in ("a", "b")}
    try:
        for name, pod_dir in dirs.items():
            backend.submit(PodJob(name, _spec(steps=200_000), pod_dir.root))
        _wait(lambda: all(d.curve.is_file() for d in dirs.values()), 90, "both pods to train")
        tasks = {name: backend._running[name].ref for name in dirs}
        ended_when_signalled = []  # for each signal sent: the pods whose task had ended by then
        send = backend._send

        def options(**kwargs):
            task = send.options(**kwargs)

            def remote(pid, signum):
                ended_when_signalled.append(sorted(n for n, ref in tasks.items() if ray.wait([ref], timeout=0)[0]))
                return task.remote(pid, signum)

            return SimpleNamespace(remote=remote)

        backend._send = SimpleNamespace(options=options)
        backend.cancel_many(list(dirs))
        assert ended_when_signalled == [[], []]
        for pod_dir in dirs.values():
            assert "SIGTERM: training stopped after" in pod_dir.log.read_text()
            assert load_checkpoint(pod_dir.last)["counters"]["steps"] > 0
        assert not backend._running and len(backend._idle) == 2  # both stopped in time: their actors are kept
    finally:
        backend.shutdown()


def test_an_actor_that_died_while_idle_is_not_given_the_next_pod(cluster, tmp_path):
    """An actor parked after its pod finished and then killed (the OOM killer, an operator) is dropped when the
    next pod comes: that pod runs in a fresh actor and finishes, instead of failing with "the pod's Ray actor
    died"."""
    backend = RayBackend(address=cluster.address, cpus_per_pod=1)
    spec = _spec(steps=2048)
    try:
        backend.submit(PodJob("a", spec, tmp_path / "a"))
        actor_pid = backend.where("a")[1]
        [done] = _collect(backend)
        assert done.report is not None and _alive(actor_pid)  # finished; its actor waits for the next pod
        os.kill(actor_pid, signal.SIGKILL)
        _wait(lambda: not _alive(actor_pid), 10, "the idle actor's process to end")
        backend.submit(PodJob("b", spec, tmp_path / "b"))
        [done] = _collect(backend)
        assert done.pod_id == "b" and done.report is not None, done.error
    finally:
        backend.shutdown()


def test_the_local_ray_cluster_listens_on_loopback_only(cluster):
    """Without an address the backend starts its own Ray cluster (the default): loopback only, too. Stopping it
    gives this process back its SIGTERM handler (ray.init leaves one that raises SystemExit)."""
    before = {port for *_, port in _listening(_descendants(os.getpid()))}
    sigterm = signal.getsignal(signal.SIGTERM)
    backend = RayBackend(num_cpus=1)
    try:
        assert "a Ray cluster on 127.0.0.1" in backend.describe() and backend.resources().cpus == 1
        listeners = [x for x in _listening(_descendants(os.getpid())) if x[3] not in before]
        assert {"gcs_server", "raylet"} <= {name for _, name, _, _ in listeners}, listeners
        exposed = [x for x in listeners if x[2] not in LOOPBACK]
        assert not exposed, f"the local Ray cluster listens beyond loopback: {exposed}"
    finally:
        backend.shutdown()
    assert not ray.is_initialized()
    assert signal.getsignal(signal.SIGTERM) is sigterm


def test_a_dying_learner_or_actor_fails_its_pod_cleanly_with_no_process_left(cluster, tmp_path):
    """A pod whose extra learner process is killed fails (saying which learner) and its actor is not reused; a
    pod whose actor process is killed fails too. Every process of both pods ends."""
    backend = RayBackend(address=cluster.address, cpus_per_pod=1)
    try:
        backend.submit(PodJob("a", _spec(seconds=60, learners=2), tmp_path / "a"))
        pid = backend.where("a")[1]
        learners = _wait(lambda: [p for p in _descendants(pid) if p != pid], 60, "the pod's extra learner process")
        _wait(PodDir(tmp_path / "a").last.is_file, 60, "the pod to train")
        os.kill(learners[0], signal.SIGKILL)
        [failed] = _collect(backend)
        assert failed.report is None and not failed.lost and "learner 1" in failed.error, failed.error
        _wait(lambda: not any(_alive(p) for p in [pid, *learners]), 15, "the pod's processes to end")

        backend.submit(PodJob("b", _spec(seconds=60), tmp_path / "b"))
        _wait(PodDir(tmp_path / "b").curve.is_file, 60, "the next pod to train")
        second = backend.where("b")[1]
        assert second != pid  # a fresh actor: a failed pod's process is never reused
        os.kill(second, signal.SIGKILL)
        [failed] = _collect(backend)
        assert failed.report is None and not failed.lost and "the pod's Ray actor died" in failed.error, failed
        _wait(lambda: not _alive(second), 10, "the killed actor's process to go")
    finally:
        backend.shutdown()


# ------------------------------------------------------------------------------------------ bad input
def test_an_address_that_does_not_answer_is_an_error_within_seconds(tmp_path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        RayBackend(address=f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10

    server = socket.create_server(("127.0.0.1", 0))  # something listens, but it is not Ray
    threading.Thread(target=lambda: [server.accept()[0].close() for _ in range(2)], daemon=True).start()
    with server:
        result = _tournament(
            _config(tmp_path, steps=2048, pod={**POD, "steps": 2048}),
            "--backend",
            "ray",
            "--address",
            f"127.0.0.1:{server.getsockname()[1]}",
            "--run-dir",
            str(tmp_path / "run"),
        )
    assert result.exit_code == 2 and "it is not a Ray cluster" in result.output, result.output
    assert time.monotonic() - t0 < 20 and not (tmp_path / "run").exists()
    for bad in ("ray://10.0.0.1:10001", "nowhere"):
        with pytest.raises(BackendError, match="HOST:PORT"):
            RayBackend(address=bad)
    assert not ray.is_initialized()


def test_a_pod_bigger_than_any_node_is_refused_with_the_numbers(cluster, tmp_path):
    for pool, numbers in (
        ({"cpus_per_pod": 3}, ["3 CPUs and 0 GPUs", "2 CPUs and 0 GPUs"]),
        ({"gpus_per_pod": 0.5}, ["1 CPUs and 0.5 GPUs", "2 CPUs and 0 GPUs"]),
    ):
        config = _config(tmp_path, steps=2048, pod={**POD, "steps": 2048}, pool=pool)
        result = _tournament(config, "--address", cluster.address, "--run-dir", str(tmp_path / "run"))
        assert result.exit_code == 2 and "no node of the Ray cluster has that much" in result.output, result.output
        assert all(n in result.output for n in numbers), result.output
        assert not (tmp_path / "run").exists() and not ray.is_initialized()  # refused before anything started
    result = _tournament(config, "--backend", "process", "--address", cluster.address)
    assert result.exit_code == 2 and "goes with --backend ray" in result.output


# ------------------------------------------------------------------------------------------ a node dies
def _saved(pod, steps: int | None = None) -> tuple[int, list[dict]]:
    """(env steps in the pod's ``last.pt``, or ``steps``; the rows of its curve up to those steps)."""
    run = PodDir(pod.run_dir)
    if steps is None:
        if not (run.last.is_file() and run.curve.is_file()):
            return 0, []
        steps = int(load_checkpoint(run.last)["counters"]["steps"])
    return steps, [r for r in csv.DictReader(run.curve.open()) if int(float(r["step"])) <= steps]


def test_a_node_killed_mid_tournament_loses_its_pods_which_resume_elsewhere_from_their_checkpoints(cluster, tmp_path):
    """A second node (2 CPUs) joins; the pool grows to 3 pods, some on the new node. Its raylet and every process
    under it are killed with SIGKILL: the pods there are recorded as lost (not failed), the pool shrinks, and
    they resume on the head node from their checkpoints; the tournament finishes."""
    node = cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
    raylet = node.all_processes["raylet"][0].process.pid
    # a step budget (not seconds): however slow the machine, room comes back before the budget is spent; and
    # however fast: the budget outlasts a few more rounds (pods of a second each on a quiet 2-core machine),
    # since a slot freed before the node's death is noticed goes to a new pod, and the budget counts it
    round_steps = 16_384
    config = _config(
        tmp_path, steps=6 * round_steps, pod={**POD, "steps": round_steps, "eval_every": 2048}, pool={"max": 3}
    )
    run_dir = tmp_path / "run"
    log = open(tmp_path / "orchestrator.log", "wb")  # noqa: SIM115 - closed below
    args = ["tournament", config, "--backend", "ray", "--address", cluster.address, "--run-dir", str(run_dir)]
    proc = subprocess.Popen([sys.executable, "-m", "podium.cli", *args, "--no-progress"], stdout=log, stderr=log)
    try:

        def actors_on_node():
            pids = [p for p in _descendants(raylet) if p != raylet]
            titles = [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids if _alive(p)]
            return any(b"PodActor" in t for t in titles)

        def three_with_a_checkpointed_evaluation():
            """The three running pods, once each has a checkpoint at or after its first evaluation."""
            if not (run_dir / "tournament.yaml").exists():
                return None
            board = open_leaderboard(run_dir)
            try:
                running = board.pods("running")
            finally:
                board.close()
            if len(running) != 3 or not all(_saved(p)[1] for p in running):
                return None
            return running

        _wait(actors_on_node, 90, "a pod on the second node")
        pods = _wait(three_with_a_checkpointed_evaluation, 60, "three pods with a checkpointed evaluation")
        for pid in _descendants(raylet):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        saved = {p.id: _saved(p) for p in pods}  # the curve rows each pod's last checkpoint holds
        assert proc.wait(120) == 0, (tmp_path / "orchestrator.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
        with contextlib.suppress(Exception):
            cluster.remove_node(node, allow_graceful=False)
    output = (tmp_path / "orchestrator.log").read_text()
    board = open_leaderboard(run_dir)
    lost = [h for h in board.history() if h["outcome"] == "lost"]
    assert lost and all("node" in h["error"] for h in lost), output
    assert not [h for h in board.history() if h["outcome"] == "failed"], output
    for h in lost:
        pod = board.pod(h["pod_id"])
        assert pod.attempts >= 2 and pod.status == "finished" and pod.steps == round_steps, pod
        assert f"{pod.id} ppo resumed from its last checkpoint" in output
        steps, rows = saved[pod.id]
        # resumed from its checkpoint: the rows it held are still there, as they were. A pod killed between its
        # last checkpoint and that step's curve row (its final evaluation) writes the row when it resumes: a
        # row at `steps` may follow the held ones
        now = _saved(pod, steps)[1]
        assert now[: len(rows)] == rows, (rows, now)
        assert [int(float(r["step"])) for r in now[len(rows) :]] in ([], [steps]), (rows, now)
    sizes = [int(r["pool_size"]) for r in csv.DictReader((run_dir / "pool.csv").open())]
    assert 3 in sizes and sizes[-1] == 2, sizes  # grew with the node, shrank when it died
    assert board.info()["stop_reason"] == "steps"
    board.close()


@pytest.mark.parametrize(
    ("sizes", "cpus_per_pod", "gpus_per_pod", "pods", "gpus"),
    [
        ([(3, 0), (3, 0)], 2, 0, 2, 0),  # 6 CPUs in all hold three 2-CPU pods, but each node holds one
        ([(4, 0), (4, 0)], 2, 0, 4, 0),
        ([(16, 1), (16, 1)], 2, 0.5, 4, 2),  # the GPUs decide: two half-GPU pods per node
        ([(16, 2)], 1, 0, 16, 2),  # CPU pods: the GPUs are reported as they are (for a GPU pod.device check)
        ([(1, 0)], 2, 0, 0, 0),
    ],
)
def test_the_pool_counts_only_the_pods_each_node_holds(sizes, cpus_per_pod, gpus_per_pod, pods, gpus):
    """The pool was sized from the cluster's CPU total: a pod that fits no node's remainder counted as running
    while it waited for a place."""
    from podium.tournament.backends.ray import usable_resources
    from podium.tournament.scheduler import Rules, pool_size

    usable = usable_resources(sizes, cpus_per_pod, gpus_per_pod)
    assert usable.gpus == gpus
    rules = Rules(cpus_per_pod=cpus_per_pod, gpus_per_pod=gpus_per_pod, pool_min=0, pool_max=64)
    assert pool_size(rules, usable) == pods
