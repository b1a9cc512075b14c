"""Performance metrics: empyrical-reloaded's numbers, checked again by formula on hand-made series."""

from __future__ import annotations

import math

import empyrical
import numpy as np
import pandas as pd
import pytest
import torch

from podium.finance.metrics import METRICS, TRADING_DAYS, daily_returns, performance, performance_table


def numpy_max_drawdown(values: np.ndarray) -> float:
    return float(np.min(values / np.maximum.accumulate(values) - 1.0))


@pytest.fixture()
def wiggly() -> np.ndarray:
    """300 account values of a noisy upward series (dollars)."""
    rng = np.random.default_rng(7)
    returns = rng.normal(0.0006, 0.011, size=299)
    return 1e6 * np.concatenate([[1.0], np.cumprod(1.0 + returns)])


def test_constant_daily_return_by_formula() -> None:
    r, n = 0.001, 100
    values = 250.0 * (1.0 + r) ** np.arange(n + 1)
    m = performance(values)
    assert set(m) == set(METRICS)
    assert m["cumulative_return"] == pytest.approx((1 + r) ** n - 1, rel=1e-12)
    assert m["annual_return"] == pytest.approx((1 + r) ** TRADING_DAYS - 1, rel=1e-9)
    assert m["annual_volatility"] == 0.0  # zero volatility is reported as exactly 0
    assert m["sharpe_ratio"] == math.inf  # a riskless gain
    assert m["max_drawdown"] == 0.0
    assert math.isnan(m["calmar_ratio"])  # no drawdown: undefined
    falling = performance(250.0 * (1.0 - r) ** np.arange(n + 1))
    assert falling["sharpe_ratio"] == -math.inf
    assert falling["max_drawdown"] == pytest.approx((1 - r) ** n - 1, rel=1e-9)


def test_flat_series_has_undefined_sharpe() -> None:
    m = performance(np.full(20, 1e6))
    assert m["cumulative_return"] == 0.0 and m["annual_return"] == 0.0 and m["annual_volatility"] == 0.0
    assert math.isnan(m["sharpe_ratio"]) and math.isnan(m["calmar_ratio"]) and m["max_drawdown"] == 0.0


def test_max_drawdown_of_a_known_series() -> None:
    values = np.array([100.0, 120.0, 90.0, 95.0, 130.0, 104.0, 125.0])
    m = performance(values)
    assert m["max_drawdown"] == pytest.approx(90 / 120 - 1)  # -25%; the later 130 -> 104 is only -20%
    assert m["cumulative_return"] == pytest.approx(0.25)
    assert m["calmar_ratio"] == pytest.approx(m["annual_return"] / 0.25)


def test_every_metric_by_numpy_formula(wiggly: np.ndarray) -> None:
    m = performance(wiggly)
    r = wiggly[1:] / wiggly[:-1] - 1.0
    n = r.size
    annual = (wiggly[-1] / wiggly[0]) ** (TRADING_DAYS / n) - 1.0
    assert m["cumulative_return"] == pytest.approx(wiggly[-1] / wiggly[0] - 1.0, rel=1e-10)
    assert m["annual_return"] == pytest.approx(annual, rel=1e-10)
    assert m["annual_volatility"] == pytest.approx(np.std(r, ddof=1) * np.sqrt(TRADING_DAYS), rel=1e-10)
    assert m["sharpe_ratio"] == pytest.approx(np.mean(r) / np.std(r, ddof=1) * np.sqrt(TRADING_DAYS), rel=1e-10)
    assert m["max_drawdown"] == pytest.approx(numpy_max_drawdown(wiggly), rel=1e-10)
    assert m["calmar_ratio"] == pytest.approx(annual / abs(numpy_max_drawdown(wiggly)), rel=1e-10)
    rf = 0.0001
    with_rf = performance(wiggly, risk_free=rf)["sharpe_ratio"]
    assert with_rf == pytest.approx(np.mean(r - rf) / np.std(r - rf, ddof=1) * np.sqrt(TRADING_DAYS), rel=1e-10)


def test_matches_empyrical(wiggly: np.ndarray) -> None:
    r = pd.Series(wiggly).pct_change().dropna()
    expected = {
        "cumulative_return": empyrical.cum_returns_final(r),
        "annual_return": empyrical.annual_return(r),
        "annual_volatility": empyrical.annual_volatility(r),
        "sharpe_ratio": empyrical.sharpe_ratio(r),
        "max_drawdown": empyrical.max_drawdown(r),
        "calmar_ratio": empyrical.calmar_ratio(r),
    }
    m = performance(wiggly)
    for name, value in expected.items():
        assert m[name] == pytest.approx(float(value), rel=1e-12), name
    assert performance(r.to_numpy(), kind="returns") == pytest.approx(m, rel=1e-12)
    weekly = performance(wiggly, annualization=52)
    assert weekly["sharpe_ratio"] == pytest.approx(float(empyrical.sharpe_ratio(r, annualization=52)), rel=1e-12)


def test_accepts_lists_series_and_tensors(wiggly: np.ndarray) -> None:
    m = performance(wiggly)
    assert performance(list(wiggly)) == m
    assert performance(pd.Series(wiggly)) == m
    assert performance(torch.as_tensor(wiggly)) == m
    np.testing.assert_allclose(daily_returns(wiggly), wiggly[1:] / wiggly[:-1] - 1.0)


def test_bad_series_give_clear_errors() -> None:
    with pytest.raises(ValueError, match="at least 2 daily returns"):
        performance([1e6, 1.1e6])
    with pytest.raises(ValueError, match="at least 2 account values"):
        performance([1e6])
    with pytest.raises(ValueError, match="at least 2 daily returns"):
        performance([0.01], kind="returns")
    with pytest.raises(ValueError, match=r"1 NaN or infinite value\(s\), the first at position 2"):
        performance([1.0, 1.1, float("nan"), 1.2])
    with pytest.raises(ValueError, match=r"position 1 holds 0\.0"):
        performance([1.0, 0.0, 1.2])
    with pytest.raises(ValueError, match="loses everything"):
        performance([0.1, -1.0, 0.2], kind="returns")
    with pytest.raises(ValueError, match="one-dimensional"):
        performance(np.ones((3, 2)))
    with pytest.raises(ValueError, match="kind must be"):
        performance([1.0, 1.1, 1.2], kind="prices")  # type: ignore[arg-type]


def test_table_lists_strategies_and_names_the_bad_one(wiggly: np.ndarray) -> None:
    table = performance_table({"policy": wiggly, "cash": np.full(10, 1e6)})
    assert list(table.index) == ["policy", "cash"]
    assert list(table.columns) == ["initial_value", "final_value", *METRICS]
    assert table.loc["policy", "final_value"] == wiggly[-1]
    assert table.loc["policy", "sharpe_ratio"] == performance(wiggly)["sharpe_ratio"]
    with pytest.raises(ValueError, match=r"^broken: .*NaN"):
        performance_table({"policy": wiggly, "broken": [1.0, np.nan, 1.0]})
