"""What one action costs a deployed policy: podium's ``Policy.act`` (torch), its ONNX export run by onnxruntime,
``podium serve`` over HTTP on loopback, and Stable-Baselines3's ``model.predict`` on the same network shape,
in the same run.

The policy: PPO on Pendulum-v1 with a 64x64 tanh MLP (podium's PPO network and SB3's ``MlpPolicy`` default),
trained briefly (the weights do not change the cost). Timed: a single observation (a controller's loop) and a
batch of 1,024 (offline scoring), on one torch / onnxruntime thread, after a warm-up; the median of
``--repeats`` timings of ``--calls`` calls each. HTTP: one client making sequential requests with
keep-alive (httpx) to a uvicorn server in this process's thread.

    python benchmarks/deploy.py
    python benchmarks/deploy.py --calls 2000 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from podium.machine import describe


def timed(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Median microseconds per call of ``fn`` over ``repeats`` timings of ``calls`` calls (after a warm-up)."""
    for _ in range(max(10, calls // 10)):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="calls per timing (a tenth for batches of 1,024)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import onnxruntime as ort
    import uvicorn

    import podium
    from podium.deploy import export_onnx, make_app
    from podium.deploy.http import guard

    print(f"machine: {describe()}; onnxruntime {ort.__version__}; one thread each")
    workdir = tempfile.TemporaryDirectory()
    tmp = Path(workdir.name)
    hparams = {"hidden_sizes": [64, 64]}
    report = podium.train(
        "Pendulum-v1", "ppo", steps=2048, seed=0, run_dir=tmp / "run", progress=False, hparams=hparams
    )
    policy = podium.load(report.run_dir)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(export_onnx(policy)), options, providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(0)
    one = rng.uniform(-1, 1, size=3).astype(np.float32)
    batch = rng.uniform(-1, 1, size=(1024, 3)).astype(np.float32)
    rows: list[tuple[str, float, float]] = []

    def add(name: str, single: Callable[[], object], batched: Callable[[], object]) -> None:
        rows.append(
            (name, timed(single, args.calls, args.repeats), timed(batched, max(1, args.calls // 10), args.repeats))
        )

    add("podium Policy.act (torch)", lambda: policy.act(one), lambda: policy.act(batch))
    add(
        "podium ONNX (onnxruntime)",
        lambda: session.run(None, {"obs": one[None]}),
        lambda: session.run(None, {"obs": batch}),
    )
    try:
        from stable_baselines3 import PPO as SB3PPO

        model = SB3PPO("MlpPolicy", "Pendulum-v1", device="cpu", seed=0)  # pi and vf: 64x64 tanh
        add(
            "SB3 model.predict",
            lambda: model.predict(one, deterministic=True),
            lambda: model.predict(batch, deterministic=True),
        )
    except ImportError:
        print('(SB3 row skipped: pip install -e ".[bench]")')

    import httpx

    app = guard(make_app(policy), "127.0.0.1")  # as podium serve runs it
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise SystemExit("the policy server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        body_one, body_batch = {"obs": one.tolist()}, {"obs": batch.tolist()}
        add(
            "podium serve, HTTP on loopback",
            lambda: client.post("/act", json=body_one).raise_for_status(),
            lambda: client.post("/act", json=body_batch).raise_for_status(),
        )
    server.should_exit = True
    thread.join(10)
    workdir.cleanup()

    print("\n| way | one observation, µs | batch of 1,024, µs | batch, µs per observation |")
    print("|---|---:|---:|---:|")
    for name, single, batched in rows:
        print(f"| {name} | {single:,.0f} | {batched:,.0f} | {batched / 1024:.2f} |")


if __name__ == "__main__":
    main()
