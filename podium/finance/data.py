"""Daily OHLCV market data in long format: load, validate, align on one calendar, split by date.

The long ("FinRL") format has one row per (trading day, ticker) and the columns
``date, tic, open, high, low, close, volume``: prices in the quote currency (dollars for the shipped
US data sets), volume in shares. Extra columns (indicators, turbulence, ...) are carried along.

Two data sets ship with podium, so nothing here needs the network or a path outside the package:

* ``"dow29"``: 29 Dow Jones components, 2009-01-02..2017-11-10, split- and dividend-adjusted;
* ``"etf"``: the DIA, SPY and QQQ exchange-traded funds over the same dates (buy-and-hold benchmarks).

>>> from podium.finance.data import align, load_ohlcv, split
>>> prices, filled = align(load_ohlcv("dow29"))  # 4 known missing rows are forward-filled
>>> train, test = split(prices, train=("2009-01-02", "2015-12-31"), test=("2016-01-04", "2017-11-10"))
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "OHLCV_COLUMNS",
    "PRICE_COLUMNS",
    "SHIPPED_DATASETS",
    "align",
    "load_ohlcv",
    "select_period",
    "shipped_path",
    "split",
    "validate_ohlcv",
]

OHLCV_COLUMNS: tuple[str, ...] = ("date", "tic", "open", "high", "low", "close", "volume")
"""The columns every long-format price table must have."""

PRICE_COLUMNS: tuple[str, ...] = ("open", "high", "low", "close")
"""The columns that must hold finite, strictly positive prices."""

SHIPPED_DATASETS: dict[str, str] = {
    "dow29": "dow29_daily_2009-01-02_2017-11-10.csv.gz",
    "etf": "etf_benchmarks_dia_spy_qqq_daily_2009-01-02_2017-11-10.csv.gz",
}
"""Short names accepted by :func:`load_ohlcv`, mapped to the files in ``podium/finance/data/``."""

# A requested period may reach this far past either end of the data without being an error, so that
# ("2009-01-01", "2015-12-31") works when the first trading day is 2009-01-02 (weekends, holidays).
_PERIOD_SLACK = pd.Timedelta(days=4)
_MAX_LISTED = 5  # how many offending rows an error message lists


def shipped_path(name: str) -> Path:
    """Path of a data set shipped inside the package (``"dow29"`` or ``"etf"``).

    Raises:
        ValueError: unknown name.
    """
    if name not in SHIPPED_DATASETS:
        raise ValueError(f"unknown shipped data set {name!r}; choose one of {sorted(SHIPPED_DATASETS)}")
    return Path(str(resources.files("podium.finance") / "data" / SHIPPED_DATASETS[name]))


def load_ohlcv(
    source: str | os.PathLike[str] | pd.DataFrame,
    *,
    start: str | pd.Timestamp | None = None,
    end: str | pd.Timestamp | None = None,
    tickers: list[str] | tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Read a long-format OHLCV table and validate it (see :func:`validate_ohlcv`).

    Args:
        source: ``"dow29"`` or ``"etf"`` (the shipped data sets), a path to a ``.csv``, ``.csv.gz`` or
            ``.parquet`` file, or a DataFrame already in memory.
        start, end: keep only the dates in ``[start, end]`` (inclusive). Each must lie within the data
            (up to a few days of slack for weekends and holidays).
        tickers: keep only these tickers; each must be present and have data in the period.

    Returns:
        A new DataFrame sorted by ``(date, tic)`` with a fresh ``RangeIndex``: ``date`` as
        ``datetime64``, ``tic`` as strings, prices and volume as float64, extra columns unchanged.

    Raises:
        ValueError: unknown name or file type, or any problem listed in :func:`validate_ohlcv`.
        FileNotFoundError: the path does not exist.
    """
    if isinstance(source, pd.DataFrame):
        return validate_ohlcv(source, start=start, end=end, tickers=tickers)
    if isinstance(source, str) and source in SHIPPED_DATASETS:
        path = shipped_path(source)
    else:
        path = Path(source)
        if not path.exists():
            hint = f" (shipped data sets: {sorted(SHIPPED_DATASETS)})" if not path.suffix else ""
            raise FileNotFoundError(f"no such price file: {str(path)!r}{hint}")
    name = path.name.lower()
    if name.endswith((".csv", ".csv.gz")):
        # tickers as written: "NA" is a ticker, not a missing value, and "0700" keeps its zero; every other
        # column reads pandas' usual missing-value markers as missing
        columns = pd.read_csv(path, nrows=0).columns
        markers = {c: list(_MISSING) for c in columns if c != "tic"}
        frame = pd.read_csv(path, dtype={"tic": str, "date": str}, keep_default_na=False, na_values=markers)
    elif name.endswith(".parquet"):
        try:
            frame = pd.read_parquet(path)
        except ImportError as exc:
            raise ImportError(
                f"reading {path.name} needs a parquet engine: pip install pyarrow (or use a .csv / .csv.gz file)"
            ) from exc
    else:
        raise ValueError(f"unsupported file type {path.name!r}: use .csv, .csv.gz or .parquet")
    return validate_ohlcv(frame, start=start, end=end, tickers=tickers, source=str(path))


