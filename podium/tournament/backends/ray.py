"""Ray backend: every pod runs in a Ray actor on a Ray cluster (``pip install 'podium[ray]'``).

* **Actors.** A :class:`PodActor` declares what a pod needs — ``num_cpus = pool.cpus_per_pod`` and
  ``num_gpus = pool.gpus_per_pod`` (a fraction lets several pods share one GPU, as the paper does; each
  actor then caps its share of the GPU's memory) — so Ray places it on a node with room. An actor runs
  one pod after another (:func:`~podium.tournament.backends.run_job`), like the process backend's
  reused pod processes: Python, torch and the env code are imported once per pool slot, not once per
  round. An actor whose pod failed is killed, never reused; an idle one is killed after ``idle_timeout``.
* **Resources.** :meth:`RayBackend.resources` is the cluster's CPUs and GPUs (``ray.cluster_resources()``),
  read on every turn of the orchestrator's loop, so the pool grows when a node joins — from the Ray
  autoscaler or KubeRay, which this backend asks for room for ``pool.max`` pods — and shrinks when one
  leaves. A pod that asks for more than any node has is refused before anything starts, with the numbers.
* **Preemption keeps progress.** To preempt a pod, the backend sends SIGTERM to its actor's process (a
  tiny task pinned to that actor's node delivers it, so it works on any node): the pod stops at the end of
  its learning phase and writes its checkpoint and replay buffer, exactly as a process-backend pod or
  ``podium train`` on Ctrl-C, and the actor is reused. Only an actor that does not stop within ``grace``
  seconds is killed; its pod then resumes from its last periodic checkpoint (``pod.checkpoint_every``).
* **Failures.** A pod that raises is failed (its ``error.txt`` says why) and its actor killed. An actor
  process that dies (killed, out of memory) fails its pod, which the orchestrator replaces. A pod whose
  *node* died is *lost*, not failed: the orchestrator records it and resumes it from its checkpoint on
  another node when there is room.
* **Storage.** Pods write their run directories (checkpoints, replay buffers, curves, ``pod.log``) under the
  tournament's run directory, which must be a path every node reaches at the same place (a shared file
  system); the leaderboard is the SQL database, which only the orchestrator writes (PostgreSQL for a
  cluster, so other machines can read it while it runs).
* **Where the cluster is.** ``address`` (``HOST:PORT`` of the head's GCS, or ``auto``) joins a running
  cluster; an address that does not answer is an error within seconds, never a hang. Without one, the
  backend starts a Ray cluster on this machine for the tournament's lifetime, **listening on 127.0.0.1
  only**: Ray's own ``--node-ip-address`` does not do that on Linux, so podium sets
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` before importing Ray, which keeps the node address at 127.0.0.1,
  and refuses to start a local cluster when Ray was imported without it.
* **Adoption.** Ray actors belong to the orchestrator that made them and end with it: after a crash,
  ``podium tournament resume`` resumes the pods from their checkpoints instead of adopting them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podium.config import PodSpec
from podium.machine import CPUS_ENV, local_cpus
from podium.pod import PodInterrupted, PodReport
from podium.rundir import PodDir
from podium.tournament.backends import (
    Backend,
    BackendError,
    PodJob,
    PodOutcome,
    Resources,
    local_gpus,
    run_job,
)

if TYPE_CHECKING:
    from podium.tournament.config import TournamentConfig

__all__ = ["LOOPBACK_ENV", "PodActor", "RayBackend", "import_ray"]

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
"""Set before ``import ray`` for a cluster on 127.0.0.1: the first keeps Ray's node address at 127.0.0.1 (so
every Ray server binds the loopback interface only), the second stops usage reporting."""

_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
_SETTINGS_FRAME = 0x04


def import_ray(loopback: bool = True) -> Any:
    """``import ray``; for a cluster on this machine (``loopback``), with :data:`LOOPBACK_ENV` set first.

    Raises:
        BackendError: Ray is not installed (names the extra to install).
    """
    if loopback and "ray" not in sys.modules:
        for name, value in LOOPBACK_ENV.items():
            os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError:
        raise BackendError("the ray backend needs Ray, which is not installed: pip install 'podium[ray]'") from None
    return ray


class PodActor:
    """A Ray actor that runs pod jobs one after another in its own process (reused across rounds).

    Args:
        gpu_share: the fraction of a GPU this actor was given; below 1, torch may use only that share of the
            GPU's memory (Ray's fractions are bookkeeping; this makes them hold).
    """

    def __init__(self, gpu_share: float = 0.0, cpus: int | None = None) -> None:
        if cpus is not None:  # the pod's share of the machine (a gymnasium env then starts no subprocesses)
            os.environ[CPUS_ENV] = str(cpus)
        if 0 < gpu_share < 1:
            import torch

            if torch.cuda.is_available():
                torch.cuda.set_per_process_memory_fraction(gpu_share)

    def where(self) -> tuple[str, int, str]:
        """(Ray node id, process id, host name) of this actor."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid(), socket.gethostname()

    def run(self, pod_id: str, spec: dict[str, Any], run_dir: str, resume: bool) -> dict[str, Any]:
        """Run one pod job; its output goes to its ``pod.log``. Returns ``{"report": ...}`` when it finished,
        ``{"interrupted": steps}`` when SIGTERM stopped it (its checkpoint is saved). A pod that fails raises
        (after writing its ``error.txt``)."""
        path = PodDir(run_dir)
        _log_to(path)
        try:
            report = run_job(PodJob(pod_id, PodSpec(**spec), path.root, resume))
        except PodInterrupted as exc:  # preempted: SIGTERM, checkpoint written
            print(exc, flush=True)
            return {"interrupted": exc.steps}
        except Exception:
            path.error.write_text(traceback.format_exc())
            traceback.print_exc()
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return {"report": report.to_dict()}


