"""podium.machine: the cores a process may use and the one-line machine description every benchmark prints."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from podium import machine


def test_local_cpus_follows_the_affinity_mask(monkeypatch):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity masks on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5})
    assert machine.local_cpus() == 3


def test_cpu_model_reads_the_first_model_name(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU @ 2.0GHz\n\nmodel name\t: other\n")
    real = machine.Path
    monkeypatch.setattr(machine, "Path", lambda p: real(info) if p == "/proc/cpuinfo" else real(p))
    assert machine.cpu_model() == "Example CPU @ 2.0GHz"
    monkeypatch.setattr(machine, "Path", lambda p: real(tmp_path / "missing"))
    assert machine.cpu_model() == (platform.processor() or platform.machine())


def test_describe_names_the_cpu_the_cores_python_and_torch(monkeypatch):
    monkeypatch.setattr(machine, "cpu_model", lambda: "Example CPU")
    monkeypatch.setattr(machine, "local_cpus", lambda: 2)
    text = machine.describe(gpu=False)
    assert text.startswith("Example CPU, 2 cores (of ")
    assert f"Python {platform.python_version()}" in text and text.endswith(f"torch {torch.__version__}")


@pytest.mark.parametrize("value", ["two", "0", "-1", "1.5", "²"])
def test_a_cpu_budget_that_is_not_a_whole_number_of_cores_is_refused_with_the_fix(monkeypatch, value):
    monkeypatch.setenv(machine.CPUS_ENV, value)
    with pytest.raises(ValueError, match=rf"PODIUM_CPUS='{value}'.*PODIUM_CPUS=1"):
        machine.cpu_budget()


def test_the_cpu_budget_caps_the_cores_and_is_all_of_them_when_unset(monkeypatch):
    monkeypatch.setattr(machine, "local_cpus", lambda: 4)
    monkeypatch.setenv(machine.CPUS_ENV, "2")
    assert machine.cpu_budget() == 2
    monkeypatch.setenv(machine.CPUS_ENV, "8")
    assert machine.cpu_budget() == 4
    monkeypatch.delenv(machine.CPUS_ENV)
    assert machine.cpu_budget() == 4


FORKING_THREADS = """
import gc, importlib.util, os, sys, threading

spec = importlib.util.spec_from_file_location("machine", sys.argv[1])  # its hooks alone: no torch, so forks are fast
spec.loader.exec_module(importlib.util.module_from_spec(spec))


def forker(times):
    for _ in range(times):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)


sys.setswitchinterval(1e-6)  # switch threads as often as possible: the window is a few bytecodes wide
for round in range(20):
    threads = [threading.Thread(target=forker, args=(20,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not gc.isenabled():
        sys.exit(f"the collector was left off after round {round}")
gc.disable()  # a program that runs without the collector keeps it off
forker(3)
if gc.isenabled():
    sys.exit("the collector was turned on in a program that had it off")
"""


def test_threads_that_fork_at_once_leave_the_collector_as_it_was():
    """The at-fork hooks turn the collector off around a fork; two threads forking at once used to leave it
    off for good in the parent (one of them saved the state the other had just changed). The hooks run in a
    small interpreter of their own: 800 forks of it take under a second where the test process's took 45 s
    (the old hooks failed there in the first round of 40 forks)."""
    done = subprocess.run(
        [sys.executable, "-c", FORKING_THREADS, machine.__file__], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_exit_process_runs_atexit_flushes_and_keeps_the_exit_code(tmp_path):
    """``exit_process`` skips Python's teardown, not what a program relies on at exit: its ``atexit`` handlers,
    buffered output, the exit status (a message for a status, as ``sys.exit``), and the end of a thread that
    still runs."""
    code = (
        "import atexit, sys, threading, time\n"
        "from podium.machine import exit_process\n"
        "atexit.register(lambda: print('handler'))\n"
        "print('buffered', end=' ')\n"
        "if sys.argv[1] == 'thread':\n"
        "    threading.Thread(target=lambda: (time.sleep(0.3), open(sys.argv[2], 'w').write('done'))).start()\n"
        "exit_process({'int': 3, 'none': None, 'str': 'it failed', 'thread': 0}[sys.argv[1]])\n"
    )
    marker = tmp_path / "thread.txt"
    runs = {
        what: subprocess.run([sys.executable, "-c", code, what, str(marker)], capture_output=True, text=True)
        for what in ("int", "none", "str", "thread")
    }
    assert [r.returncode for r in runs.values()] == [3, 0, 1, 0]
    assert all(r.stdout == "buffered handler\n" for r in runs.values()), runs
    assert "it failed" in runs["str"].stderr
    assert marker.read_text() == "done"
