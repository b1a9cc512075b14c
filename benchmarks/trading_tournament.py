"""The Dow-29 trading tournament over seeds, with the validation protocol of ``examples/stock_dow29.yaml``.

Per seed: ``podium.tournament.tournament("examples/stock_dow29.yaml", seed=s, seconds=S)`` — train on
2009-2014, rank the pods by their Sharpe ratio on 2015 (validation), nothing chosen by looking at the test
period — then the config's own backtest on 2016-01-04..2017-11-10: the champion, and the ensemble of the
best three beside it, against buy-and-hold of DIA and of the equal-weight basket (generalisation curve off
here). Prints one row per seed and strategy and the medians over seeds.

The same champion and ensemble are backtested again with ``fill="next_close"``: their orders fill at the
next day's close instead of the close their observation already shows (the env's default, FinRL's). The
difference is what that convention adds to the test metrics.

    python benchmarks/trading_tournament.py                         # 3 seeds, 480 s of training each
    python benchmarks/trading_tournament.py --seeds 0,1,2,3,4 --seconds 240
    python benchmarks/trading_tournament.py --seeds 0,1,2,3,4 --seconds 240 --scheme truncation  # PBT

``--scheme`` overrides the config's ``generator.scheme`` (the file's: ``leaderboard``, as its tables were measured).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from podium.machine import describe

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "stock_dow29.yaml"
METRICS = ("sharpe_ratio", "annual_return", "max_drawdown")


def run(seed: int, seconds: float, scheme: str) -> dict[str, dict[str, float]]:
    from podium.finance.backtest import backtest as run_backtest
    from podium.tournament import leaderboard, tournament
    from podium.tournament.config import load_tournament_config

    config = load_tournament_config(CONFIG)
    backtest = config.backtest
    assert backtest is not None
    generator = {**config.generator.model_dump(exclude_unset=True), "scheme": scheme}
    with tempfile.TemporaryDirectory() as tmp:
        report = tournament(
            str(CONFIG),
            run_dir=os.path.join(tmp, "t"),
            progress=False,
            seed=seed,
            seconds=seconds,
            generator=generator,
            backtest={**backtest.model_dump(), "generalisation": False},
        )
        rows: dict[str, dict[str, float]] = {}
        champion = report.extra["backtest"]["metrics"]
        rows["validation Sharpe (champion)"] = {"sharpe_ratio": report.champion.score_mean}
        for key, name in (("backtest", "champion"), ("backtest_ensemble", "top-3 ensemble")):
            if key in report.extra:
                metrics = report.extra[key]["metrics"]
                rows[name] = {m: metrics[m]["policy"] for m in METRICS}
        entries = leaderboard(os.path.join(tmp, "t"))
        for name, members in (("champion", entries[:1]), ("top-3 ensemble", entries[: backtest.top_k])):
            if name in rows:  # the same policies, their orders filled one close later
                later = run_backtest([e.checkpoint for e in members], backtest.start, backtest.end, fill="next_close")
                rows[f"{name}, next-close fills"] = {m: float(later.metrics.loc["policy", m]) for m in METRICS}
        for strategy in champion["sharpe_ratio"]:
            if strategy != "policy":
                rows[strategy] = {m: champion[m][strategy] for m in METRICS}
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--seconds", type=float, default=480.0, help="training budget of each tournament")
    parser.add_argument(
        "--scheme", choices=("leaderboard", "truncation"), default=None, help="generator.scheme (default: the config's)"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"machine: {describe()}")
    from podium.tournament.config import load_tournament_config

    scheme = args.scheme or load_tournament_config(CONFIG).generator.scheme
    print(
        f"{CONFIG.name}: {args.seconds:g} s of training per tournament, seeds {seeds}, generator.scheme {scheme}; "
        "test 2016-01-04..2017-11-10"
    )
    results: dict[str, list[dict[str, float]]] = {}
    for seed in seeds:
        for name, row in run(seed, args.seconds, scheme).items():
            results.setdefault(name, []).append(row)
            text = ", ".join(f"{k} {v:.3f}" for k, v in row.items())
            print(f"  seed {seed} {name:<30} {text}", flush=True)
    print("\n| strategy | median test Sharpe | worst | median annual return | median max drawdown |")
    print("|---|---:|---:|---:|---:|")
    for name, rows in results.items():
        if name.startswith("validation"):
            continue
        sharpe = [r["sharpe_ratio"] for r in rows]
        ret = statistics.median(r["annual_return"] for r in rows)
        dd = statistics.median(r["max_drawdown"] for r in rows)
        print(f"| {name} | {statistics.median(sharpe):.2f} | {min(sharpe):.2f} | {ret:+.2%} | {dd:.2%} |")
    validation = [r["sharpe_ratio"] for r in results.get("validation Sharpe (champion)", [])]
    if validation:
        print(f"\nchampion's validation (2015) Sharpe: median {statistics.median(validation):.2f}")


if __name__ == "__main__":
    main()
