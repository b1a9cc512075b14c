"""Backtests: accounting, benchmarks against SOURCES.md's reference numbers, ensembles, errors, generalisation."""

from __future__ import annotations

import copy
import io
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rich.console import Console

import podium
from podium.api import Policy
from podium.finance.backtest import (
    EQUAL_WEIGHT,
    POLICY,
    backtest,
    backtest_command,
    benchmark_prices,
    buy_and_hold,
    default_out_dir,
    find_snapshots,
    generalisation_curve,
    resolve_policy_paths,
    seen_periods,
)
from podium.finance.data import load_ohlcv
from podium.finance.env import StockTradingVecEnv
from podium.finance.indicators import FINRL_INDICATORS
from podium.finance.market import TEST_PERIOD, load_market, prepared_frame
from podium.finance.metrics import METRICS, performance

SHORT = ("2016-01-04", "2016-03-31")  # 61 trading days: quick backtests


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PPO run on one quarter of 2015 that keeps a snapshot after every learning phase."""
    path = tmp_path_factory.mktemp("trading") / "run"
    podium.train(
        "StockTrading-v0",
        "ppo",
        steps=768,
        num_envs=8,
        eval_episodes=2,
        eval_every=256,
        snapshot_every=1e-6,
        tensorboard=False,
        run_dir=path,
        env_kwargs={"period": ["2015-10-01", "2015-12-31"], "max_episode_steps": 20},
    )
    return path


@pytest.fixture(scope="module")
def policy(run_dir: Path) -> Policy:
    return podium.load(run_dir)


def test_buy_and_hold_benchmarks_reproduce_the_reference_numbers() -> None:
    """The table in podium/finance/data/README.md (empyrical-reloaded, 252 days, rf = 0)."""
    market = load_market("dow29", TEST_PERIOD)
    dia = performance(buy_and_hold(benchmark_prices("DIA", market.dates), 1e6))
    equal = performance(buy_and_hold(market.close, 1e6))
    reference = {  # as the data's README prints them: compare at the precision it gives
        "DIA": (dia, ("0.428", "0.211", "0.101", "1.95", "-0.085", "2.49")),
        "equal weight": (equal, ("0.404", "0.200", "0.102", "1.85", "-0.082", "2.45")),
    }
    for name, (measured, expected) in reference.items():
        for metric, text in zip(METRICS, expected, strict=True):
            digits = len(text.split(".")[1])
            assert f"{measured[metric]:.{digits}f}" == text, (name, metric, measured[metric])
    values = buy_and_hold(np.array([[10.0, 100.0], [20.0, 100.0], [5.0, 50.0]]), 1000.0)
    np.testing.assert_allclose(values, [1000.0, 1500.0, 500.0])  # $500 in each, never rebalanced


@pytest.mark.parametrize("fill", [None, "next_close"])
def test_backtest_accounting_reconciles_and_files_agree(policy: Policy, tmp_path: Path, fill: str | None) -> None:
    """Trades are dated and priced by the close they fill at: the day the policy saw (default) or the next."""
    delay = 1 if fill == "next_close" else 0
    report = backtest(policy, *TEST_PERIOD, out_dir=tmp_path, fill=fill)
    market = load_market("dow29", TEST_PERIOD)
    daily = pd.read_csv(tmp_path / "backtest.csv", parse_dates=["date"], index_col="date")
    trades = pd.read_csv(tmp_path / "trades.csv", parse_dates=["date"])
    metrics = pd.read_csv(tmp_path / "metrics.csv", index_col="strategy")
    assert (tmp_path / "backtest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.out_dir == tmp_path and report.start == "2016-01-04" and report.end == "2017-11-10"
    assert len(daily) == market.num_days == 470
    assert list(daily.columns) == [POLICY, "DIA", EQUAL_WEIGHT, "cash", "holdings_value", "transaction_cost"]
    assert (daily.index == pd.DatetimeIndex(market.dates)).all()
    assert daily[POLICY].iloc[0] == daily["cash"].iloc[0] == 1e6 and daily["DIA"].iloc[0] == 1e6
    assert len(trades) > 0 and set(trades["tic"]) <= set(market.tickers)

    # holdings rebuilt from the trades: what was bought before day t is held at day t's close (next_close: what
    # filled at it too, since the orders of day t - 1 fill there)
    tic_index = {tic: s for s, tic in enumerate(market.tickers)}
    day_index = {date: t for t, date in enumerate(pd.DatetimeIndex(market.dates))}
    orders = np.zeros((market.num_days, market.num_stocks))
    np.add.at(orders, ([day_index[d] for d in trades["date"]], [tic_index[t] for t in trades["tic"]]), trades["shares"])
    filled = np.cumsum(orders, axis=0)
    held = filled if delay else np.vstack([np.zeros(market.num_stocks), filled[:-1]])
    np.testing.assert_allclose(held, report.holdings.to_numpy())
    assert (held >= 0).all() and (daily["cash"] >= 0).all() and (orders[-1 + delay] == 0).all()
    np.testing.assert_allclose(
        trades["price"], market.close[trades["date"].map(day_index), trades["tic"].map(tic_index)]
    )

    # account value = cash + holdings · close, every day
    np.testing.assert_allclose(daily[POLICY], daily["cash"] + (held * market.close).sum(axis=1), rtol=0, atol=1e-6)
    np.testing.assert_allclose(daily["holdings_value"], (held * market.close).sum(axis=1), rtol=0, atol=1e-6)
    # cash moves only by trades and their costs
    per_day = trades.groupby("date")[["value", "cost"]].sum().reindex(daily.index, fill_value=0.0)
    np.testing.assert_allclose(daily["transaction_cost"], per_day["cost"], rtol=0, atol=1e-6)
    moved = (per_day["value"] + per_day["cost"]).to_numpy()
    np.testing.assert_allclose(
        daily["cash"].to_numpy()[1:], daily["cash"].to_numpy()[:-1] - moved[delay : len(moved) - 1 + delay], atol=1e-6
    )
    np.testing.assert_allclose(trades["cost"], trades["shares"].abs() * trades["price"] * 0.002)

    # the metrics table is performance() of the daily columns
    for name in (POLICY, "DIA", EQUAL_WEIGHT):
        measured = performance(daily[name].to_numpy())
        for metric in METRICS:
            assert metrics.loc[name, metric] == pytest.approx(measured[metric], rel=1e-9), (name, metric)
    assert metrics.loc["DIA", "cumulative_return"] == pytest.approx(0.428, abs=5e-4)
    assert metrics.loc[EQUAL_WEIGHT, "cumulative_return"] == pytest.approx(0.404, abs=5e-4)


def test_backtest_matches_a_hand_run_of_the_env(policy: Policy) -> None:
    report = backtest(policy, *SHORT, initial_cash=250_000.0)
    env = StockTradingVecEnv(
        data=load_market("dow29", SHORT), random_start=False, initial_cash=250_000.0, dtype=torch.float64
    )
    obs, _ = env.reset(seed=0)
    values = [env.account_value.item()]
    for _ in range(env.num_days - 1):
        obs, _, _, _, info = env.step(policy.act(obs))
        values.append(info["account_value"].item())
    np.testing.assert_allclose(report.daily[POLICY], values, rtol=1e-12)
    assert report.initial_cash == 250_000.0 and report.daily["DIA"].iloc[0] == 250_000.0


def test_ensemble_of_the_same_policy_twice_equals_the_policy(policy: Policy, run_dir: Path) -> None:
    single = backtest(policy, *SHORT)
    twice = backtest([policy, policy], *SHORT)
    pd.testing.assert_frame_equal(single.daily, twice.daily)
    pd.testing.assert_frame_equal(single.trades, twice.trades)
    from_paths = backtest([run_dir, run_dir / "checkpoints" / "best.pt"], *SHORT)
    pd.testing.assert_frame_equal(single.daily, from_paths.daily)
    assert len(from_paths.policies) == 2


def test_an_ensemble_compares_what_its_members_observe_not_how_their_specs_spell_it(
    policy: Policy, run_dir: Path
) -> None:
    spelled_out = podium.load(run_dir)
    spelled_out.spec = spelled_out.spec.model_copy(
        update={"env_kwargs": {**policy.spec.env_kwargs, "hmax": 100, "indicators": list(FINRL_INDICATORS)}}
    )
    twice = backtest([policy, spelled_out], *SHORT)  # the defaults written out: the same observations
    pd.testing.assert_frame_equal(twice.daily, backtest(policy, *SHORT).daily)
    richer = podium.load(run_dir)
    richer.spec = richer.spec.model_copy(update={"env_kwargs": {**policy.spec.env_kwargs, "initial_cash": 2e6}})
    with pytest.raises(ValueError, match=r"observe the market differently.*initial_cash"):
        backtest([policy, richer], *SHORT)  # cash and holdings are observed relative to it


def test_the_default_directory_names_the_fill_the_backtest_ran_with(run_dir: Path, tmp_path: Path) -> None:
    """A policy trained with fill="next_close" backtested as trained, then at the close it saw: two directories
    (the second used to overwrite the first, and neither said which fill it held)."""
    quiet, name = Console(file=io.StringIO()), f"backtest_{SHORT[0]}_{SHORT[1]}"
    env_kwargs = {"period": ["2015-10-01", "2015-12-31"], "max_episode_steps": 20, "fill": "next_close"}
    late = podium.train(
        "StockTrading-v0", "ppo", steps=256, num_envs=8, eval_episodes=2, tensorboard=False,
        run_dir=tmp_path / "late", env_kwargs=env_kwargs,
    ).run_dir  # fmt: skip
    as_trained = backtest_command(late, *SHORT, console=quiet)
    at_close = backtest_command(late, *SHORT, console=quiet, fill="close")
    assert (as_trained.out_dir.name, at_close.out_dir.name) == (f"{name}_next_close", name)
    assert backtest_command(run_dir, *SHORT, console=quiet).out_dir.name == name  # trained at the close


def test_every_variant_of_a_backtest_has_its_own_default_directory(run_dir: Path) -> None:
    """An ensemble, another initial cash or another benchmark wrote into the champion's directory and replaced
    its report without a word (the README's ``podium backtest runs/stock_dow29 --top-k 3`` did). The policy's own
    cash, given again, is no variant."""
    quiet, name = Console(file=io.StringIO()), f"backtest_{SHORT[0]}_{SHORT[1]}"
    snapshots = sorted((run_dir / "checkpoints" / "snapshots").glob("*.pt"))[:2]
    variants = {
        name: {},
        f"{name}_top2": {"top_k": 2, "checkpoints": snapshots},
        f"{name}_cash250000": {"initial_cash": 250_000},
        f"{name}_cash1234.50": {"initial_cash": 1234.5},
        f"{name}_vs_SPY": {"benchmark": "SPY"},
        f"{name}_no_benchmark": {"benchmark": None},
    }
    finals = {}
    for expected, kwargs in variants.items():
        report = backtest_command(run_dir, *SHORT, console=quiet, **kwargs)
        assert report.out_dir == run_dir / expected, kwargs
        finals[expected] = report.metrics.loc[POLICY, "final_value"]
    for directory, final in finals.items():  # each report is still there, as it was written
        written = pd.read_csv(run_dir / directory / "metrics.csv", index_col=0)
        assert written.loc[POLICY, "final_value"] == pytest.approx(final), directory
    same_cash = backtest_command(run_dir, *SHORT, console=quiet, initial_cash=1e6)  # the policy's own
    assert same_cash.out_dir.name == name
    beside_a_file = default_out_dir(run_dir / "checkpoints" / "last.pt", *SHORT, top_k=3)
    assert beside_a_file == run_dir / "checkpoints" / f"backtest_last_{SHORT[0]}_{SHORT[1]}_top3"


def test_ensemble_trades_the_mean_action(run_dir: Path) -> None:
    first, second = (podium.load(p) for p in sorted((run_dir / "checkpoints" / "snapshots").glob("*.pt"))[:2])
    report = backtest([first, second], *SHORT)
    env = StockTradingVecEnv(data=load_market("dow29", SHORT), random_start=False, dtype=torch.float64)
    obs, _ = env.reset(seed=0)
    mean = (first.act(obs) + second.act(obs)) / 2
    env.step(mean)
    np.testing.assert_array_equal(report.holdings.iloc[1].to_numpy(), env.holdings[0].numpy())
    assert not np.array_equal(first.act(obs).numpy(), second.act(obs).numpy())  # a real ensemble


def test_other_tickers_or_observation_size_are_refused(policy: Policy) -> None:
    frame = prepared_frame("dow29")
    fewer = frame[~frame["tic"].isin(["AAPL", "MSFT"])]
    with pytest.raises(ValueError, match=r"missing from the backtest data: \['AAPL', 'MSFT'\]"):
        backtest(policy, *SHORT, data=fewer)
    renamed = frame.assign(tic=frame["tic"].replace({"KO": "PEP"}))
    with pytest.raises(ValueError, match=r"missing from the backtest data: \['KO'\]; not seen in training: \['PEP'\]"):
        backtest(policy, *SHORT, data=renamed)
    two_indicators = load_market("dow29", ("2015-01-02", "2016-12-30"), indicators=("macd", "rsi_30"))
    with pytest.raises(ValueError, match=r"observations of size 291 .* gives 117"):
        backtest(policy, *SHORT, data=two_indicators)


def test_periods_outside_or_without_data_name_the_dates(policy: Policy) -> None:
    available = "the data hold 2232 trading days from 2009-01-02 to 2017-11-10"
    with pytest.raises(ValueError, match=f"2018-01-02..2018-06-29 reaches outside the data; {available}"):
        backtest(policy, "2018-01-02", "2018-06-29")
    with pytest.raises(ValueError, match=f"holds 0 trading day.*{available}"):
        backtest(policy, "2016-01-09", "2016-01-10")  # a weekend
    with pytest.raises(ValueError, match="after its end"):
        backtest(policy, "2016-06-01", "2016-01-04")
    with pytest.raises(ValueError, match="benchmark SPY has prices from 2009-01-02 to 2017-11-10 only"):
        benchmark_prices("SPY", np.array(["2017-11-10", "2017-11-13"], dtype="datetime64[ns]"))


def test_an_output_folder_that_is_a_file_is_refused_before_the_backtest_runs(policy: Policy, tmp_path: Path) -> None:
    """podium backtest --out FILE ran the whole backtest, then failed writing it (a traceback, results lost)."""
    from podium.rundir import RunDirError

    (tmp_path / "afile").write_text("x")
    with pytest.raises(RunDirError, match=r"afile is a file; choose another out_dir \(--out\)"):
        backtest(policy, "2016-01-04", "2016-03-01", out_dir=tmp_path / "afile")


def test_non_trading_policy_is_refused(tmp_path: Path) -> None:
    podium.train("CartPole-v1", "ppo", steps=256, num_envs=4, eval_episodes=2, tensorboard=False, run_dir=tmp_path)
    with pytest.raises(ValueError, match="trained on 'CartPole-v1', which is not a stock-trading env"):
        backtest(tmp_path, *SHORT)


def test_resolve_policy_paths(run_dir: Path, tmp_path: Path) -> None:
    best, last = run_dir / "checkpoints" / "best.pt", run_dir / "checkpoints" / "last.pt"
    assert resolve_policy_paths(run_dir) == [best]
    assert resolve_policy_paths(last) == [last]
    only_last = tmp_path / "only_last"
    (only_last / "checkpoints").mkdir(parents=True)
    shutil.copy(last, only_last / "checkpoints" / "last.pt")
    assert resolve_policy_paths(only_last) == [only_last / "checkpoints" / "last.pt"]
    with pytest.raises(ValueError, match=r"top_k=2, but .* holds 1 policy"):
        resolve_policy_paths(run_dir, top_k=2)
    tournament = tmp_path / "tournament"
    tournament.mkdir()
    (tournament / "tournament.yaml").write_text("pods: []\n")
    with pytest.raises(ValueError, match=r"tournament run directory; pass .* checkpoints=\[\.\.\.\]"):
        resolve_policy_paths(tournament, top_k=2)
    assert resolve_policy_paths(tournament, top_k=2, checkpoints=[best, last, best]) == [best, last]
    with pytest.raises(ValueError, match="only 1 checkpoint"):
        resolve_policy_paths(tournament, top_k=2, checkpoints=[best])
    with pytest.raises(FileNotFoundError):
        resolve_policy_paths(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"no checkpoints/best\.pt"):
        resolve_policy_paths(tmp_path)


def test_generalisation_curve_has_one_row_per_snapshot(run_dir: Path, tmp_path: Path) -> None:
    snapshots = sorted((run_dir / "checkpoints" / "snapshots").glob("*.pt"))
    assert len(snapshots) == 3  # one per learning phase of 256 steps
    frame = generalisation_curve(run_dir, *SHORT, tmp_path)
    assert len(frame) == len(snapshots)
    assert frame["wall_time"].is_monotonic_increasing and (frame["wall_time"] > 0).all()
    assert sorted(frame["steps"]) == [256, 512, 768] and set(frame["checkpoint"]) == {str(p) for p in snapshots}
    assert {"run", "checkpoint", "steps", "wall_time", "final_value", *METRICS} <= set(frame.columns)
    on_disk = pd.read_csv(tmp_path / "generalisation.csv")
    np.testing.assert_allclose(on_disk["cumulative_return"], frame["cumulative_return"])
    assert (tmp_path / "generalisation.png").read_bytes()[:4] == b"\x89PNG"
    single = backtest(snapshots[0], *SHORT).metrics.loc[POLICY, "cumulative_return"]
    assert frame.set_index("checkpoint").loc[str(snapshots[0]), "cumulative_return"] == pytest.approx(single)
    assert set(frame.attrs["benchmarks"]) == {"DIA", EQUAL_WEIGHT}


def test_the_generalisation_curve_takes_the_fill_and_the_benchmark(run_dir: Path, tmp_path: Path) -> None:
    """``podium backtest --generalisation --fill next_close`` computed the curve with same-close fills and wrote
    it into the ``_next_close`` directory, where it reads as next-close results."""
    snapshot = sorted((run_dir / "checkpoints" / "snapshots").glob("*.pt"))[0]
    frame = generalisation_curve(run_dir, *SHORT, fill="next_close", benchmark=None)
    expected = backtest(snapshot, *SHORT, fill="next_close", benchmark=None).metrics.loc[POLICY, "cumulative_return"]
    assert frame.set_index("checkpoint").loc[str(snapshot), "cumulative_return"] == pytest.approx(expected)
    assert set(frame.attrs["benchmarks"]) == {EQUAL_WEIGHT}


def test_snapshots_of_tournament_pods_are_found(run_dir: Path, tmp_path: Path) -> None:
    for pod in ("pod-a", "pod-b"):
        shutil.copytree(
            run_dir / "checkpoints" / "snapshots", tmp_path / "t" / "pods" / pod / "checkpoints" / "snapshots"
        )
    found = find_snapshots([tmp_path / "t", run_dir])
    assert [run for run, _ in found] == ["t/pod-a"] * 3 + ["t/pod-b"] * 3 + [run_dir.name] * 3


def test_missing_snapshots_say_to_set_snapshot_every(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ValueError, match=r"no snapshots in .*Set snapshot_every"):
        generalisation_curve(tmp_path, *SHORT, tmp_path / "out")
    with pytest.raises(FileNotFoundError):
        find_snapshots(tmp_path / "nowhere")


def test_backtest_command_prints_a_table_and_writes_the_files(run_dir: Path, tmp_path: Path) -> None:
    buffer = io.StringIO()
    report = backtest_command(run_dir, *SHORT, console=Console(file=buffer, width=120))
    text = buffer.getvalue()
    for needle in ("cumulative return", "Sharpe ratio", "DIA buy & hold", "equal weight", "backtest.csv"):
        assert needle in text
    out = run_dir / f"backtest_{SHORT[0]}_{SHORT[1]}"
    assert report.out_dir == out and str(out) in text.replace("\n", "")
    assert {p.name for p in out.iterdir()} == {"backtest.csv", "trades.csv", "metrics.csv", "backtest.png"}
    other = backtest_command(
        run_dir / "checkpoints" / "last.pt", *SHORT, out=tmp_path / "x", console=Console(file=io.StringIO())
    )
    assert other.out_dir == tmp_path / "x"


def test_a_backtest_on_data_the_policy_has_seen_says_it_is_in_sample(run_dir: Path, policy: Policy) -> None:
    """The policy trained on 2015-10..12: a backtest over it used to print its metrics as if they were a test."""
    assert seen_periods(policy) == {"train": ("2015-10-01", "2015-12-31")}
    with pytest.warns(UserWarning, match=r"in-sample backtest.*train period 2015-10-01\.\.2015-12-31 overlaps"):
        report = backtest(policy, "2015-11-02", "2016-01-29")
    assert len(report.in_sample) == 1
    buffer = io.StringIO()
    backtest_command(run_dir, "2015-12-01", "2016-01-29", console=Console(file=buffer, width=300))
    assert "warning: an in-sample backtest, not a test" in buffer.getvalue()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a test period it never saw: no warning
        assert backtest(policy, *SHORT).in_sample == []


def test_a_policy_trained_on_an_undated_file_has_seen_all_of_it(policy: Policy, tmp_path: Path) -> None:
    """A policy trained on a user's file without a ``period`` had seen nothing, as far as the in-sample check
    knew: a backtest on the very data it trained on printed its metrics as a test."""
    frame = load_ohlcv("dow29")
    path = tmp_path / "mine.csv"
    frame[(frame["date"] >= "2015-07-01") & (frame["date"] <= "2015-12-31")].to_csv(path, index=False)
    mine = copy.copy(policy)
    mine.spec = policy.spec.model_copy(update={"env_kwargs": {"data": str(path)}})
    assert seen_periods(mine) == {"train": ("2015-07-01", "2015-12-31")}
    mine.spec = policy.spec.model_copy(update={"env_kwargs": {"data": str(tmp_path / "gone.csv")}})
    assert seen_periods(mine) == {}  # a file that is gone: nothing to say


def test_the_benchmark_can_be_left_out_where_it_has_no_prices(run_dir: Path, tmp_path: Path) -> None:
    """DIA's prices end on 2017-11-10; ``podium backtest`` had no way to skip it for later data."""
    report = backtest_command(run_dir, *SHORT, out=tmp_path / "b", benchmark=None, console=Console(file=io.StringIO()))
    assert "DIA" not in report.metrics.index and EQUAL_WEIGHT in report.metrics.index
    with pytest.raises(ValueError, match=r"podium backtest --benchmark none"):
        benchmark_prices("DIA", pd.DatetimeIndex(["2018-01-02"]))
