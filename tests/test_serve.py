"""The policy server (podium/deploy/serve.py), run as a real uvicorn server on 127.0.0.1: its actions are the
policy's, for one observation and a batch, continuous and discrete; bad observations get a 422 that says what is
wrong, oversized batches a 413; /info and /health; the CLI command starts, answers and stops on Ctrl-C, and
refuses a path without a checkpoint before it listens."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import podium
from podium.cli import app as cli_app
from podium.deploy import make_app
from podium.deploy.http import exposure_warning, guard, is_loopback

httpx = pytest.importorskip("httpx", reason="the test extra")
uvicorn = pytest.importorskip("uvicorn", reason="the deploy extra: pip install 'podium[deploy]'")

FAST = {"tensorboard": False, "eval_episodes": 4, "eval_mode": "inline", "progress": False}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "pendulum": Path(podium.train("Pendulum-v1", "td3", steps=1024, seed=0, run_dir=root / "p", **FAST).run_dir),
        "cartpole": Path(podium.train("CartPole-v1", "ppo", steps=1024, seed=0, run_dir=root / "c", **FAST).run_dir),
    }


class _Server:
    """A uvicorn server on 127.0.0.1 and a free port, in a thread."""

    def __init__(self, application: object) -> None:
        config = uvicorn.Config(application, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.02)
        (sock,) = [s for server in self.server.servers for s in server.sockets]
        host, port = sock.getsockname()[:2]
        self.client = httpx.Client(base_url=f"http://{host}:{port}", timeout=10)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture(scope="module")
def pendulum(runs: dict[str, Path]) -> Iterator[httpx.Client]:
    with _Server(make_app(runs["pendulum"], max_batch=100)) as client:
        yield client


def test_actions_are_the_policys_for_one_observation_and_a_batch(runs: dict[str, Path], pendulum: httpx.Client) -> None:
    policy = podium.load(runs["pendulum"])
    obs = np.random.default_rng(0).uniform(-1, 1, size=(20, 3)).astype(np.float32)
    reply = pendulum.post("/act", json={"obs": obs.tolist()})
    assert reply.status_code == 200
    got = np.asarray(reply.json()["action"], dtype=np.float32)
    np.testing.assert_allclose(got, policy.act(obs), atol=1e-6)
    assert got.shape == (20, 1)
    single = pendulum.post("/act", json={"obs": obs[0].tolist()}).json()["action"]
    np.testing.assert_allclose(single, policy.act(obs[0]), atol=1e-6)
    assert len(single) == 1 and isinstance(single[0], float)


def test_exploring_actions_are_samples_inside_the_bounds(pendulum: httpx.Client) -> None:
    obs = [[1.0, 0.0, 0.0]] * 50
    deterministic = pendulum.post("/act", json={"obs": obs}).json()["action"]
    sampled = np.asarray(pendulum.post("/act", json={"obs": obs, "deterministic": False}).json()["action"])
    assert len({round(a[0], 6) for a in deterministic}) == 1
    assert sampled.std() > 0 and np.all(np.abs(sampled) <= 2.0)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a server warns nothing per bad request
@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"obs": [1.0, 2.0]}, 422, "shape [3]"),
        ({"obs": [[1, 2, 3], [1, 2]]}, 422, "same length"),
        ({"obs": "hello"}, 422, "must be numbers"),
        ({"obs": None}, 422, "must be numbers"),
        ({"obs": []}, 422, "must be numbers"),
        ({"obs": [[0.0, 0.0, 0.0]] * 101}, 413, "at most 100"),
        ({"obs": [0.0] * 3000}, 413, "at most 100"),
        ({"observation": [0, 0, 0]}, 422, "obs"),
        ({"obs": [1.0, 0.0, 1e39]}, 422, "beyond float32's range"),
        ({"obs": [1e300, 0.0, 0.0]}, 422, "beyond float32's range"),
        ({"obs": [[1, 2, 3], ["a", 2, 3]]}, 422, "must be numbers"),
        ({"obs": {"a": 1}}, 422, "must be numbers"),
        ({"obs": [10**40, 0, 0]}, 422, "beyond float32's range"),
        ({"obs": [1.0, 0.0, 0.0], "deterministic": "yes"}, 422, "deterministic"),
    ],
    ids=[
        "shape",
        "ragged",
        "string",
        "null",
        "empty",
        "too-many",
        "too-long",
        "misnamed",
        "overflow",
        "huge",
        "string-inside",
        "object",
        "huge-int",
        "lax-bool",
    ],
)
def test_bad_observations_are_answered_with_what_is_wrong(
    pendulum: httpx.Client, body: dict[str, object], status: int, says: str
) -> None:
    reply = pendulum.post("/act", json=body)
    assert reply.status_code == status
    assert says in str(reply.json()["detail"])


def test_non_finite_observations_are_refused(pendulum: httpx.Client) -> None:
    reply = pendulum.post("/act", content=b'{"obs": [NaN, 0, 0]}', headers={"content-type": "application/json"})
    assert reply.status_code == 422 and "NaN, infinity" in reply.json()["detail"]


def test_one_observation_is_not_counted_as_a_batch(runs: dict[str, Path]) -> None:
    with _Server(make_app(runs["cartpole"], max_batch=2)) as client:
        assert client.post("/act", json={"obs": [0.1, 0.2, 0.3, 0.4]}).status_code == 200
        assert client.post("/act", json={"obs": [[0.1, 0.2, 0.3, 0.4]] * 3}).status_code == 413


def test_a_body_too_large_is_refused_before_it_is_read(pendulum: httpx.Client) -> None:
    body = b'{"obs": [' + b"0.0, " * 200_000 + b"0.0]}"
    reply = pendulum.post("/act", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 413 and "request body" in reply.json()["detail"]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a server warns nothing per bad request
def test_discrete_observations_are_states_or_one_hot_batches(tmp_path: Path) -> None:
    report = podium.train("FrozenLake-v1", "dqn", steps=512, seed=0, run_dir=tmp_path / "lake", **FAST)
    policy = podium.load(report.run_dir)
    states = np.arange(16)
    want = policy.act(states).tolist()
    one_hot = np.eye(16, dtype=int)
    with _Server(make_app(report.run_dir, max_batch=16)) as client:
        assert client.post("/act", json={"obs": 5}).json()["action"] == want[5]
        assert client.post("/act", json={"obs": states.tolist()}).json()["action"] == want
        assert client.post("/act", json={"obs": one_hot.tolist()}).json()["action"] == want  # ints, as JSON has
        assert client.post("/act", json={"obs": one_hot[5:6].tolist()}).json()["action"] == want[5:6]
        assert client.post("/act", json={"obs": [0.0] * 17}).status_code == 413
        for outside in (16, -1, 1e30):  # 1e30: a RuntimeWarning per request (the cast to int64)
            reply = client.post("/act", json={"obs": outside})
            assert reply.status_code == 422 and "Discrete space of 16 values" in reply.json()["detail"]


def test_info_and_health(pendulum: httpx.Client) -> None:
    assert pendulum.get("/health").json() == {"status": "ok"}
    info = pendulum.get("/info").json()
    assert info["env"] == "Pendulum-v1" and info["algo"] == "td3" and info["obs_dim"] == 3
    assert info["checkpoints"] == ["p/best.pt"] and not info["discrete_actions"]
    assert info["max_batch"] == 100


def test_the_default_batch_limit_keeps_a_large_observations_request_to_a_bounded_body() -> None:
    from podium.deploy.serve import MAX_BATCH, MAX_NUMBERS, batch_limit

    assert batch_limit(3) == MAX_BATCH == 65536  # small observations: the batch limit
    assert batch_limit(348) == 12052 and batch_limit(348) * 348 <= MAX_NUMBERS  # Humanoid: ~130 MB, not ~730 MB
    assert batch_limit(10**7) == 1  # one observation always fits
    assert batch_limit(348, max_batch=65536) == 65536  # a limit given is the limit
    with pytest.raises(ValueError, match="max_batch must be at least 1, got 0"):
        batch_limit(3, max_batch=0)


def test_discrete_actions_are_ints_and_an_ensemble_is_served(runs: dict[str, Path]) -> None:
    ensemble = podium.load_ensemble([runs["cartpole"], runs["cartpole"]])
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    with _Server(make_app(ensemble)) as client:
        batch = client.post("/act", json={"obs": obs.tolist()}).json()["action"]
        single = client.post("/act", json={"obs": obs[3].tolist()}).json()["action"]
        assert client.get("/info").json()["checkpoints"] == ["c/best.pt", "c/best.pt"]
    assert batch == ensemble.act(obs).tolist() and all(isinstance(a, int) for a in batch)
    assert single == batch[3]


def test_a_mixed_ensemble_is_named_by_all_its_algorithms(runs: dict[str, Path], tmp_path: Path) -> None:
    """/info called a tournament's mixed top 3 by its first member's algorithm."""
    ppo = podium.train("Pendulum-v1", "ppo", steps=256, seed=0, run_dir=tmp_path / "ppo", **FAST).run_dir
    ensemble = podium.load_ensemble([runs["pendulum"], ppo, runs["pendulum"]])
    with _Server(make_app(ensemble)) as client:
        assert client.get("/info").json()["algo"] == "td3+ppo"
        assert client.get("/openapi.json").json()["info"]["title"] == "podium policy: td3+ppo on Pendulum-v1"


def test_a_server_off_loopback_is_warned_about() -> None:
    assert exposure_warning("127.0.0.1", "the policy server") is None
    assert exposure_warning("localhost", "the policy server") is None
    assert "without authentication" in str(exposure_warning("0.0.0.0", "the policy server"))


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.3.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("example.org")


@pytest.mark.parametrize(
    ("bound", "host", "status"),
    [("::1", "[::1]:8050", 200), ("::1", "localhost:8050", 200), ("::1", "evil.example:8050", 400),
     ("127.0.0.1", "127.0.0.1:8050", 200), ("127.0.0.1", "evil.example", 400)],
)  # fmt: skip
def test_the_loopback_guard_reads_the_host_header_ipv6_too(bound: str, host: str, status: int) -> None:
    import asyncio

    async def ok(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "query_string": b"",
             "headers": [(b"host", host.encode())], "scheme": "http", "server": (bound, 8050)}  # fmt: skip
    asyncio.run(guard(ok, bound)(scope, receive, send))
    assert sent[0]["status"] == status


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_cli_serves_until_ctrl_c(runs: dict[str, Path]) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium.cli", "serve", str(runs["cartpole"]), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/act", json={"obs": [0.0, 0.0, 0.0, 0.0]}, timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not answer within 60 s"
                time.sleep(0.2)
        assert reply.status_code == 200 and reply.json()["action"] in (0, 1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert f"http://127.0.0.1:{port}" in output and "warning" not in output


def test_the_cli_refuses_a_run_without_a_checkpoint_before_listening(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli_app, ["serve", str(tmp_path)])
    assert result.exit_code == 2 and "podium run directory" in result.output and "serving" not in result.output


def test_a_body_sent_without_its_length_is_refused_as_it_arrives(runs: dict[str, Path]) -> None:
    def chunks():  # no Content-Length: httpx sends it chunked; 100 x 1 KiB against a 10-observation limit
        yield b'{"obs": ['
        for _ in range(100):
            yield b"0.0, " * 200
        yield b"0.0]}"

    with _Server(make_app(runs["pendulum"], max_batch=10)) as client:
        reply = client.post("/act", content=chunks(), headers={"content-type": "application/json"})
        assert reply.status_code == 413 and "(sent without its length); at most 5,056" in reply.json()["detail"]
        assert client.post("/act", json={"obs": [0.1, 0.2, 0.3]}).status_code == 200  # the server goes on
