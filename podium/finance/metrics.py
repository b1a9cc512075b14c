"""Performance of a trading strategy from its daily account values, computed with empyrical-reloaded.

Every number comes from `empyrical-reloaded <https://github.com/stefan-jansen/empyrical-reloaded>`_
(import name ``empyrical``), with daily periods, 252 trading days a year and a zero risk-free rate
unless told otherwise. This module only checks the input and turns values into returns:

>>> from podium.finance.metrics import performance
>>> performance([1e6, 1.01e6, 0.99e6, 1.02e6])["cumulative_return"]  # doctest: +ELLIPSIS
0.02...

The metrics (all fractions, not percent; see ``docs/trading.md``):

* ``cumulative_return``: ``V_end / V_start - 1``;
* ``annual_return``: the compound annual growth rate, ``(1 + cumulative) ** (252 / n) - 1`` for n daily returns;
* ``annual_volatility``: the standard deviation of the daily returns (``ddof=1``) times ``sqrt(252)``;
* ``sharpe_ratio``: ``mean(r - rf) / std(r - rf, ddof=1) * sqrt(252)``; ``±inf`` for a riskless gain or
  loss (zero volatility) and NaN when every return is zero;
* ``max_drawdown``: the worst fall from a running peak, ``min_t(V_t / max_{s<=t} V_s - 1)`` (<= 0);
* ``calmar_ratio``: ``annual_return / |max_drawdown|``; NaN when the series never falls.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
import torch

__all__ = ["METRICS", "TRADING_DAYS", "daily_returns", "performance", "performance_table"]

TRADING_DAYS = 252
"""Trading days per year used to annualise daily figures."""

METRICS: tuple[str, ...] = (
    "cumulative_return",
    "annual_return",
    "annual_volatility",
    "sharpe_ratio",
    "max_drawdown",
    "calmar_ratio",
)
"""The keys of :func:`performance`'s result, in table order."""

_ZERO_VOLATILITY = 1e-12  # annualised volatility below this is rounding noise of a constant series

Series = Sequence[float] | np.ndarray | pd.Series | torch.Tensor


def _as_float_array(series: Series, what: str) -> np.ndarray:
    if isinstance(series, torch.Tensor):
        series = series.detach().to("cpu", torch.float64).numpy()
    array = np.asarray(series, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional (one number per day), got shape {array.shape}")
    bad = ~np.isfinite(array)
    if bad.any():
        first = int(np.argmax(bad))
        raise ValueError(f"{what} has {int(bad.sum())} NaN or infinite value(s), the first at position {first}")
    return array


def daily_returns(account_values: Series) -> np.ndarray:
    """Simple daily returns ``V[t] / V[t-1] - 1`` of a series of account values.

    Args:
        account_values: ``[T]`` account values in dollars (any positive unit), one per trading day.

    Returns:
        ``[T - 1]`` float64 returns (fractions).

    Raises:
        ValueError: not 1-D, fewer than 2 values, a NaN/inf value, or a value <= 0 (the message gives its position).
    """
    values = _as_float_array(account_values, "account values")
    if values.size < 2:
        raise ValueError(f"need at least 2 account values to form a return, got {values.size}")
    if (values <= 0).any():
        first = int(np.argmax(values <= 0))
        raise ValueError(f"account values must be positive; position {first} holds {values[first]}")
    return values[1:] / values[:-1] - 1.0


def performance(
    series: Series,
    *,
    kind: Literal["values", "returns"] = "values",
    risk_free: float = 0.0,
    annualization: int = TRADING_DAYS,
) -> dict[str, float]:
    """Cumulative and annual return, annual volatility, Sharpe, max drawdown and Calmar of one strategy.

    Computed by empyrical-reloaded (``cum_returns_final``, ``annual_return``, ``annual_volatility``,
    ``sharpe_ratio``, ``max_drawdown``, ``calmar_ratio``) on daily simple returns.

    Args:
        series: ``[T]`` daily account values in dollars (``kind="values"``, the default) or ``[T]``
            daily simple returns as fractions (``kind="returns"``, e.g. 0.01 for +1%). A numpy array,
            a list, a pandas Series or a tensor (any device; it is copied to the host).
        kind: whether ``series`` holds account values or returns.
        risk_free: daily risk-free return subtracted in the Sharpe ratio (fraction per day).
        annualization: periods per year (252 trading days).

    Returns:
        ``{name: value}`` for every name in :data:`METRICS`, as Python floats (fractions, not percent;
        ratios unitless). With zero volatility the Sharpe ratio is ``±inf`` (NaN if all returns are
        zero) and the volatility is reported as exactly 0; with no drawdown the Calmar ratio is NaN.

    Raises:
        ValueError: fewer than 2 daily returns (3 account values), NaN/inf entries, account values
            <= 0, returns <= -100%, an unknown ``kind``, or ``annualization`` < 1.
    """
    import empyrical

    if kind == "values":
        returns = daily_returns(series)
    elif kind == "returns":
        returns = _as_float_array(series, "returns")
        if (returns <= -1.0).any():
            first = int(np.argmax(returns <= -1.0))
            raise ValueError(f"a daily return of {returns[first]} (position {first}) loses everything; need > -1")
    else:
        raise ValueError(f"kind must be 'values' or 'returns', got {kind!r}")
    if returns.size < 2:
        raise ValueError(
            f"need at least 2 daily returns (3 account values) for a volatility, got {returns.size} return(s)"
        )
    if annualization < 1:
        raise ValueError(f"annualization (periods per year) must be >= 1, got {annualization}")

    volatility = float(empyrical.annual_volatility(returns, annualization=annualization))
    if volatility < _ZERO_VOLATILITY:
        excess = float(np.mean(returns - risk_free))
        volatility = 0.0
        sharpe = math.copysign(math.inf, excess) if abs(excess) > _ZERO_VOLATILITY else math.nan
    else:
        sharpe = float(empyrical.sharpe_ratio(returns, risk_free=risk_free, annualization=annualization))
    return {
        "cumulative_return": float(empyrical.cum_returns_final(returns)),
        "annual_return": float(empyrical.annual_return(returns, annualization=annualization)),
        "annual_volatility": volatility,
        "sharpe_ratio": sharpe,
        "max_drawdown": float(empyrical.max_drawdown(returns)),
        "calmar_ratio": float(empyrical.calmar_ratio(returns, annualization=annualization)),
    }


def performance_table(
    account_values: Mapping[str, Series],
    *,
    risk_free: float = 0.0,
    annualization: int = TRADING_DAYS,
) -> pd.DataFrame:
    """:func:`performance` of several strategies side by side, plus their first and last account values.

    Args:
        account_values: ``{strategy name: [T] daily account values in dollars}``.
        risk_free, annualization: as :func:`performance`.

    Returns:
        One row per strategy (index ``strategy``, in the mapping's order) with the columns
        ``initial_value``, ``final_value`` (dollars) and :data:`METRICS`.

    Raises:
        ValueError: as :func:`performance`; the message names the strategy.
    """
    rows = []
    for name, values in account_values.items():
        try:
            array = _as_float_array(values, "account values")
            metrics = performance(array, risk_free=risk_free, annualization=annualization)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        rows.append({"strategy": name, "initial_value": array[0], "final_value": array[-1], **metrics})
    return pd.DataFrame(rows).set_index("strategy")
