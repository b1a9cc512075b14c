"""A market as dense arrays (T trading days × S stocks), the input of the trading environments.

>>> from podium.finance.market import TEST_PERIOD, load_market
>>> market = load_market("dow29", period=TEST_PERIOD)  # shipped data + FinRL indicators + turbulence
>>> market.close.shape  # (T, S) = (470, 29)
(470, 29)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from podium.finance.data import SHIPPED_DATASETS, align, load_ohlcv, select_period
from podium.finance.indicators import FINRL_INDICATORS, add_indicators, add_turbulence

__all__ = [
    "TEST_PERIOD",
    "TRAIN_PERIOD",
    "VALIDATION_PERIOD",
    "MarketData",
    "Period",
    "check_split",
    "load_market",
    "prepared_frame",
]

TRAIN_PERIOD: tuple[str, str] = ("2009-01-02", "2015-12-31")
"""Training period of the shipped Dow-29 data (1,762 trading days)."""

TEST_PERIOD: tuple[str, str] = ("2016-01-04", "2017-11-10")
"""Test period of the shipped Dow-29 data (470 trading days)."""

VALIDATION_PERIOD: tuple[str, str] = ("2015-01-02", "2015-12-31")
"""The year a trading tournament selects its policies on when it trains on 2009-2014 (examples/stock_dow29.yaml)."""

Period = tuple[str | pd.Timestamp, str | pd.Timestamp]
"""An inclusive ``(start, end)`` pair of dates."""


@dataclass(frozen=True, eq=False)
class MarketData:
    """Prices and features of S stocks over T trading days, every stock on every day.

    Attributes:
        dates: ``[T]`` trading days (``datetime64``), increasing.
        tickers: the S ticker symbols, in column order.
        close: ``[T, S]`` close prices in dollars (the price every trade executes at), float64, > 0.
        indicators: ``[T, K, S]`` float64 features (indicator-major), e.g. :data:`FINRL_INDICATORS`.
        indicator_names: the K names of ``indicators``.
        turbulence: ``[T]`` turbulence index (see :func:`~podium.finance.indicators.turbulence_index`)
            or ``None`` when the data has none.
    """

    dates: np.ndarray
    tickers: tuple[str, ...]
    close: np.ndarray
    indicators: np.ndarray
    indicator_names: tuple[str, ...]
    turbulence: np.ndarray | None = None

    def __post_init__(self) -> None:
        num_days, num_stocks = self.close.shape if self.close.ndim == 2 else (-1, -1)
        if num_days < 2 or num_stocks < 1:
            raise ValueError(f"close must be [T, S] with T >= 2 days and S >= 1 stocks, got {self.close.shape}")
        if len(self.dates) != num_days or len(self.tickers) != num_stocks:
            raise ValueError(
                f"{len(self.dates)} dates and {len(self.tickers)} tickers do not match "
                f"close of shape {self.close.shape}"
            )
        expected = (num_days, len(self.indicator_names), num_stocks)
        if self.indicators.shape != expected:
            raise ValueError(f"indicators must have shape [T, K, S] = {expected}, got {self.indicators.shape}")
        if not (np.isfinite(self.close).all() and (self.close > 0).all()):
            day, stock = np.argwhere(~(np.isfinite(self.close) & (self.close > 0)))[0]
            raise ValueError(f"close of {self.tickers[stock]} on {_day(self.dates[day])} is {self.close[day, stock]}")
        if not np.isfinite(self.indicators).all():
            day, k, stock = np.argwhere(~np.isfinite(self.indicators))[0]
            name, tic, date = self.indicator_names[k], self.tickers[stock], _day(self.dates[day])
            raise ValueError(f"indicator {name!r} of {tic} on {date} is not finite")
        turbulence = self.turbulence
        if turbulence is not None and (turbulence.shape != (num_days,) or not np.isfinite(turbulence).all()):
            raise ValueError(f"turbulence must be a finite [T] = [{num_days}] array, got shape {self.turbulence.shape}")

    @property
    def num_days(self) -> int:
        """T, the number of trading days."""
        return int(self.close.shape[0])

    @property
    def num_stocks(self) -> int:
        """S, the number of stocks."""
        return int(self.close.shape[1])

    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        indicators: Sequence[str] = FINRL_INDICATORS,
        period: Period | None = None,
    ) -> MarketData:
        """Build from a long-format table that already holds the indicator columns.

        Args:
            df: rows ``(date, tic)`` with ``close``, every column in ``indicators`` and optionally
                ``turbulence`` (the same value for all tickers of a date), e.g. the output of
                :func:`prepared_frame`.
            indicators: the indicator columns to use, in this order.
            period: optional inclusive ``(start, end)`` to keep.

        Raises:
            ValueError: a column is missing; a ticker is missing on some date (the message names
                both; run :func:`~podium.finance.data.align` first); turbulence differs between
                tickers of one date; or the period checks of :func:`~podium.finance.data.select_period`.
        """
        missing = [c for c in ("date", "tic", "close", *indicators) if c not in df.columns]
        if missing:
            raise ValueError(f"the market table is missing column(s) {missing}")
        frame = df.assign(date=pd.to_datetime(df["date"]), tic=df["tic"].astype(str))
        if period is not None:
            frame = select_period(frame, *period)
        extra = ["turbulence"] if "turbulence" in frame.columns and "turbulence" not in indicators else []
        columns = ["close", *indicators, *extra]
        wide = frame.pivot(index="date", columns="tic", values=columns).sort_index()
        holes = wide["close"].isna().to_numpy()
        if holes.any():
            day, stock = np.argwhere(holes)[0]
            raise ValueError(
                f"{wide['close'].columns[stock]} has no row on {_day(wide.index[day])} "
                f"({int(holes.sum())} (date, tic) rows missing); run podium.finance.data.align first"
            )
        tickers = tuple(str(t) for t in wide["close"].columns)
        turbulence = None
        if "turbulence" in frame.columns:
            per_date = wide["turbulence"].to_numpy()
            if not np.allclose(per_date, per_date[:, :1], rtol=0.0, atol=1e-9, equal_nan=True):
                day = int(np.argwhere(~np.isclose(per_date, per_date[:, :1], rtol=0.0, atol=1e-9))[0, 0])
                raise ValueError(f"turbulence differs between tickers on {_day(wide.index[day])}")
            turbulence = per_date[:, 0].astype(np.float64)
        values = np.stack([wide[name].to_numpy(np.float64) for name in indicators], axis=1)
        return cls(
            dates=wide.index.to_numpy(),
            tickers=tickers,
            close=wide["close"].to_numpy(np.float64),
            indicators=values.reshape(len(wide), len(indicators), len(tickers)),
            indicator_names=tuple(indicators),
            turbulence=turbulence,
        )

    @functools.cached_property
    def frame(self) -> pd.DataFrame:
        """The market back in long format, indexed by day number (0..T-1, repeated per ticker).

        Columns ``date, tic, close``, the indicators and (if present) ``turbulence``. This is the
        shape FinRL's environments read a day from (``frame.loc[day]``). Cached: do not modify it.
        """
        num_days, num_stocks = self.close.shape
        columns: dict[str, np.ndarray] = {
            "date": np.repeat(self.dates, num_stocks),
            "tic": np.tile(np.array(self.tickers, dtype=object), num_days),
            "close": self.close.reshape(-1),
        }
        for k, name in enumerate(self.indicator_names):
            columns[name] = self.indicators[:, k, :].reshape(-1)
        if self.turbulence is not None:
            columns["turbulence"] = np.repeat(self.turbulence, num_stocks)
        return pd.DataFrame(columns, index=pd.Index(np.repeat(np.arange(num_days), num_stocks), name="day"))


@functools.lru_cache(maxsize=4)
def _shipped_frame(name: str, indicators: tuple[str, ...], turbulence_window: int) -> pd.DataFrame:
    prices, _ = align(load_ohlcv(name))
    return add_turbulence(add_indicators(prices, indicators), turbulence_window)


def prepared_frame(
    source: str | pd.DataFrame = "dow29",
    indicators: Sequence[str] = FINRL_INDICATORS,
    turbulence_window: int = 252,
) -> pd.DataFrame:
    """Load, align, and add indicators and turbulence, over the source's whole history.

    Indicators and turbulence look only backwards, so computing them over the whole history and
    cutting periods afterwards leaks nothing, and lets a test period start with warmed-up values.

    Args:
        source: a shipped data set name (``"dow29"``, ``"etf"``; the result is cached per process),
            a file path, or a raw OHLCV DataFrame (see :func:`~podium.finance.data.load_ohlcv`).
        indicators: indicator columns to add (``stockstats`` names).
        turbulence_window: trailing window of the turbulence index, in trading days.

    Returns:
        A long-format table sorted by ``(date, tic)``; treat the cached shipped one as read-only.
    """
    if isinstance(source, str) and source in SHIPPED_DATASETS:
        return _shipped_frame(source, tuple(indicators), turbulence_window)
    prices, _ = align(load_ohlcv(source))
    return add_turbulence(add_indicators(prices, indicators), turbulence_window)


def check_split(**periods: Period | None) -> None:
    """Refuse data splits that overlap, e.g. ``check_split(train=..., validation=..., test=...)`` (None:
    not used). Each period is inclusive ``(start, end)``; they must be disjoint, and in time order: training
    before validation before test.

    Raises:
        ValueError: naming the two periods that overlap, their dates, and what to change.
    """
    given = [(name, pd.Timestamp(p[0]), pd.Timestamp(p[1])) for name, p in periods.items() if p is not None]
    for name, start, end in given:
        if start > end:
            raise ValueError(f"the {name} period starts ({start.date()}) after it ends ({end.date()})")
    for i, (a, a0, a1) in enumerate(given):
        for b, b0, b1 in given[i + 1 :]:
            if a0 <= b1 and b0 <= a1:
                raise ValueError(
                    f"the {a} period {a0.date()}..{a1.date()} overlaps the {b} period {b0.date()}..{b1.date()}: "
                    f"data used to {_USE[a]} must not be used to {_USE[b]}; make the periods disjoint"
                )
            if a in _USE and b in _USE:  # the periods in their order of use, whatever the order given
                order = list(_USE)
                (first, f0, f1), (then, t0, t1) = sorted([(a, a0, a1), (b, b0, b1)], key=lambda p: order.index(p[0]))
                if t1 < f0:
                    raise ValueError(
                        f"the {then} period {t0.date()}..{t1.date()} comes before the {first} period "
                        f"{f0.date()}..{f1.date()}: data used to {_USE[then]} must come after the data used to "
                        f"{_USE[first]}, or the policy has seen the future; swap the periods"
                    )


_USE = {"train": "train", "validation": "select policies", "test": "test them"}


def load_market(
    source: str | pd.DataFrame | MarketData | None = "dow29",
    period: Period | None = None,
    indicators: Sequence[str] = FINRL_INDICATORS,
) -> MarketData:
    """A :class:`MarketData` from a shipped name, a file, a table, or a ready one.

    Args:
        source: ``None`` (the shipped Dow-29 set with ``period`` defaulting to :data:`TRAIN_PERIOD`),
            ``"dow29"`` or ``"etf"`` (a shipped set, whole history by default), a path to an OHLCV
            file, a long-format DataFrame, or a :class:`MarketData` (returned as is when ``period``
            is None). A DataFrame that already has all ``indicators`` columns is used as given (it
            must be aligned); otherwise it is treated as raw OHLCV and prepared with
            :func:`prepared_frame`.
        period: inclusive ``(start, end)`` to cut out.
        indicators: indicator columns (``stockstats`` names).
    """
    if source is None:
        source, period = "dow29", period or TRAIN_PERIOD
    if isinstance(source, MarketData):
        if period is None:
            return source
        return MarketData.from_frame(source.frame, source.indicator_names, period)
    if isinstance(source, pd.DataFrame) and all(c in source.columns for c in indicators):
        return MarketData.from_frame(source, indicators, period)
    return MarketData.from_frame(prepared_frame(source, indicators), indicators, period)


def _day(ts: np.datetime64 | pd.Timestamp) -> str:
    return pd.Timestamp(ts).strftime("%Y-%m-%d")
