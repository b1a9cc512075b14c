"""Loading, validating, aligning and splitting long-format OHLCV tables."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from podium.finance.data import OHLCV_COLUMNS, align, load_ohlcv, select_period, shipped_path, split
from podium.finance.market import check_split

KNOWN_GAPS = {("CVX", "2010-11-19"), ("CRM", "2011-02-17"), ("TRV", "2011-02-17"), ("V", "2011-02-17")}


@pytest.fixture(scope="module")
def dow29() -> pd.DataFrame:
    return load_ohlcv("dow29")


@pytest.fixture()
def small() -> pd.DataFrame:
    """Two tickers over three days, every row present."""
    rows = []
    for day, date in enumerate(["2020-01-02", "2020-01-03", "2020-01-06"]):
        for tic, base in (("AAA", 10.0), ("BBB", 50.0)):
            price = base + day
            rows.append((date, tic, price, price + 1, price - 1, price + 0.5, 1000.0 * (day + 1)))
    return pd.DataFrame(rows, columns=list(OHLCV_COLUMNS))


def test_shipped_dow29_loads_offline(dow29: pd.DataFrame) -> None:
    assert shipped_path("dow29").is_file()
    assert "podium" in str(shipped_path("dow29")) and "shared" not in str(shipped_path("dow29"))
    assert list(dow29.columns) == list(OHLCV_COLUMNS)
    assert len(dow29) == 64_724 and dow29["tic"].nunique() == 29
    assert dow29["date"].min() == pd.Timestamp("2009-01-02") and dow29["date"].max() == pd.Timestamp("2017-11-10")
    assert dow29["date"].nunique() == 2232
    assert pd.api.types.is_datetime64_any_dtype(dow29["date"]) and dow29["close"].dtype == np.float64
    assert dow29.equals(dow29.sort_values(["date", "tic"]).reset_index(drop=True))


def test_shipped_etf_loads() -> None:
    etf = load_ohlcv("etf")
    assert sorted(etf["tic"].unique()) == ["DIA", "QQQ", "SPY"]
    assert etf.groupby("tic").size().to_dict() == {"DIA": 2231, "QQQ": 2232, "SPY": 2231}


def test_align_fills_the_four_known_gaps(dow29: pd.DataFrame) -> None:
    aligned, filled = align(dow29)
    assert len(aligned) == 2232 * 29
    assert aligned.groupby("tic").size().eq(2232).all()
    assert {(t, d.strftime("%Y-%m-%d")) for t, d in zip(filled["tic"], filled["date"], strict=True)} == KNOWN_GAPS
    assert (filled["method"] == "forward").all()
    for row in filled.itertuples():
        previous = dow29[(dow29["tic"] == row.tic) & (dow29["date"] < row.date)].iloc[-1]
        assert row.source_date == previous["date"]
        bar = aligned[(aligned["tic"] == row.tic) & (aligned["date"] == row.date)].iloc[0]
        assert bar["close"] == previous["close"]
        assert bar["open"] == bar["high"] == bar["low"] == bar["close"] and bar["volume"] == 0.0
    # rows that existed are untouched
    kept = aligned.merge(dow29, on=["date", "tic"], suffixes=("", "_raw"))
    assert len(kept) == len(dow29)
    for col in ("open", "high", "low", "close", "volume"):
        assert (kept[col] == kept[f"{col}_raw"]).all()


def test_align_without_gaps_reports_nothing(small: pd.DataFrame) -> None:
    aligned, filled = align(small)
    assert len(aligned) == 6 and filled.empty
    assert list(filled.columns) == ["date", "tic", "method", "source_date"]


def test_align_leading_gap_is_an_error_unless_backfilled(small: pd.DataFrame) -> None:
    late = small[~((small["tic"] == "BBB") & (small["date"] == "2020-01-02"))]
    with pytest.raises(ValueError, match=r"BBB \(first row 2020-01-03\)"):
        align(late)
    aligned, filled = align(late, backfill_leading=True)
    assert filled[["tic", "method"]].values.tolist() == [["BBB", "backward"]]
    assert filled["source_date"].iloc[0] == pd.Timestamp("2020-01-03")
    first = aligned[(aligned["tic"] == "BBB")].iloc[0]
    assert first["close"] == 51.5 and first["volume"] == 0.0


def test_align_refuses_a_ticker_that_ends_before_the_data(small: pd.DataFrame) -> None:
    """A stock that stopped trading (delisted, or dropped from the file) was forward-filled to the end of the
    data: the env traded it at its last price for months and the equal-weight basket held it there."""
    ended = small[~((small["tic"] == "AAA") & (small["date"] == "2020-01-06"))]
    with pytest.raises(ValueError, match=r"AAA \(last row 2020-01-03\).*Drop the ticker\(s\), or end the period by"):
        align(ended)


def test_align_forward_fills_a_middle_gap_and_carries_extra_columns(small: pd.DataFrame) -> None:
    small["note"] = np.arange(len(small), dtype=float)
    gap = small[~((small["tic"] == "AAA") & (small["date"] == "2020-01-03"))]
    aligned, filled = align(gap)
    row = aligned[(aligned["tic"] == "AAA") & (aligned["date"] == "2020-01-03")].iloc[0]
    assert row["close"] == 10.5 and row["open"] == 10.5 and row["note"] == 0.0
    assert filled["source_date"].iloc[0] == pd.Timestamp("2020-01-02")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda df: df.drop(columns=["volume"]), r"missing column\(s\) \['volume'\]"),
        (lambda df: pd.concat([df, df.iloc[[3]]]), r"duplicated \(date, tic\) rows: BBB on 2020-01-03 \(2 rows\)"),
        (
            lambda df: df.assign(close=df["close"].where(df.index != 2, np.nan)),
            r"NaN or infinite close.*AAA on 2020-01-03",
        ),
        (lambda df: df.assign(low=df["low"].where(df.index != 5, -1.0)), r"non-positive low.*BBB on 2020-01-06"),
        (lambda df: df.assign(open=df["open"].where(df.index != 0, 0.0)), r"non-positive open.*AAA on 2020-01-02"),
        (lambda df: df.assign(volume=df["volume"].where(df.index != 1, -5.0)), r"negative volume.*BBB on 2020-01-02"),
        (
            lambda df: df.assign(date=df["date"].where(df.index != 4, "not a date")),
            r"unparsable date.*AAA on 'not a date'",
        ),
    ],
)
def test_bad_tables_raise_naming_ticker_and_date(small: pd.DataFrame, mutate, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_ohlcv(mutate(small))


def test_unknown_ticker_and_bad_periods(dow29: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"ticker\(s\) \['XYZ'\] not in the data"):
        load_ohlcv(dow29, tickers=["AAPL", "XYZ"])
    with pytest.raises(ValueError, match=r"2018-01-02\.\.2021-10-01 is outside the data .*2009-01-02\.\.2017-11-10"):
        load_ohlcv(dow29, start="2018-01-02", end="2021-10-01")
    with pytest.raises(ValueError, match="outside the data"):
        load_ohlcv(dow29, start="2016-01-04", end="2020-12-31")  # partly beyond the end
    with pytest.raises(ValueError, match="after its end"):
        load_ohlcv(dow29, start="2016-01-04", end="2015-01-04")
    # a weekend/holiday of slack at the edges is fine
    assert load_ohlcv(dow29, start="2009-01-01", end="2009-01-31")["date"].min() == pd.Timestamp("2009-01-02")


def test_ticker_without_data_in_period_is_named(dow29: pd.DataFrame) -> None:
    late_v = dow29[~((dow29["tic"] == "V") & (dow29["date"] < "2010-01-01"))]
    with pytest.raises(ValueError, match=r"no data between 2009-01-02 and 2009-06-30: V \(its data span 2010-01-04"):
        select_period(late_v, "2009-01-02", "2009-06-30")
    with pytest.raises(ValueError, match=r"no data between .*V"):
        load_ohlcv(late_v, start="2009-01-02", end="2009-06-30", tickers=["AAPL", "V"])
    assert load_ohlcv(late_v, start="2009-01-02", end="2009-06-30", tickers=["AAPL"])["tic"].unique().tolist() == [
        "AAPL"
    ]


def test_split_by_date(dow29: pd.DataFrame) -> None:
    aligned, _ = align(dow29)
    train, test = split(aligned, train=("2009-01-02", "2015-12-31"), test=("2016-01-04", "2017-11-10"))
    assert train["date"].nunique() == 1762 and test["date"].nunique() == 470
    assert train["date"].max() < test["date"].min()
    assert len(train) + len(test) == len(aligned)
    with pytest.raises(ValueError, match="overlap"):
        split(aligned, train=("2009-01-02", "2016-06-30"), test=("2016-01-04", "2017-11-10"))


def test_a_split_in_the_wrong_time_order_is_refused_whatever_the_keyword_order() -> None:
    """check_split compared only pairs given in the order train, validation, test: a test period before the
    training period passed when the test period came first in the call."""
    train, test = ("2012-01-03", "2014-12-31"), ("2009-01-02", "2010-12-31")
    for periods in ({"train": train, "test": test}, {"test": test, "train": train}):
        with pytest.raises(ValueError, match=r"the test period 2009-01-02\.\.2010-12-31 comes before the train"):
            check_split(**periods)
    check_split(test=("2016-01-04", "2017-11-10"), validation=("2015-01-02", "2015-12-31"), train=train)


def test_file_formats(tmp_path: Path, small: pd.DataFrame) -> None:
    plain = tmp_path / "prices.csv"
    small.to_csv(plain, index=False)
    packed = tmp_path / "prices.csv.gz"
    with gzip.open(packed, "wt") as handle:
        small.to_csv(handle, index=False)
    assert load_ohlcv(plain).equals(load_ohlcv(packed))
    assert len(load_ohlcv(str(plain))) == 6
    with pytest.raises(FileNotFoundError, match="no such price file"):
        load_ohlcv(tmp_path / "missing.csv")
    odd = tmp_path / "prices.json"
    odd.write_text("{}")
    with pytest.raises(ValueError, match=re.escape("unsupported file type 'prices.json'")):
        load_ohlcv(odd)


def test_parquet_goes_through_the_same_validation(
    tmp_path: Path, small: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI has no parquet engine (pyarrow is 170 MB); stand in for pandas' reader and check podium's path
    path = tmp_path / "prices.parquet"
    path.write_bytes(b"PAR1")
    calls: list[Path] = []

    def fake_read_parquet(p: object, *args: object, **kwargs: object) -> pd.DataFrame:
        calls.append(Path(str(p)))
        return small.copy()

    monkeypatch.setattr(pd, "read_parquet", fake_read_parquet)
    assert load_ohlcv(path).equals(load_ohlcv(small))
    assert calls == [path]


def test_parquet_without_engine_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_engine(*args: object, **kwargs: object) -> pd.DataFrame:
        raise ImportError("Unable to find a usable engine")

    monkeypatch.setattr(pd, "read_parquet", no_engine)
    path = tmp_path / "prices.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(ImportError, match="pip install pyarrow"):
        load_ohlcv(path)


def _table(tickers: list[str], dates: list[str]) -> pd.DataFrame:
    rows = [dict(date=d, tic=t, open=1.0, high=1.0, low=1.0, close=1.0, volume=10.0) for d in dates for t in tickers]
    return pd.DataFrame(rows)


def test_a_users_file_keeps_its_tickers_and_dates_as_written(tmp_path: Path) -> None:
    """pandas' defaults read the ticker NA as missing (it crashed later in align), dropped 0700's zero, kept
    "AAPL " apart from AAPL, read 20090102 as nanoseconds since 1970, and kept time zones that broke every
    period comparison."""
    days = ["2009-01-02", "2009-01-05", "2009-01-06"]
    path = tmp_path / "mine.csv"
    _table(["NA", "0700", "AAPL "], days).to_csv(path, index=False)
    assert sorted(load_ohlcv(path)["tic"].unique()) == ["0700", "AAPL", "NA"]
    numbers = _table(["AAPL"], days)
    numbers["date"] = numbers["date"].str.replace("-", "").astype(int)
    numbers.to_csv(path, index=False)
    want = list(pd.to_datetime(days))
    assert list(load_ohlcv(path)["date"]) == want and list(load_ohlcv(numbers)["date"]) == want
    zoned = _table(["AAPL"], days)
    zoned["date"] = zoned["date"] + "T00:00:00-05:00"
    zoned.to_csv(path, index=False)
    assert list(load_ohlcv(path, start="2009-01-05")["date"]) == want[1:]
    zoned["date"] = ["2009-01-02T00:00:00-05:00", "2009-01-05T00:00:00-04:00", "2009-01-06Z"]  # summer time
    zoned["vix"] = ["", "2.5", "NA"]  # another column: blanks and NA are missing there, as pandas reads them
    zoned.to_csv(path, index=False)
    loaded = load_ohlcv(path)
    assert list(loaded["date"]) == want and loaded["vix"].isna().tolist() == [True, False, True]
    timed = _table(["AAPL", "MSFT"], days)
    timed["date"] = timed["date"] + " 16:00:00"  # some vendors stamp a bar with its close's time
    timed.to_csv(path, index=False)
    assert list(load_ohlcv(path, end="2009-01-06")["date"].unique()) == want  # the period's last day included
    twice = pd.concat([timed, timed.assign(date=timed["date"].str.replace("16:00", "10:00"))])
    with pytest.raises(ValueError, match="podium trades daily bars, one row per ticker and day"):
        load_ohlcv(twice)
    blank = _table(["AAPL", "MSFT"], days)
    blank.loc[1, "tic"] = ""
    blank.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"1 row\(s\) without a ticker \(tic\), on: '2009-01-02'"):
        load_ohlcv(path)