def _log_to(run_dir: PodDir) -> None:
    """Send this process's output (file descriptors 1 and 2) to the pod's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    run_dir.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


PING_TIMEOUT = 2.0
"""Seconds an idle actor has to answer before it is given the next pod (else it is killed)."""
KILL_WAIT = 10.0
"""Seconds a cancel waits for a killed actor to be reported dead (its process gone, with the pod's lock)."""


def _signaller() -> Any:
    """The function of the task that signals a pod's process on its node. Made here, so that Ray ships it by
    value and the worker that runs it imports neither podium nor torch (it starts in a fraction of a second)."""

    def send(pid: int, signum: int) -> bool:
        import os as _os

        try:
            _os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True

    return send


def _undertaker() -> Any:
    """The function of the task that waits, on a pod's node, until the pod's process is gone (made here for the
    reason :func:`_signaller` gives). Returns whether it went within ``timeout`` seconds."""

    def gone(pid: int, timeout: float) -> bool:
        import os as _os
        import time as _time

        end = _time.monotonic() + timeout
        while _time.monotonic() < end:
            try:
                _os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except OSError:
                pass
            try:
                with open(f"/proc/{pid}/stat") as f:  # a zombie holds no lock: it counts as gone
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return True
            except FileNotFoundError:
                if _os.path.isdir("/proc"):  # its entry is gone: so is it (without /proc: the signal test alone)
                    return True
            except (OSError, IndexError):
                pass
            _time.sleep(0.02)
        return False

    return gone


def usable_resources(sizes: Sequence[tuple[float, float]], cpus_per_pod: float, gpus_per_pod: float) -> Resources:
    """What a cluster whose nodes have ``sizes`` (CPUs, GPUs) can give pods of ``cpus_per_pod`` and
    ``gpus_per_pod``: a pod's actor lives on one node, so each node counts only the whole pods it holds (two
    nodes of 3 CPUs hold two 2-CPU pods, not three). GPUs are counted likewise when pods ask for them."""
    cpus = gpus = 0.0
    for node_cpus, node_gpus in sizes:
        fit = math.floor(node_cpus / cpus_per_pod + 1e-9)  # cpus_per_pod > 0 (the config says so)
        if gpus_per_pod > 0:
            fit = min(fit, math.floor(node_gpus / gpus_per_pod + 1e-9))
        cpus += fit * cpus_per_pod
        gpus += fit * gpus_per_pod if gpus_per_pod > 0 else node_gpus
    return Resources(cpus=float(cpus), gpus=float(gpus))


@dataclass
class _Slot:
    """One actor: its handle, the reference to its :meth:`PodActor.where`, and a number for the handle string."""

    actor: Any
    where: Any
    number: int
    idle_since: float = 0.0


@dataclass
class _Running:
    slot: _Slot
    ref: Any
    job: PodJob


@dataclass
class _Doubt:
    """A pod whose actor became unreachable: on ``node`` (None if unknown), since when Ray said ``error``."""

    run: _Running
    node: str | None
    error: str
    until: float
    probe: Any
    """A call to the actor that fails with the reason once Ray knows it."""


class RayBackend(Backend):
    """Runs each pod in a Ray actor (see the module's docstring).

    Args:
        address: the Ray cluster's address (``HOST:PORT`` or ``auto``); None: start a cluster on this machine
            (on 127.0.0.1 only) and stop it at :meth:`shutdown`. When this process is already connected to
            Ray (``ray.init`` was called), that connection is used.
        cpus_per_pod / gpus_per_pod: what each pod's actor declares to Ray (GPU fractions share a GPU).
        max_pods: how many pods the tournament may run at once: the autoscaler (if any) is asked for room
            for that many.
        num_cpus / num_gpus: the size of a local cluster (default: this process's CPUs and visible GPUs).
        idle_timeout: seconds an idle actor waits for the next pod before it is killed.
        grace: seconds a preempted pod has to save its checkpoint and stop before its actor is killed.
        connect_timeout: seconds to wait for the cluster at ``address`` to answer.
        node_timeout: seconds to wait, after a pod's actor became unreachable, for Ray to say whether its node
            died (the pod is then lost and resumes elsewhere) before counting the pod as failed. Ray's health
            checks notice a dead node after about 15 to 30 s by default.

    Raises:
        BackendError: Ray is missing, ``address`` does not answer, a local cluster cannot be kept on
            127.0.0.1, or no node is big enough for one pod.
    """

    name = "ray"
    tick = 0.25

    def __init__(
        self,
        address: str | None = None,
        cpus_per_pod: float = 1.0,
        gpus_per_pod: float = 0.0,
        max_pods: int | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        idle_timeout: float = 30.0,
        grace: float = 10.0,
        connect_timeout: float = 5.0,
        node_timeout: float = 60.0,
    ) -> None:
        if gpus_per_pod > 1 and gpus_per_pod != int(gpus_per_pod):
            raise BackendError(
                f"pool.gpus_per_pod = {gpus_per_pod:g}: Ray gives an actor a fraction of one GPU or whole GPUs; "
                f"use a value below 1 or a whole number ({math.ceil(gpus_per_pod)})"
            )
        self.address = address
        self.cpus_per_pod, self.gpus_per_pod = float(cpus_per_pod), float(gpus_per_pod)
        self.idle_timeout, self.grace, self.node_timeout = idle_timeout, grace, node_timeout
        self._ray = import_ray(loopback=address is None or _loopback_address(address))
        self._connected_here = False
        self._sigterm: Any = None  # this process's SIGTERM handler before ray.init replaced it (see shutdown)
        self._requested = False
        self._running: dict[str, _Running] = {}
        self._idle: list[_Slot] = []
        self._doubtful: dict[str, _Doubt] = {}
        self._slots = 0
        ray = self._ray
        if not ray.is_initialized():
            if threading.current_thread() is threading.main_thread():
                self._sigterm = signal.getsignal(signal.SIGTERM)
            try:
                if address is None:
                    self._start_local(num_cpus, num_gpus)
                else:
                    self._connect(address, connect_timeout)
            except BaseException:
                self._restore_sigterm()
                raise
        try:
            self._check_fits()
            if address is not None and max_pods is not None:
                self._request(max_pods)
        except BaseException:
            self.shutdown()
            raise
        self._actor = ray.remote(PodActor)
        self._send = ray.remote(_signaller())
        self._gone = ray.remote(_undertaker())

    @classmethod
    def from_config(cls, config: TournamentConfig) -> RayBackend:
        pool = config.pool
        device = str(config.pod.get("device", "cpu"))
        if device.startswith("cuda") and pool.gpus_per_pod <= 0:
            raise BackendError(
                f"pod.device is {device!r} but pool.gpus_per_pod is 0: Ray hides the GPUs from an actor that asks "
                "for none; set pool.gpus_per_pod (e.g. 0.25 for four pods per GPU)"
            )
        return cls(
            address=config.address, cpus_per_pod=pool.cpus_per_pod, gpus_per_pod=pool.gpus_per_pod, max_pods=pool.max
        )

    def describe(self) -> str:
        if self.address is None and self._connected_here:
            return "ray backend (a Ray cluster on 127.0.0.1 for this tournament)"
        return f"ray backend at {self.address or 'the Ray cluster this process is connected to'}"

    # ----------------------------------------------------------------- the cluster
    def _start_local(self, num_cpus: float | None, num_gpus: float | None) -> None:
        ray = self._ray
        if ray.util.get_node_ip_address() != "127.0.0.1":
            raise BackendError(
                "a local Ray cluster would listen on every network interface: Ray was imported before podium could "
                "keep it on 127.0.0.1. Set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before importing ray, or start the "
                "cluster yourself and give its address (--address)"
            )
        try:
            ray.init(
                address="local",  # a new cluster, never one found running on this machine
                num_cpus=num_cpus if num_cpus is not None else local_cpus(),
                num_gpus=num_gpus if num_gpus is not None else local_gpus(),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except (RuntimeError, ValueError, OSError, ConnectionError) as exc:
            raise BackendError(f"cannot start a local Ray cluster: {_first_line(exc)}") from None
        self._connected_here = True

    def _connect(self, address: str, timeout: float) -> None:
        ray = self._ray
        if address != "auto":
            host, port = _split_address(address)
            problem = _probe(host, port, timeout)
            if problem is not None:
                raise BackendError(
                    f"no Ray cluster answers at {address}: {problem}. Check --address (the head's HOST:PORT, "
                    "6379 unless 'ray start --head --port' said otherwise) and that the cluster runs"
                )
            if _loopback_address(address) and ray.util.get_node_ip_address() != "127.0.0.1":
                raise BackendError(
                    f"cannot join the Ray cluster at {address} from this process: Ray was imported before podium "
                    "could set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, so it would announce this machine's network "
                    "address instead of 127.0.0.1. Set that variable before importing ray"
                )
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (RuntimeError, ValueError, OSError, ConnectionError) as exc:
            raise BackendError(f"cannot join the Ray cluster at {address}: {_first_line(exc)}") from None
        self._connected_here = True

    def _nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._ray.nodes() if n.get("Alive")]

    def _check_fits(self) -> None:
        """Refuse a pod bigger than every node (it would wait forever), naming the numbers."""
        sizes = [(n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0)) for n in self._nodes()]
        if any(cpus >= self.cpus_per_pod and gpus >= self.gpus_per_pod for cpus, gpus in sizes):
            return
        have = ", ".join(f"{cpus:g} CPUs and {gpus:g} GPUs" for cpus, gpus in sizes) or "no node at all"
        raise BackendError(
            f"a pod asks for {self.cpus_per_pod:g} CPUs and {self.gpus_per_pod:g} GPUs (pool.cpus_per_pod, "
            f"pool.gpus_per_pod), but no node of the Ray cluster has that much: its {len(sizes)} node(s) have "
            f"{have}. Lower pool.cpus_per_pod / pool.gpus_per_pod, or add a node that big (an autoscaling "
            "cluster: keep at least one such node running, e.g. minReplicas: 1)"
        )

    def _request(self, max_pods: int) -> None:
        """Ask the autoscaler (Ray's or KubeRay's, if the cluster has one) for room for ``max_pods`` pods."""
        bundle = {"CPU": self.cpus_per_pod, **({"GPU": self.gpus_per_pod} if self.gpus_per_pod else {})}
        with contextlib.suppress(Exception):  # a cluster without an autoscaler: nothing to ask
            from ray.autoscaler.sdk import request_resources

            request_resources(bundles=[bundle] * max_pods)
            self._requested = True

    def resources(self) -> Resources:
        sizes = [(n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0)) for n in self._nodes()]
        return usable_resources(sizes, self.cpus_per_pod, self.gpus_per_pod)

    # ----------------------------------------------------------------- pods
    def _new_slot(self) -> _Slot:
        actor = self._actor.options(
            num_cpus=self.cpus_per_pod,
            num_gpus=self.gpus_per_pod,
            max_restarts=0,
            max_task_retries=0,
        ).remote(self.gpus_per_pod, max(1, math.ceil(self.cpus_per_pod)))
        self._slots += 1
        return _Slot(actor, actor.where.remote(), self._slots)

    def submit(self, job: PodJob) -> str:
        run_dir = PodDir(job.run_dir)
        run_dir.root.mkdir(parents=True, exist_ok=True)
        run_dir.clear_protocol()
        slot = self._take_idle() or self._new_slot()
        ref = slot.actor.run.remote(job.pod_id, job.spec.model_dump(mode="json"), str(job.run_dir), job.resume)
        self._running[job.pod_id] = _Running(slot, ref, job)
        return f"ray:actor{slot.number}"

    def poll(self, timeout: float | None = None) -> list[PodOutcome]:
        wait = self.tick if timeout is None else timeout
        self._retire_idle(self.idle_timeout)
        done = self._settle()
        if not self._running:
            if not done:
                time.sleep(wait)
            return done
        refs = {run.ref: pod_id for pod_id, run in self._running.items()}
        ready, _ = self._ray.wait(list(refs), num_returns=1, timeout=0 if done else wait)
        if ready:
            ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            outcome = self._outcome(refs[ref], self._running.pop(refs[ref]))
            if outcome is not None:
                done.append(outcome)
        return done

    def _outcome(self, pod_id: str, run: _Running) -> PodOutcome | None:
        """What became of a pod whose task ended; None while that is not known yet (see :meth:`_settle`)."""
        from ray.exceptions import ActorDiedError, RayActorError, RayError

        try:
            result = self._ray.get(run.ref)
        except RayActorError as exc:
            node = self._node(run.slot)
            if isinstance(exc, ActorDiedError) or self._node_died(exc, node):
                return self._actor_gone(pod_id, run.slot, exc, node)
            # unreachable (ActorUnavailableError): the actor's process or its node may be dying, which Ray says
            # only a moment later (a dead node: after its health checks fail); ask the actor until it knows
            until = time.monotonic() + self.node_timeout
            self._doubtful[pod_id] = _Doubt(run, node, _actor_death(exc), until, run.slot.actor.where.remote())
            return None
        except RayError as exc:  # the pod raised (RayTaskError), or its result is gone
            self._kill(run.slot)
            return PodOutcome(pod_id, None, _error_line(run.job.run_dir, exc))
        if "interrupted" in result:  # SIGTERM that this backend did not send (e.g. a node draining)
            self._park(run.slot)
            return PodOutcome(pod_id, None, "stopped by SIGTERM (checkpoint saved)", lost=True)
        self._park(run.slot)
        return PodOutcome(pod_id, PodReport(**result["report"]))

    def _actor_gone(self, pod_id: str, slot: _Slot, error: Exception | None, node: str | None) -> PodOutcome:
        """The outcome of a pod whose actor died: lost if its node died with it, else failed."""
        self._kill(slot)
        if self._node_died(error, node):
            return PodOutcome(pod_id, None, f"its Ray node{self._name_node(node)} died", lost=True)
        return PodOutcome(pod_id, None, f"the pod's Ray actor died: {_actor_death(error)}")

    def _settle(self) -> list[PodOutcome]:
        """Pods whose actor became unreachable: lost once Ray says its node died, failed once Ray says the actor
        died on a live node (or after ``node_timeout`` seconds without an answer)."""
        from ray.exceptions import ActorDiedError, RayActorError

        out = []
        for pod_id, doubt in list(self._doubtful.items()):
            slot = doubt.run.slot
            ready, _ = self._ray.wait([doubt.probe], timeout=0)
            outcome = None
            if ready:
                try:
                    self._ray.get(doubt.probe)
                except ActorDiedError as exc:
                    outcome = self._actor_gone(pod_id, slot, exc, doubt.node)
                except RayActorError:
                    doubt.probe = slot.actor.where.remote()  # still unreachable: ask again
                else:  # it answers again, but its pod's task is gone
                    self._kill(slot)
                    outcome = PodOutcome(pod_id, None, f"the pod's Ray actor lost its task: {doubt.error}")
            if outcome is None and self._node_dead(doubt.node):
                outcome = self._actor_gone(pod_id, slot, None, doubt.node)
            if outcome is None and time.monotonic() >= doubt.until:
                self._kill(slot)
                outcome = PodOutcome(pod_id, None, f"the pod's Ray actor died: {doubt.error}")
            if outcome is not None:
                del self._doubtful[pod_id]
                out.append(outcome)
        return out

    def cancel(self, pod_id: str) -> None:
        """Preempt a pod (see :meth:`cancel_many`)."""
        self.cancel_many([pod_id])

    def cancel_many(self, pod_ids: list[str]) -> None:
        """Preempt pods, together: SIGTERM makes each save its checkpoint and stop; its actor is then reused.
        Every pod is signalled first, then all are waited for at once, so the last gets as long to save as the
        first and stopping many pods takes one ``grace`` period, not one per pod. A pod whose task already ended
        gets no signal. An actor that has not started yet, or whose pod does not stop within ``grace`` seconds,
        is killed (all such at once, each waited for until its process is gone)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray
        unreachable = [self._doubtful.pop(p).run.slot for p in pod_ids if p in self._doubtful]
        self._kill(*unreachable)  # unreachable: waiting on their nodes would only time out
        doomed: list[_Slot] = []  # actors to kill, with a pod in them
        signalled: list[tuple[_Running, Any]] = []  # (the pod, the task that signals it)
        for run in [self._running.pop(p) for p in pod_ids if p in self._running]:
            if ray.wait([run.ref], timeout=0)[0]:  # it ended before it was preempted: its actor is idle, and
                self._retire(run)  # SIGTERM would end its process
            elif not ray.wait([run.slot.where], timeout=0)[0]:  # the actor is not placed yet: nothing to save
                doomed.append(run.slot)
            else:
                try:
                    node, pid, _host = ray.get(run.slot.where)
                    strategy = NodeAffinitySchedulingStrategy(node, soft=False)
                    sent = self._send.options(num_cpus=0, scheduling_strategy=strategy).remote(pid, signal.SIGTERM)
                except Exception:  # the actor or its node is gone
                    doomed.append(run.slot)
                    continue
                signalled.append((run, sent))
        if signalled:  # every signal on its way: now wait for them to arrive, then for the pods to stop
            sent_refs = [sent for _, sent in signalled]
            ray.wait(sent_refs, num_returns=len(sent_refs), timeout=self.grace)
            stopping = []
            for run, sent in signalled:
                try:
                    ray.get(sent, timeout=0)
                except Exception:  # the actor or its node is gone, or the signal did not arrive in time
                    doomed.append(run.slot)
                    continue
                stopping.append(run)
            refs = [run.ref for run in stopping]
            stopped, _ = ray.wait(refs, num_returns=len(refs), timeout=self.grace) if refs else ([], [])
            for run in stopping:
                if run.ref in stopped:
                    self._retire(run, signalled=True)
                else:
                    doomed.append(run.slot)
        self._kill(*doomed, running=True)

    def _retire(self, run: _Running, signalled: bool = False) -> None:
        """Park the actor of a cancelled pod whose task ended, or kill it where it may not serve another pod:
        the task failed, or it finished on its own while the SIGTERM was on its way (that signal then reaches
        an idle actor, whose process it ends, so reusing it would fail the next pod)."""
        try:
            result = self._ray.get(run.ref)
        except Exception:
            result = None
        reusable = isinstance(result, dict) and ("interrupted" in result or not signalled)
        if reusable:
            self._park(run.slot)
        else:
            self._kill(run.slot)

    def where(self, pod_id: str, timeout: float = 30.0) -> tuple[str, int, str] | None:
        """(Ray node id, process id, host name) of the actor running ``pod_id``; None if it is not running here
        or its actor was not placed within ``timeout`` seconds."""
        run = self._running.get(pod_id)
        if run is None:
            return None
        try:
            return tuple(self._ray.get(run.slot.where, timeout=timeout))  # type: ignore[return-value]
        except Exception:
            return None

    def _take_idle(self) -> _Slot | None:
        """An idle actor that still answers, or None. One that died while idle (killed by the OOM killer, say,
        or on a node that went away) is dropped here: given the next pod, it would report that pod as failed.
        Every idle actor is asked at once and has :data:`PING_TIMEOUT` seconds to answer (a live one answers in
        milliseconds; Ray may take half a minute to say that a node died)."""
        if not self._idle:
            return None
        pings = {slot.actor.where.remote(): slot for slot in self._idle}
        answered, _ = self._ray.wait(list(pings), num_returns=len(pings), timeout=PING_TIMEOUT)
        alive = []
        for ref in answered:
            try:
                self._ray.get(ref)
            except Exception:
                continue
            alive.append(pings[ref])
        for slot in [s for s in self._idle if all(s is not a for a in alive)]:
            self._kill(slot)
        self._idle = alive
        return self._idle.pop() if self._idle else None

    def _park(self, slot: _Slot) -> None:
        slot.idle_since = time.monotonic()
        self._idle.append(slot)

    def _kill(self, *slots: _Slot, running: bool = False) -> None:
        """Kill the ``slots``' actors. With a pod ``running`` in them, also wait (up to :data:`KILL_WAIT` s, for
        all of them together) until their processes are gone: ``ray.kill`` only asks (Ray reports the actor dead
        about 0.1 s before its process exits), and the pod resumed at once would find its run directory still
        locked by the old process, or its files still being written. Not on a node that is gone (nothing runs
        there any more)."""
        ray = self._ray
        places = []
        for slot in slots:
            if running and ray.wait([slot.where], timeout=0)[0]:
                with contextlib.suppress(Exception):
                    places.append(ray.get(slot.where))
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
        places = [place for place in places if not self._node_dead(place[0])]
        if not places:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        waiters = []
        for node, pid, _host in places:
            strategy = NodeAffinitySchedulingStrategy(node, soft=False)
            with contextlib.suppress(Exception):
                waiters.append(self._gone.options(num_cpus=0, scheduling_strategy=strategy).remote(pid, KILL_WAIT))
        with contextlib.suppress(Exception):
            ray.get(waiters, timeout=KILL_WAIT + 5)

    def _retire_idle(self, older_than: float) -> None:
        now = time.monotonic()
        for slot in [s for s in self._idle if now - s.idle_since >= older_than]:
            self._idle.remove(slot)
            self._kill(slot)

    def _node(self, slot: _Slot) -> str | None:
        """The id of the node ``slot``'s actor was placed on (None if it never started)."""
        ready, _ = self._ray.wait([slot.where], timeout=0)
        if not ready:
            return None
        try:
            return self._ray.get(slot.where)[0]
        except Exception:
            return None

    def _name_node(self, node: str | None) -> str:
        """`` ADDRESS (ID)`` of a node for messages ("" when unknown)."""
        if node is None:
            return ""
        address = next((n.get("NodeManagerAddress") for n in self._ray.nodes() if n["NodeID"] == node), None)
        return f" {address} ({node[:8]})" if address else f" {node[:8]}"

    def _node_dead(self, node: str | None) -> bool:
        """Whether Ray has marked ``node`` dead (False when it is unknown)."""
        if node is None:
            return False
        alive = {n["NodeID"]: bool(n.get("Alive")) for n in self._ray.nodes()}
        return not alive.get(node, False)

    def _node_died(self, error: Exception | None, node: str | None) -> bool:
        """Whether a dead actor's node died: Ray's error says so, or Ray has marked the node dead."""
        said = error is not None and ("node has died" in str(error) or "node died" in str(error))
        return said or self._node_dead(node)

    def shutdown(self) -> None:
        self.cancel_many([*self._running, *self._doubtful])
        self._retire_idle(0.0)
        ray = self._ray
        if self._requested:
            with contextlib.suppress(Exception):
                from ray.autoscaler.sdk import request_resources

                request_resources(bundles=[])
            self._requested = False
        if self._connected_here and ray.is_initialized():
            ray.shutdown()
        self._connected_here = False
        self._restore_sigterm()

    def _restore_sigterm(self) -> None:
        """Give this process back the SIGTERM handler it had before ``ray.init``, which installs one that raises
        SystemExit and leaves it there after ``ray.shutdown``: a program that ran a tournament on a Ray cluster of
        its own would otherwise no longer end on SIGTERM as it did before."""
        if self._sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None


