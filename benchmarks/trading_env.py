"""Steps per second of the batched stock-trading env against FinRL-style single envs, same data, same run.

podium: ``StockTradingVecEnv`` with N accounts stepping together as tensors.
peer:   N copies of ``StockTradingEnv`` (one account each, pandas row lookups and a Python loop over
        stocks, as FinRL writes it) driven by ``gymnasium.vector.SyncVectorEnv``.

Both trade the shipped Dow-29 training period (29 stocks, 1,762 days) with random actions drawn
before the timing starts. A "step" is one account trading one day, so steps/s = N × batches/s.
The peer gets ``--peer-seconds`` per size (it stops after the first batch that crosses it).

    python benchmarks/trading_env.py                    # CPU, one core each (the peer is single-threaded)
    python benchmarks/trading_env.py --threads 0        # let torch use every core
    python benchmarks/trading_env.py --device cuda      # the batched env on a GPU (the peer stays on CPU)
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from podium.finance.env import StockTradingEnv, StockTradingVecEnv
from podium.finance.market import MarketData, load_market
from podium.machine import describe

ACTION_POOL = 8  # distinct random action batches, cycled


def bench_podium(market: MarketData, num_envs: int, device: str, seconds: float, compile: bool) -> float:
    """Steps per second of one StockTradingVecEnv with ``num_envs`` accounts."""
    env = StockTradingVecEnv(num_envs=num_envs, data=market, device=device, compile=compile)
    env.reset(seed=0)
    generator = torch.Generator(device=device).manual_seed(0)
    pool = [
        torch.rand(num_envs, market.num_stocks, device=device, generator=generator) * 2 - 1 for _ in range(ACTION_POOL)
    ]
    for i in range(20):  # warm-up (and compilation)
        env.step(pool[i % ACTION_POOL])
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    sync()
    steps, start = 0, time.perf_counter()
    while True:
        for i in range(50):
            env.step(pool[i % ACTION_POOL])
        steps += 50
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps * num_envs / elapsed


def bench_peer(market: MarketData, num_envs: int, seconds: float) -> tuple[float, int]:
    """Steps per second of ``num_envs`` StockTradingEnv in a SyncVectorEnv, and the batches timed."""
    envs = gym.vector.SyncVectorEnv([lambda: StockTradingEnv(data=market) for _ in range(num_envs)])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    pool = [rng.uniform(-1, 1, (num_envs, market.num_stocks)).astype(np.float32) for _ in range(ACTION_POOL)]
    envs.step(pool[0])  # warm-up
    steps, start = 0, time.perf_counter()
    while True:
        envs.step(pool[steps % ACTION_POOL])
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            envs.close()
            return steps * num_envs / elapsed, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024, 4096], help="numbers of accounts N")
    parser.add_argument("--device", default="cpu", help="device of the batched env (cpu, cuda)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timing window of the batched env per size")
    parser.add_argument("--peer-seconds", type=float, default=5.0, help="timing window of the peer per size")
    parser.add_argument("--compile", action="store_true", help="fuse the batched env's step with torch.compile")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: one core each, as the peer uses; 0 = torch's choice)",
    )
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    market = load_market(None)  # shipped Dow-29, 2009-01-02..2015-12-31, FinRL indicators
    print(f"market: {market.num_stocks} stocks x {market.num_days} days; torch {torch.__version__}, ", end="")
    print(f"{torch.get_num_threads()} threads, {describe(gpu=False)}", end="")
    if args.device.startswith("cuda"):
        print(f", {torch.cuda.get_device_name(torch.device(args.device))}", end="")
    print(f"\nbatched env on {args.device}{' (compiled)' if args.compile else ''}; peer: SyncVectorEnv on CPU\n")
    header = f"{'N':>6} | {'podium steps/s':>15} | {'peer steps/s':>13} | {'peer batches':>12} | {'ratio':>8}"
    print(header)
    print("-" * len(header))
    for num_envs in args.sizes:
        ours = bench_podium(market, num_envs, args.device, args.seconds, args.compile)
        theirs, batches = bench_peer(market, num_envs, args.peer_seconds)
        print(f"{num_envs:>6} | {ours:>15,.0f} | {theirs:>13,.0f} | {batches:>12} | {ours / theirs:>7.1f}x", flush=True)


if __name__ == "__main__":
    main()
