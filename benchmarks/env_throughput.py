"""Env throughput: podium's tensor envs vs gymnasium, same machine, same run.

For each number of sub-envs N it measures steps/second (sub-env steps, all envs together) of
  * podium's tensor CartPole-v1 and Pendulum-v1 (eager; ``--compile`` adds torch.compile rows),
  * gymnasium's ``SyncVectorEnv`` over the same envs (up to what can be built and stepped in
    ``--peer-budget`` seconds),
  * gymnasium's own numpy-vectorized CartPole (``make_vec(..., vectorization_mode="vector_entry_point")``),
with random actions drawn every step by each side's native generator (torch / numpy), auto-reset
included, and prints the ratios. Usage::

    python benchmarks/env_throughput.py                       # CPU, N = 1 ... 65536
    python benchmarks/env_throughput.py --device cuda --sizes 1024,16384,262144,1048576,4194304
    python benchmarks/env_throughput.py --json results.json   # also write the raw numbers
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

import podium.envs as envs
from podium.machine import describe


def timed(step: Callable[[], None], num_envs: int, seconds: float, sync: Callable[[], None] = lambda: None) -> float:
    """Steps/second of ``step`` (one batched step of ``num_envs`` sub-envs) over about ``seconds``."""
    for _ in range(5):
        step()
    sync()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(10):
            step()
        n += 10
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n * num_envs / elapsed


def podium_sps(
    env_id: str, num_envs: int, device: str, seconds: float, compile: bool = False, validate: bool = True
) -> float:
    env = envs.make(env_id, num_envs=num_envs, device=device, seed=0, compile=compile, validate_actions=validate)
    env.reset()
    gen = torch.Generator(device=env.device).manual_seed(0)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    if env.discrete:
        n = int(env.single_action_space.n)

        def step() -> None:
            env.step(torch.randint(0, n, (num_envs,), generator=gen, device=env.device))

    else:
        shape = (num_envs, *env.single_action_space.shape)
        high = float(env.single_action_space.high[0])

        def step() -> None:
            env.step(torch.rand(shape, generator=gen, device=env.device) * (2 * high) - high)

    return timed(step, num_envs, seconds, sync)


def gym_sps(env_id: str, num_envs: int, seconds: float, mode: str) -> float:
    if mode == "sync":
        vec = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs)
    else:
        vec = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    space = vec.single_action_space
    if isinstance(space, gym.spaces.Discrete):

        def step() -> None:
            vec.step(rng.integers(0, space.n, num_envs))

    else:

        def step() -> None:
            vec.step(rng.uniform(space.low, space.high, (num_envs, *space.shape)).astype(np.float32))

    try:
        return timed(step, num_envs, seconds)
    finally:
        vec.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,64,1024,4096,16384,65536", help="comma-separated numbers of sub-envs")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per cell")
    parser.add_argument("--peer-budget", type=float, default=60.0, help="skip gymnasium SyncVectorEnv above this")
    parser.add_argument("--compile", action="store_true", help="also measure podium with torch.compile")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="podium's envs without their per-step action check (on a GPU: one host sync per step less)",
    )
    parser.add_argument("--json", default=None, help="write raw results to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    machine = describe(gpu=args.device.startswith("cuda"))
    checks = "off (--no-validate)" if args.no_validate else "on"
    print(f"machine: {machine}; torch threads {torch.get_num_threads()}; gymnasium {gym.__version__}; "
          f"podium's action checks {checks}")  # fmt: skip
    results: list[dict[str, float | int | None]] = []
    header = f"{'N':>8} | {'podium CP':>12} {'gym vec CP':>12} {'gym Sync CP':>12} | {'vs Sync':>8} {'vs vec':>7}"
    header += f" | {'podium Pend':>12} {'gym Sync Pend':>13} {'vs Sync':>8}"
    if args.compile:
        header += f" | {'CP compiled':>12} {'Pend compiled':>13}"
    print(header)
    print("-" * len(header))
    sync_too_slow = False
    valid = not args.no_validate
    for n in sizes:
        row: dict[str, float | int | None] = {"num_envs": n}
        row["podium_cartpole"] = podium_sps("CartPole-v1", n, args.device, args.seconds, validate=valid)
        row["podium_pendulum"] = podium_sps("Pendulum-v1", n, args.device, args.seconds, validate=valid)
        row["gym_vector_cartpole"] = gym_sps("CartPole-v1", n, args.seconds, "vector")
        row["gym_sync_cartpole"] = row["gym_sync_pendulum"] = None
        if not sync_too_slow:
            t0 = time.perf_counter()
            row["gym_sync_cartpole"] = gym_sps("CartPole-v1", n, args.seconds, "sync")
            row["gym_sync_pendulum"] = gym_sps("Pendulum-v1", n, args.seconds, "sync")
            # building and stepping the next size (4x or more) would exceed the peer budget
            sync_too_slow = (time.perf_counter() - t0) * 4 > args.peer_budget
        if args.compile:
            for env_id, name in (("CartPole-v1", "cartpole"), ("Pendulum-v1", "pendulum")):
                row[f"podium_{name}_compiled"] = podium_sps(env_id, n, args.device, args.seconds, True, valid)
        results.append(row)

        def fmt(v: float | None, width: int) -> str:
            return f"{v / 1e6:>{width - 1}.2f}M" if v is not None else f"{'—':>{width}}"

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:>7.1f}x" if a is not None and b is not None else f"{'—':>8}"

        line = f"{n:>8} | {fmt(row['podium_cartpole'], 12)} {fmt(row['gym_vector_cartpole'], 12)} "
        line += f"{fmt(row['gym_sync_cartpole'], 12)} | {ratio(row['podium_cartpole'], row['gym_sync_cartpole'])}"
        line += f" {ratio(row['podium_cartpole'], row['gym_vector_cartpole'])[1:]}"
        line += f" | {fmt(row['podium_pendulum'], 12)} {fmt(row['gym_sync_pendulum'], 13)} "
        line += ratio(row["podium_pendulum"], row["gym_sync_pendulum"])
        if args.compile:
            line += f" | {fmt(row['podium_cartpole_compiled'], 12)} {fmt(row['podium_pendulum_compiled'], 13)}"
        print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            found = {"device": args.device, "validate_actions": not args.no_validate, "results": results}
            json.dump({"machine": machine, **found}, f, indent=2)


if __name__ == "__main__":
    main()
