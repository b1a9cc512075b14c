"""Technical indicators (FinRL's default set, via ``stockstats``) and the market turbulence index.

>>> from podium.finance.data import align, load_ohlcv
>>> from podium.finance.indicators import add_indicators, add_turbulence
>>> prices, _ = align(load_ohlcv("dow29"))
>>> market = add_turbulence(add_indicators(prices))  # + 8 indicator columns and "turbulence"
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd
import stockstats

__all__ = ["FINRL_INDICATORS", "add_indicators", "add_turbulence", "turbulence_index"]

FINRL_INDICATORS: tuple[str, ...] = (
    "macd",
    "boll_ub",
    "boll_lb",
    "rsi_30",
    "cci_30",
    "dx_30",
    "close_30_sma",
    "close_60_sma",
)
"""FinRL's default indicator list, in ``stockstats`` names:

* ``macd``: 12-day EMA minus 26-day EMA of the close (dollars);
* ``boll_ub`` / ``boll_lb``: 20-day mean of the close plus / minus two 20-day standard deviations (dollars);
* ``rsi_30``: 30-day relative strength index (0..100);
* ``cci_30``: 30-day commodity channel index (unitless, mostly within ±300);
* ``dx_30``: 30-day directional movement index (0..100; see ``dx_smoothing`` in :func:`add_indicators`);
* ``close_30_sma`` / ``close_60_sma``: 30- and 60-day simple moving averages of the close (dollars).
"""

_STOCKSTATS_INPUT = ["date", "open", "high", "low", "close", "volume"]
_DX = re.compile(r"dx_(\d+)")


def add_indicators(
    df: pd.DataFrame,
    indicators: Sequence[str] = FINRL_INDICATORS,
    dx_smoothing: Literal["ema", "wilder"] = "ema",
) -> pd.DataFrame:
    """Add technical indicator columns, computed per ticker over that ticker's whole history.

    Each ticker's rows (sorted by date) go through ``stockstats`` on their own, as FinRL's
    ``FeatureEngineer`` does. ``stockstats`` starts its moving windows with whatever history exists
    (``min_periods=1``), so the first rows of a ticker use shorter windows: a 60-day SMA is exact from
    the 60th row on, and EMA-based indicators (``macd``, ``rsi_30``, ``dx_30``) keep depending on the
    starting point for much longer. Bollinger bands over the first row (a standard deviation over one
    row) are that row's close; other warm-up values that come out NaN are back-filled from the ticker's
    first valid value (a later row's: none of FINRL_INDICATORS needs it).

    The directional movement index ``dx_N`` is ``100 |P - M| / (P + M)`` with P and M the smoothed
    positive and negative directional movements (the average true range cancels out). Data that FinRL
    published was computed with an older ``stockstats`` that smoothed them with an EMA of span N; the
    current ``stockstats`` uses Wilder's smoothing (alpha = 1/N), which gives quite different values
    (up to ~30 points apart on FinRL's Dow-29 fixture). ``dx_smoothing`` picks the convention.

    Args:
        df: long-format table with ``date, tic, open, high, low, close, volume`` (prices in dollars).
        indicators: ``stockstats`` column names to compute (default: :data:`FINRL_INDICATORS`).
        dx_smoothing: ``"ema"`` (default) reproduces FinRL's published ``dx_N`` features;
            ``"wilder"`` uses the current ``stockstats`` definition.

    Returns:
        A copy of ``df`` sorted by ``(date, tic)`` with one float64 column per indicator (an existing
        column of the same name is replaced).

    Raises:
        ValueError: a required column is missing, or an indicator is still NaN/infinite for a
            ticker after the warm-up fill (the message names the ticker and the first bad date).
    """
    missing = [c for c in [*_STOCKSTATS_INPUT, "tic"] if c not in df.columns]
    if missing:
        raise ValueError(f"add_indicators needs column(s) {missing}")
    if dx_smoothing not in ("ema", "wilder"):
        raise ValueError(f"dx_smoothing must be 'ema' or 'wilder', got {dx_smoothing!r}")
    names = list(dict.fromkeys(indicators))
    df = df.reset_index(drop=True)  # its own labels: a concatenation's repeat, and the join below would pair wrongly
    out = df.drop(columns=[c for c in names if c in df.columns]).sort_values(["tic", "date"], kind="stable")
    own = {n: int(m.group(1)) for n in names if (m := _DX.fullmatch(n))} if dx_smoothing == "ema" else {}
    blocks = []
    for tic, rows in out.groupby("tic", sort=False):
        # indexed by date already, so that stockstats need not re-index (a deprecated in-place call)
        frame = stockstats.wrap(rows[_STOCKSTATS_INPUT].set_index("date"))
        try:
            values = pd.DataFrame(frame[[n for n in names if n not in own]]).set_axis(rows.index)
        except (UserWarning, KeyError, ValueError, IndexError) as exc:  # stockstats's word for a name it cannot parse
            raise ValueError(
                f"stockstats cannot compute one of the indicators {names} ({exc}); its names look like "
                "close_30_sma, rsi_30, macd, boll_ub, dx_30 ('turbulence' and 'vix' are not computed: a prepared "
                "table brings them as columns)"
            ) from None
        for name, window in own.items():
            values[name] = _dx_ema(rows["high"].to_numpy(), rows["low"].to_numpy(), window)
        # Bollinger bands over one row have no deviation: a band of zero width (the close), not the next row's
        # bands, which would show the next close (ub + lb - close[0] = close[1])
        for name in (n for n in names if n.startswith("boll_")):
            values[name] = values[name].fillna(rows["close"])
        values = values[names].bfill()
        bad = ~np.isfinite(values.to_numpy())
        if bad.any():
            row, col = np.argwhere(bad)[0]
            date = pd.Timestamp(rows["date"].iloc[row]).strftime("%Y-%m-%d")
            raise ValueError(f"indicator {names[col]!r} is NaN or infinite for {tic} on {date}")
        blocks.append(values)
    out = out.join(pd.concat(blocks).astype(np.float64))
    return out.sort_values(["date", "tic"], kind="stable").reset_index(drop=True)


def _dx_ema(high: np.ndarray, low: np.ndarray, window: int) -> np.ndarray:
    """``dx_window`` of one ticker with EMA-smoothed directional movements (FinRL's published convention)."""
    up = np.diff(high, prepend=np.nan)  # today's high minus yesterday's; NaN on the first row
    down = -np.diff(low, prepend=np.nan)
    plus = pd.Series(np.where((up > 0) & (up > down), up, 0.0))
    minus = pd.Series(np.where((down > 0) & (down > up), down, 0.0))
    plus = plus.ewm(span=window, adjust=True).mean().to_numpy()
    minus = minus.ewm(span=window, adjust=True).mean().to_numpy()
    total = plus + minus
    return np.divide(100.0 * np.abs(plus - minus), total, out=np.zeros_like(total), where=total > 0)


def turbulence_index(close: np.ndarray, window: int = 252) -> np.ndarray:
    """Turbulence of each day: how unusual that day's cross-section of returns is.

    With ``r_t`` the vector of simple daily returns ``close[t] / close[t-1] - 1`` of the S assets,
    and ``mu_t`` and ``Sigma_t`` the mean and covariance (``ddof=1``) of the ``window`` returns
    ``r_{t-window} .. r_{t-1}`` before day t, the turbulence is the *squared* Mahalanobis distance

        ``turbulence_t = (r_t - mu_t)^T  pinv(Sigma_t)  (r_t - mu_t)``

    (Kritzman & Li, 2010; the same quantity as FinRL's ``calculate_turbulence``). It is 0 until a
    full window of returns exists, i.e. for days ``0 .. window``. Unlike FinRL, the first two
    positive values are *not* zeroed (FinRL's loop keeps a counter that does so).

    Args:
        close: ``[T, S]`` close prices (no NaN; align the tickers first).
        window: number of trailing daily returns in the mean and covariance (252 = one trading year).

    Returns:
        ``[T]`` float64, dimensionless (on the order of S on an ordinary day).

    Raises:
        ValueError: wrong shape, non-finite prices, or ``window < 2``.
    """
    close = np.asarray(close, dtype=np.float64)
    if close.ndim != 2:
        raise ValueError(f"close must be a [T, S] array, got shape {close.shape}")
    if window < 2:
        raise ValueError(f"window must be at least 2, got {window}")
    if not np.isfinite(close).all():
        raise ValueError("close contains NaN or infinite values; align the tickers first (podium.finance.data.align)")
    num_days, num_assets = close.shape
    out = np.zeros(num_days)
    first = window + 1  # the first day whose trailing window holds `window` returns
    if num_days <= first:
        return out
    returns = close[1:] / close[:-1] - 1.0  # returns[j] is the return of day j + 1
    # all trailing windows at once: windows[k] = returns[k : k + window], the window of day k + window + 1
    windows = np.lib.stride_tricks.sliding_window_view(returns, window, axis=0)  # [T - window, S, window]
    # process days in chunks so that the [chunk, S, window] copies stay around 100 MB for any S
    chunk = max(1, int(1.2e7 // (num_assets * (window + num_assets))))
    for lo in range(0, num_days - first, chunk):
        hi = min(lo + chunk, num_days - first)
        hist = windows[lo:hi]
        mean = hist.mean(axis=2)
        centred = hist - mean[:, :, None]
        cov = centred @ centred.transpose(0, 2, 1) / (window - 1)  # [chunk, S, S]
        dev = returns[first - 1 + lo : first - 1 + hi] - mean  # [chunk, S]
        out[first + lo : first + hi] = np.einsum("ks,ksr,kr->k", dev, np.linalg.pinv(cov), dev)
    return out


def add_turbulence(df: pd.DataFrame, window: int = 252) -> pd.DataFrame:
    """Add a ``turbulence`` column (the same value for every ticker of a date), see :func:`turbulence_index`.

    Args:
        df: aligned long-format table (every ticker on every date) with ``date, tic, close``.
        window: trailing window in trading days.

    Returns:
        A copy sorted by ``(date, tic)`` with a float64 ``turbulence`` column.

    Raises:
        ValueError: a ticker is missing on some date (the message names the first such ticker and
            date); call :func:`podium.finance.data.align` first.
    """
    wide = df.pivot(index="date", columns="tic", values="close").sort_index()
    holes = wide.isna().to_numpy()
    if holes.any():
        day, asset = np.argwhere(holes)[0]
        date = pd.Timestamp(wide.index[day]).strftime("%Y-%m-%d")
        raise ValueError(
            f"add_turbulence needs every ticker on every date, but {wide.columns[asset]} has no close on {date} "
            f"({int(holes.sum())} missing in all); call podium.finance.data.align first"
        )
    turbulence = pd.Series(turbulence_index(wide.to_numpy(), window), index=wide.index, name="turbulence")
    out = df.drop(columns=["turbulence"], errors="ignore").sort_values(["date", "tic"], kind="stable")
    out = out.join(turbulence, on="date")
    return out.reset_index(drop=True)