_MISSING = ("", "NA", "N/A", "n/a", "NaN", "nan", "-NaN", "-nan", "NULL", "null", "None", "<NA>", "#N/A", "#NA")


def _parse_dates(dates: pd.Series) -> pd.Series:
    """Dates as day timestamps (midnight): ISO strings, datetimes, and YYYYMMDD numbers (which pandas would
    read as nanoseconds since 1970); a time zone or UTC offset is dropped, keeping the local date (offsets may
    change with summer time), and so is a time of day (a bar stamped ``2017-11-10 16:00`` is the bar of
    2017-11-10, which a period ending on that day includes). Unparsable ones are NaT."""
    return _parse_timestamps(dates).dt.normalize()


def _parse_timestamps(dates: pd.Series) -> pd.Series:
    text = dates.astype(str).str.strip()
    given = text[dates.notna()]
    if len(given) and given.str.fullmatch(r"\d{8}(\.0)?").all():  # every value a YYYYMMDD number (or string)
        return pd.to_datetime(text.str.replace(r"\.0$", "", regex=True), format="%Y%m%d", errors="coerce")
    if dates.dtype == object or pd.api.types.is_string_dtype(dates):
        dates = text.str.replace(r"(Z|[+-]\d\d:?\d\d)$", "", regex=True)  # the local time, whatever its offset
        parsed = pd.to_datetime(dates, errors="coerce")
        if (parsed.isna() & (dates != "") & (dates != "nan")).any():  # formats that differ from row to row
            parsed = pd.to_datetime(dates, errors="coerce", format="mixed")
        return parsed
    parsed = pd.to_datetime(dates, errors="coerce", utc=False)
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        parsed = parsed.dt.tz_localize(None)  # 2009-01-02T00:00-05:00 is the exchange's 2009-01-02
    return parsed


