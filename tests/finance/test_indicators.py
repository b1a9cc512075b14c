"""Indicators and turbulence against FinRL's published fixture, plus turbulence sanity checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from podium.finance.data import OHLCV_COLUMNS, align, load_ohlcv
from podium.finance.indicators import FINRL_INDICATORS, add_indicators, add_turbulence, turbulence_index

FIXTURE = Path(__file__).parent / "data" / "finrl_tutorials_dow29_trade_2020-07-01_2021-10-27_with_indicators.csv.gz"

# Indicators with no long memory: exact once their window is full (60 days is the longest).
EXACT = ("close_30_sma", "close_60_sma", "boll_ub", "boll_lb", "cci_30")
# EMA/SMMA-based indicators remember where the history started: FinRL warmed them up on 2009-2020,
# we start on 2020-07-01; after ~250 days the difference has decayed to this much.
WARMED_UP = {"macd": 1e-5, "rsi_30": 0.01, "dx_30": 1e-4}


@pytest.fixture(scope="module")
def fixture() -> pd.DataFrame:
    return load_ohlcv(pd.read_csv(FIXTURE, index_col=0))


@pytest.fixture(scope="module")
def recomputed(fixture: pd.DataFrame) -> pd.DataFrame:
    return add_turbulence(add_indicators(fixture[list(OHLCV_COLUMNS)]))


def _from_day(frame: pd.DataFrame, day: int) -> pd.DataFrame:
    dates = np.sort(frame["date"].unique())
    return frame[frame["date"] >= dates[day]].reset_index(drop=True)


@pytest.mark.parametrize(
    ("day", "names"), [(0, ("boll_ub", "boll_lb")), (1, ("boll_ub", "boll_lb")), (59, FINRL_INDICATORS)]
)
def test_no_indicator_of_a_day_depends_on_a_later_day(fixture: pd.DataFrame, day: int, names) -> None:
    """Computed on the history up to ``day``, an indicator of that day equals the one computed on the whole
    history. The first day's Bollinger bands were back-filled from the second day's, whose mean of the two
    bands minus the first close is the second close: a user file starting on a backtest's first day placed
    that day's orders knowing the next close. (``stockstats`` gives NaN for ``cci_30`` on histories shorter
    than its window, so the whole set is compared once every window fits.)"""
    prices = fixture[list(OHLCV_COLUMNS)]
    dates = np.sort(prices["date"].unique())
    whole = add_indicators(prices, names)
    cut = add_indicators(prices[prices["date"] <= dates[day]], names)
    on_day = whole[whole["date"] == dates[day]][list(names)].to_numpy()
    np.testing.assert_allclose(cut[cut["date"] == dates[day]][list(names)].to_numpy(), on_day)


def test_fixture_layout(fixture: pd.DataFrame) -> None:
    assert fixture["tic"].nunique() == 29 and fixture["date"].nunique() == 335
    assert set(FINRL_INDICATORS) <= set(fixture.columns) and "turbulence" in fixture.columns


@pytest.mark.parametrize("column", EXACT)
def test_windowed_indicators_match_finrl_exactly(fixture: pd.DataFrame, recomputed: pd.DataFrame, column: str) -> None:
    ours, theirs = _from_day(recomputed, 80), _from_day(fixture, 80)
    assert (ours[["date", "tic"]].values == theirs[["date", "tic"]].values).all()
    np.testing.assert_allclose(ours[column], theirs[column], rtol=0, atol=1e-6)


@pytest.mark.parametrize(("column", "tolerance"), WARMED_UP.items())
def test_memory_indicators_converge_to_finrl(
    fixture: pd.DataFrame, recomputed: pd.DataFrame, column: str, tolerance: float
) -> None:
    ours, theirs = _from_day(recomputed, 253), _from_day(fixture, 253)
    np.testing.assert_allclose(ours[column], theirs[column], rtol=0, atol=tolerance)


def test_dx_conventions_differ(fixture: pd.DataFrame) -> None:
    wilder = add_indicators(fixture[list(OHLCV_COLUMNS)], ["dx_30"], dx_smoothing="wilder")
    gap = np.abs(_from_day(wilder, 253)["dx_30"] - _from_day(fixture, 253)["dx_30"]).max()
    assert gap > 5.0  # the current stockstats definition is not what FinRL published


def test_turbulence_matches_finrl_once_the_window_is_inside_the_slice(
    fixture: pd.DataFrame, recomputed: pd.DataFrame
) -> None:
    # the fixture holds 335 days; the 252-day window of returns fits inside it from day 253 on
    ours, theirs = _from_day(recomputed, 253), _from_day(fixture, 253)
    np.testing.assert_allclose(ours["turbulence"], theirs["turbulence"], rtol=1e-9, atol=0)
    first = recomputed.groupby("date")["turbulence"].first().to_numpy()
    assert (first[:253] == 0).all() and (first[253:] > 0).all()


def _turbulence_by_loop(close: np.ndarray, window: int) -> np.ndarray:
    returns = close[1:] / close[:-1] - 1
    out = np.zeros(len(close))
    for day in range(window + 1, len(close)):
        history = returns[day - 1 - window : day - 1]
        deviation = returns[day - 1] - history.mean(axis=0)
        out[day] = deviation @ np.linalg.pinv(np.cov(history, rowvar=False)) @ deviation
    return out


def test_turbulence_sanity() -> None:
    rng = np.random.default_rng(0)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, (120, 5)), axis=0))
    turbulence = turbulence_index(close, window=30)
    np.testing.assert_allclose(turbulence, _turbulence_by_loop(close, 30), rtol=1e-9, atol=1e-12)
    assert (turbulence[:31] == 0).all() and (turbulence[31:] > 0).all()
    # unit-free: rescaling one stock's prices changes no return
    rescaled = close * np.array([1, 1, 7.5, 1, 1])
    np.testing.assert_allclose(turbulence_index(rescaled, window=30), turbulence, rtol=1e-9)
    # a crash day is far more turbulent than ordinary days
    crash = close.copy()
    crash[100:] *= np.array([0.8, 1.15, 0.85, 1.1, 0.9])
    assert turbulence_index(crash, window=30)[100] > 10 * np.median(turbulence[31:])
    # two identical stocks: the covariance is singular and the pseudo-inverse copes
    twins = np.column_stack([close, close[:, 0]])
    assert np.isfinite(turbulence_index(twins, window=30)).all()
    np.testing.assert_allclose(turbulence_index(twins, window=30), turbulence, rtol=1e-6)
    assert turbulence_index(close[:20], window=30).tolist() == [0.0] * 20
    with pytest.raises(ValueError, match="window"):
        turbulence_index(close, window=1)
    with pytest.raises(ValueError, match="align"):
        turbulence_index(np.where(np.arange(5) == 2, np.nan, close), window=30)


def test_full_dow29_pipeline_has_no_gaps_or_nans() -> None:
    prices, _ = align(load_ohlcv("dow29"))
    market = add_turbulence(add_indicators(prices))
    assert len(market) == len(prices)
    assert not market[[*FINRL_INDICATORS, "turbulence"]].isna().any().any()
    per_date = market.groupby("date")["turbulence"]
    assert (per_date.nunique() == 1).all()
    assert (per_date.first().iloc[:253] == 0).all() and (per_date.first().iloc[253:] > 0).all()


def test_turbulence_needs_aligned_data() -> None:
    prices = load_ohlcv("dow29", end="2009-03-31")
    with pytest.raises(ValueError, match="CVX has no close on 2009-01-05"):
        add_turbulence(prices[~((prices["tic"] == "CVX") & (prices["date"] == "2009-01-05"))])


def test_add_indicators_input_errors(fixture: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"needs column\(s\) \['volume'\]"):
        add_indicators(fixture.drop(columns=["volume"]))
    with pytest.raises(ValueError, match="dx_smoothing"):
        add_indicators(fixture, dx_smoothing="sma")  # type: ignore[arg-type]


def test_a_repeated_row_index_does_not_pair_indicators_with_the_wrong_stock() -> None:
    """Per-stock tables joined with pd.concat repeat the row labels 0..n-1: the indicators were joined on them
    and paired with the wrong stock's rows (three times as many rows came out)."""
    frame = load_ohlcv("dow29")
    frame = frame[frame["tic"].isin(["AAPL", "MSFT", "KO"]) & (frame["date"] < "2010-06-01")]
    stacked = pd.concat([rows.reset_index(drop=True) for _, rows in frame.groupby("tic")])  # labels repeat
    assert stacked.index.duplicated().any()
    names = ("close_30_sma", "rsi_30")
    pd.testing.assert_frame_equal(add_indicators(stacked, names), add_indicators(frame.reset_index(drop=True), names))


def test_an_indicator_stockstats_cannot_compute_is_named_as_such() -> None:
    frame = load_ohlcv("dow29")
    frame = frame[frame["tic"].isin(["AAPL"]) & (frame["date"] < "2010-06-01")]
    with pytest.raises(ValueError, match=r"stockstats cannot compute one of the indicators \['turbulence'\]"):
        add_indicators(frame, ("turbulence",))