# ----------------------------------------------------------------- helpers
def _split_address(address: str) -> tuple[str, int]:
    if "://" in address:
        raise BackendError(
            f"address {address!r}: give the Ray head's GCS address HOST:PORT (e.g. 10.0.0.5:6379) or 'auto'; "
            "Ray Client addresses (ray://) are not supported"
        )
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise BackendError(f"address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:6379) or 'auto'")
    return host.strip("[]"), int(port)


def _loopback_address(address: str) -> bool:
    if address == "auto":
        return False
    host = address.rpartition(":")[0].strip("[]") or address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _probe(host: str, port: int, timeout: float) -> str | None:
    """None if a gRPC server (Ray's GCS is one) answers at ``host:port`` within ``timeout`` seconds, else what
    went wrong. ``ray.init`` itself would retry for minutes against a port that is open but is not Ray."""
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)
    head = b""
    with conn, contextlib.suppress(OSError):
        conn.settimeout(timeout)
        conn.sendall(_HTTP2_PREFACE)
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    if len(head) < 9 or head[3] != _SETTINGS_FRAME:
        return "something listens there, but it is not a Ray cluster (it does not answer as Ray's GCS does)"
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _actor_death(exc: BaseException | None) -> str:
    """The line of Ray's actor-death message that says why (e.g. its worker process died)."""
    if exc is None:
        return "unknown cause"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    why = [ln for ln in lines if ln.lower().startswith("the actor") and "unexpectedly" not in ln]
    return why[0] if why else (lines[-1] if lines else type(exc).__name__)


def _error_line(run_dir: Path, exc: BaseException) -> str:
    """The last line of the pod's ``error.txt`` (its exception), else of Ray's error."""
    path = PodDir(run_dir).error
    if path.is_file():
        lines = [ln for ln in path.read_text(errors="replace").strip().splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    cause = getattr(exc, "cause", None)
    return f"{type(cause).__name__}: {cause}" if cause is not None else _first_line(exc)