def validate_ohlcv(
    df: pd.DataFrame,
    *,
    start: str | pd.Timestamp | None = None,
    end: str | pd.Timestamp | None = None,
    tickers: list[str] | tuple[str, ...] | None = None,
    source: str = "the price table",
) -> pd.DataFrame:
    """Check a long-format OHLCV table and return a normalised, sorted copy.

    Checks, in order (each failure is a ``ValueError`` that names the offending ticker and date):
    the required columns exist; every row has a ticker; every date parses (ISO dates, datetimes,
    YYYYMMDD numbers; a time zone is dropped, keeping the local date); no (date, tic) pair appears
    twice; open, high, low and close are finite and > 0; volume is finite and >= 0; requested tickers exist; the
    requested period ``[start, end]`` lies within the data; every kept ticker has at least one row
    in that period.

    Args:
        df: the table (not modified).
        start, end: optional inclusive period to keep.
        tickers: optional tickers to keep.
        source: how error messages refer to the table (a file name, for example).

    Returns:
        See :func:`load_ohlcv`.
    """
    missing = [c for c in OHLCV_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(
            f"{source} is missing column(s) {missing}; a long-format price table needs {list(OHLCV_COLUMNS)} "
            f"(it has {list(df.columns)})"
        )
    out = df.reset_index(drop=True)  # a copy; positional masks below need a unique index
    no_tic = out["tic"].isna() | (out["tic"].astype(str).str.strip() == "")
    if no_tic.any():
        rows = ", ".join(repr(d) for d in out.loc[no_tic, "date"].head(_MAX_LISTED))
        raise ValueError(f"{source}: {int(no_tic.sum())} row(s) without a ticker (tic), on: {rows}")
    out["tic"] = out["tic"].astype(str).str.strip()  # "AAPL " is AAPL
    parsed = _parse_dates(out["date"])
    bad_dates = parsed.isna()
    if bad_dates.any():
        rows = out.loc[bad_dates, ["tic", "date"]].head(_MAX_LISTED)
        listed = ", ".join(f"{t} on {d!r}" for t, d in zip(rows["tic"], rows["date"], strict=True))
        raise ValueError(f"{source}: {int(bad_dates.sum())} unparsable date(s): {listed}")
    out["date"] = parsed
    for col in (*PRICE_COLUMNS, "volume"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(np.float64)

    dup = out.duplicated(subset=["date", "tic"], keep=False)
    if dup.any():
        rows = out.loc[dup].groupby(["tic", "date"], sort=True).size().head(_MAX_LISTED)
        listed = ", ".join(f"{tic} on {_day(date)} ({n} rows)" for (tic, date), n in rows.items())
        raise ValueError(
            f"{source}: duplicated (date, tic) rows: {listed}; podium trades daily bars, one row per ticker and "
            "day (a time of day is ignored): keep one bar per day"
        )

    for col in PRICE_COLUMNS:
        _check_values(out, col, ~np.isfinite(out[col].to_numpy()), "NaN or infinite", source)
        _check_values(out, col, out[col].to_numpy() <= 0, "non-positive", source)
    volume = out["volume"].to_numpy()
    _check_values(out, "volume", ~np.isfinite(volume), "NaN or infinite", source)
    _check_values(out, "volume", volume < 0, "negative", source)

    if tickers is not None:
        known = set(out["tic"].unique())
        absent = [t for t in tickers if t not in known]
        if absent:
            raise ValueError(f"{source}: ticker(s) {absent} not in the data (it has {sorted(known)})")
        out = out[out["tic"].isin(list(tickers))]
    out = out.sort_values(["date", "tic"], kind="stable").reset_index(drop=True)
    if start is not None or end is not None:
        out = select_period(out, start, end, source=source)
    return out


def select_period(
    df: pd.DataFrame,
    start: str | pd.Timestamp | None,
    end: str | pd.Timestamp | None,
    *,
    source: str = "the price table",
) -> pd.DataFrame:
    """Rows of a validated long-format table with ``start <= date <= end``.

    Args:
        df: a table with ``date`` (datetime64) and ``tic`` columns, e.g. from :func:`load_ohlcv`.
        start, end: inclusive bounds; ``None`` means the first / last date of the data.
        source: how error messages refer to the table.

    Raises:
        ValueError: ``start > end``; the period reaches more than 4 days beyond the data or does
            not overlap it; a ticker has no rows in the period (the message names it and says where
            its data lie).
    """
    if df.empty:
        raise ValueError(f"{source} is empty")
    first, last = df["date"].min(), df["date"].max()
    lo = first if start is None else pd.Timestamp(start)
    hi = last if end is None else pd.Timestamp(end)
    span = f"{_day(first)}..{_day(last)}"
    if lo > hi:
        raise ValueError(f"period start {_day(lo)} is after its end {_day(hi)}")
    if lo < first - _PERIOD_SLACK or hi > last + _PERIOD_SLACK or lo > last or hi < first:
        raise ValueError(f"requested period {_day(lo)}..{_day(hi)} is outside the data of {source} ({span})")
    out = df[(df["date"] >= lo) & (df["date"] <= hi)]
    present = set(out["tic"].unique())
    empty = [t for t in df["tic"].unique() if t not in present]
    if empty:
        spans = df[df["tic"].isin(empty)].groupby("tic")["date"].agg(["min", "max"])
        listed = ", ".join(f"{t} (its data span {_day(r['min'])}..{_day(r['max'])})" for t, r in spans.iterrows())
        raise ValueError(f"{source}: ticker(s) with no data between {_day(lo)} and {_day(hi)}: {listed}")
    return out.reset_index(drop=True)


def align(df: pd.DataFrame, *, backfill_leading: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Put every ticker on one calendar (the union of all dates) and fill the holes.

    A missing (date, ticker) row is filled from the ticker's previous row (forward fill): ``close``
    carries over and the day becomes a flat bar (``open = high = low = close``) with ``volume = 0``,
    i.e. "no trading happened"; any extra columns carry over unchanged. Holes *before* a ticker's
    first row cannot be forward-filled: by default they are an error; with
    ``backfill_leading=True`` they are filled the same way from the ticker's first row instead
    (this uses a later price, so keep it out of backtests). Holes *after* a ticker's last row (a stock
    delisted or dropped from the data) are always an error: it would trade at its last price to the end.

    Args:
        df: a long-format table (it is validated first, see :func:`validate_ohlcv`).
        backfill_leading: fill holes before a ticker's first row from that row instead of raising.

    Returns:
        ``(aligned, filled)``: ``aligned`` has ``T * S`` rows (T dates, S tickers) sorted by
        ``(date, tic)``; ``filled`` lists each filled row with the columns ``date``, ``tic``,
        ``method`` (``"forward"`` or ``"backward"``) and ``source_date`` (the row copied from),
        sorted by ``(date, tic)``. It is empty when nothing was missing.

    Raises:
        ValueError: as :func:`validate_ohlcv`; a ticker starts after the first date of the calendar and
            ``backfill_leading`` is False (the message names the ticker and its first date); or a ticker
            ends before the calendar's last date (the message names it and its last date).
    """
    data = validate_ohlcv(df)
    calendar = np.sort(data["date"].unique())
    tickers = np.sort(data["tic"].unique())
    lasts = data.groupby("tic")["date"].max()
    ended = lasts[lasts < calendar[-1]]
    if len(ended):
        listed = ", ".join(f"{t} (last row {_day(d)})" for t, d in ended.items())
        raise ValueError(
            f"ticker(s) end before the last date of the data {_day(calendar[-1])}: {listed}; filled forward, a "
            f"stock that stopped trading would trade at its last price to the end. Drop the ticker(s), or end "
            f"the period by {_day(ended.min())}"
        )
    full = pd.MultiIndex.from_product([calendar, tickers], names=["date", "tic"])
    table = data.set_index(["date", "tic"]).reindex(full)
    holes = table["close"].isna().to_numpy()  # validated rows never have a NaN close
    if not holes.any():
        return data, _filled_frame(full[:0], np.array([], dtype=str), full.get_level_values("date")[:0])

    by_ticker = pd.Series(~holes, index=full).groupby(level="tic")
    leading = holes & ~by_ticker.cummax().to_numpy()
    if leading.any() and not backfill_leading:
        late = pd.Series(leading, index=full).groupby(level="tic").any()
        firsts = data.groupby("tic")["date"].min()
        listed = ", ".join(f"{t} (first row {_day(firsts[t])})" for t in late.index[late.to_numpy()])
        raise ValueError(
            f"ticker(s) start after the first date of the calendar {_day(calendar[0])}: {listed}; "
            "pass backfill_leading=True to fill from each first row, or choose a later start date"
        )
    row_dates = pd.Series(full.get_level_values("date"), index=full).where(~holes)
    table["_source"] = row_dates
    donors = table.groupby(level="tic").ffill()
    if leading.any():
        donors = donors.groupby(level="tic").bfill()
    table.loc[holes] = donors.loc[holes]  # existing rows stay exactly as they were
    for col in ("open", "high", "low"):
        table.loc[holes, col] = table.loc[holes, "close"]
    table.loc[holes, "volume"] = 0.0
    filled = _filled_frame(full[holes], np.where(leading[holes], "backward", "forward"), table["_source"][holes])
    aligned = table.drop(columns="_source").reset_index()
    return aligned[list(data.columns)], filled


def _filled_frame(index: pd.MultiIndex, method: np.ndarray, source: pd.Series | pd.Index) -> pd.DataFrame:
    """The report of :func:`align`: one row per filled (date, tic)."""
    return pd.DataFrame(
        {
            "date": index.get_level_values("date"),
            "tic": index.get_level_values("tic").astype(str),
            "method": method.astype(str),
            "source_date": np.asarray(source, dtype=index.get_level_values("date").dtype),
        }
    )


def split(
    df: pd.DataFrame,
    train: tuple[str | pd.Timestamp, str | pd.Timestamp],
    test: tuple[str | pd.Timestamp, str | pd.Timestamp],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Cut a long-format table into a training and a test period by date (both inclusive).

    Args:
        df: a validated table (e.g. from :func:`align`).
        train: ``(start, end)`` of the training period.
        test: ``(start, end)`` of the test period; it must start after the training period ends.

    Returns:
        ``(train_rows, test_rows)``, each with a fresh index.

    Raises:
        ValueError: the periods overlap, or either fails :func:`select_period`'s checks.
    """
    train_end, test_start = pd.Timestamp(train[1]), pd.Timestamp(test[0])
    if test_start <= train_end:
        raise ValueError(
            f"train period ends {_day(train_end)} but test period starts {_day(test_start)}: "
            "they overlap, which would leak test data into training"
        )
    return select_period(df, *train), select_period(df, *test)


def _check_values(df: pd.DataFrame, col: str, bad: np.ndarray, what: str, source: str) -> None:
    if not bad.any():
        return
    rows = df.loc[bad, ["tic", "date", col]].sort_values(["date", "tic"]).head(_MAX_LISTED)
    listed = ", ".join(f"{t} on {_day(d)} ({v})" for t, d, v in zip(rows["tic"], rows["date"], rows[col], strict=True))
    raise ValueError(f"{source}: {int(bad.sum())} {what} {col} value(s): {listed}")


def _day(ts: pd.Timestamp | np.datetime64) -> str:
    return pd.Timestamp(ts).strftime("%Y-%m-%d")
