"""Backtests: trade a trained policy (or an ensemble) through a held-out period and compare it with buy-and-hold.

>>> from podium.finance.backtest import backtest
>>> report = backtest("runs/my-trading-run", "2016-01-04", "2017-11-10", out_dir="runs/my-trading-run/backtest")
>>> report.metrics  # policy vs DIA vs equal weight: cumulative/annual return, volatility, Sharpe, drawdown, Calmar

**How a backtest runs.** One evaluation account of :class:`~podium.finance.env.StockTradingVecEnv`
(``num_envs=1``, ``random_start=False``: it starts on the first trading day of the period with exactly
``initial_cash`` and no shares) steps through every day of the period once. The env is built from the
policy's own ``env_kwargs`` (costs, ``hmax``, indicators, observation scales, ...) with the period, the
start rule and the episode length replaced, and with float64 accounting. Each day the policy's
deterministic action is applied; an ensemble applies the mean of its members' actions.

**Conventions of the daily table.** Row ``t`` describes the close of trading day ``t``: ``policy`` is the
account value ``cash + holdings · close[t]`` of the position carried into the day (before that day's
orders, which execute at ``close[t]`` and show up in the trades table and in the next row), ``cash`` and
``holdings_value`` are its two parts and ``transaction_cost`` is what the day's orders paid. The first row
is the initial cash; the last day has no orders (the episode ends there).

**Benchmarks** (same dates, same initial cash, bought at the close of the first day and never traded
again, fractional shares, **no transaction costs**, so that they match the usual published reference
numbers; with the env's 0.2% they would end 0.2% lower):

* ``DIA`` (the benchmark ticker from the shipped ETF data), standing in for the Dow Jones index;
* ``equal_weight``: the initial cash split evenly over the env's stocks (no rebalancing).
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from podium.api import Policy, load
from podium.envs import make, registry
from podium.finance.data import SHIPPED_DATASETS, load_ohlcv
from podium.finance.env import FILLS, StockTradingVecEnv
from podium.finance.indicators import FINRL_INDICATORS
from podium.finance.market import TEST_PERIOD, TRAIN_PERIOD, MarketData, check_split, load_market, prepared_frame
from podium.finance.metrics import METRICS, performance_table
from podium.logging import figure, save_figure
from podium.rundir import PodDir, TournamentDir, not_a_file
from podium.store import CheckpointError, load_checkpoint

__all__ = [
    "BacktestReport",
    "backtest",
    "backtest_command",
    "benchmark_prices",
    "buy_and_hold",
    "default_out_dir",
    "find_snapshots",
    "generalisation_curve",
    "resolve_policy_paths",
    "seen_periods",
]

PathLike = str | os.PathLike[str]
PolicyLike = Policy | PathLike

POLICY = "policy"
"""Name of the traded strategy in the daily table and the metrics table."""
EQUAL_WEIGHT = "equal_weight"
"""Name of the equal-weight buy-and-hold basket."""

_PERIOD_SLACK = pd.Timedelta(days=4)  # a period may overhang the data by a weekend plus a holiday
# env settings that change what a policy observes: every member of an ensemble must share them
_OBSERVATION_KWARGS = ("indicators", "hmax", "price_scale", "indicator_scales", "initial_cash")


@dataclass
class BacktestReport:
    """The result of :func:`backtest`.

    Attributes:
        daily: one row per trading day (index ``date``), columns ``policy``, the benchmark ticker
            (e.g. ``DIA``) and ``equal_weight`` (account values in dollars), ``cash``,
            ``holdings_value`` and ``transaction_cost`` (dollars; conventions in the module docstring).
        trades: the policy's trades in long format, one row per (date, ticker) with a non-zero
            order: ``date, tic, shares`` (signed: + bought, - sold), ``price`` (the close it executed
            at, dollars), ``value`` (``shares × price``, dollars) and ``cost`` (transaction cost, dollars).
        holdings: ``[T, S]`` shares held at each day's close before that day's orders (index ``date``,
            one column per ticker).
        metrics: one row per strategy (``policy``, benchmark, ``equal_weight``), columns
            ``initial_value``, ``final_value`` (dollars) and :data:`~podium.finance.metrics.METRICS`.
        tickers: the S tickers traded, in column order.
        start, end: the first and last trading day of the backtest (``YYYY-MM-DD``).
        initial_cash: starting cash in dollars.
        transaction_cost: fraction of the traded value paid per trade (the policy only).
        policies: where each ensemble member came from (checkpoint paths).
        files: the files written (``backtest``, ``trades``, ``metrics``, ``plot``), when ``out_dir`` was given.
    """

    daily: pd.DataFrame
    trades: pd.DataFrame
    holdings: pd.DataFrame
    metrics: pd.DataFrame
    tickers: tuple[str, ...]
    start: str
    end: str
    initial_cash: float
    transaction_cost: float
    policies: list[str]
    files: dict[str, Path] = field(default_factory=dict)
    in_sample: list[str] = field(default_factory=list)
    """Where the period overlaps data a member trained or was selected on (see :func:`seen_periods`): then
    the metrics are in-sample, not a test. Empty for an honest out-of-sample backtest."""

    @property
    def out_dir(self) -> Path | None:
        """The directory the files were written to, if any."""
        return next(iter(self.files.values())).parent if self.files else None


# --------------------------------------------------------------------------------------------- policies
def resolve_policy_paths(
    path: PathLike, top_k: int = 1, *, checkpoints: Sequence[PathLike] | None = None
) -> list[Path]:
    """The checkpoint files to backtest for a checkpoint, a pod run directory or a tournament directory.

    Args:
        path: a checkpoint file (``.pt``); a pod run directory (its ``checkpoints/best.pt``, else
            ``checkpoints/last.pt``); or a tournament run directory (one holding ``tournament.yaml``),
            whose policies must be given in ``checkpoints``.
        top_k: how many policies to return (an ensemble of the best ``top_k``). A checkpoint file or a
            pod run directory holds one policy, so only ``top_k=1`` works for them.
        checkpoints: explicit checkpoint files, best first (e.g. a tournament leaderboard's top
            entries); when given, the first ``top_k`` of them are returned and ``path`` only names the run.

    Returns:
        ``top_k`` existing checkpoint paths.

    Raises:
        FileNotFoundError: ``path`` or a listed checkpoint does not exist.
        ValueError: ``top_k < 1``; more policies asked for than available; a tournament directory
            without ``checkpoints``; a directory that is no podium run.
    """
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    path = Path(path)
    if checkpoints is not None:
        files = [Path(c) for c in checkpoints]
        missing = [str(c) for c in files if not c.is_file()]
        if missing:
            raise FileNotFoundError(f"checkpoint file(s) not found: {missing}")
        if len(files) < top_k:
            raise ValueError(f"top_k={top_k} policies asked for, but only {len(files)} checkpoint(s) given")
        return files[:top_k]
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (expected a checkpoint .pt file or a run directory)")
    if path.is_file():
        found = [path]
    elif TournamentDir(path).holds_tournament():
        found = _tournament_checkpoints(path, top_k)
    else:
        policy = PodDir(path).policy_checkpoint()
        found = [policy] if policy is not None else []
        if not found:
            raise ValueError(
                f"{path} has no checkpoints/best.pt or checkpoints/last.pt; pass a checkpoint file, "
                "a pod run directory or a tournament run directory"
            )
        found = found[:1]
    if top_k > len(found):
        raise ValueError(
            f"top_k={top_k}, but {path} holds {len(found)} policy; an ensemble needs a tournament run directory "
            "or an explicit list of checkpoints"
        )
    return found[:top_k]


def _tournament_checkpoints(run_dir: Path, top_k: int) -> list[Path]:
    """Hook: the leaderboard's best ``top_k`` checkpoints of a tournament run directory.

    Tournaments resolve their own leaderboard; until that is wired here, callers pass the files
    through ``resolve_policy_paths(..., checkpoints=[...])``.
    """
    raise ValueError(
        f"{run_dir} is a tournament run directory; pass its leaderboard's checkpoint files with "
        f"checkpoints=[...] (best first) to pick the top {top_k}"
    )


def _load_policies(policies: PolicyLike | Sequence[PolicyLike], device: str | torch.device) -> list[Policy]:
    items: Sequence[PolicyLike] = [policies] if isinstance(policies, (Policy, str, os.PathLike)) else policies
    if len(items) == 0:
        raise ValueError("no policies to backtest: pass a Policy, a checkpoint path or a list of them")
    return [p if isinstance(p, Policy) else load(p, device=str(device)) for p in items]


def _env_kwargs(policy: Policy) -> dict[str, Any]:
    """The constructor arguments the policy's env was trained with (registered defaults + the spec's)."""
    spec = policy.spec
    entry = registry.get(spec.env)
    constructor = entry.load() if entry is not None else None
    if not (isinstance(constructor, type) and issubclass(constructor, StockTradingVecEnv)):
        raise ValueError(
            f"{policy.path} was trained on {spec.env!r}, which is not a stock-trading env "
            "(podium.finance.env.StockTradingVecEnv, e.g. 'StockTrading-v0'); it cannot be backtested"
        )
    return {**entry.kwargs, **spec.env_kwargs}


def _effective_kwargs(policy: Policy) -> dict[str, Any]:
    """Every setting of the policy's env as it trained: :func:`_env_kwargs` over the constructor's defaults, with
    sequences as tuples (an unset setting and its default written out, a list and a tuple, compare equal)."""
    defaults = {
        name: p.default
        for name, p in inspect.signature(StockTradingVecEnv.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    kwargs = {**defaults, **_env_kwargs(policy)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}


def seen_periods(policy: Policy) -> dict[str, tuple[str, str]]:
    """The periods a trading policy's spec says it learned from (``train``: its env's period) and was chosen
    on (``validation``: its evaluation env's, when that has its own). Data the spec does not date (a user's
    file that cannot be read any more) is left out; a data set or file without a period counts as its whole
    history."""
    kwargs = _env_kwargs(policy)
    seen: dict[str, tuple[str, str]] = {}
    for name, options in (("train", kwargs), ("validation", {**kwargs, **policy.spec.eval_env_kwargs})):
        period, data = options.get("period"), options.get("data")
        if period is None and data is None:
            period = TRAIN_PERIOD  # what the env loads by default
        elif period is None and isinstance(data, str) and data in SHIPPED_DATASETS:
            period = ("1900-01-01", "2100-12-31")
        elif period is None and isinstance(data, str):  # a user's file without a period: all of it
            period = _file_span(data)
        if period is not None and (name == "train" or tuple(period) != seen.get("train")):
            seen[name] = (str(period[0]), str(period[1]))
    return seen


def _file_span(path: str) -> tuple[str, str] | None:
    """The first and last date of an OHLCV file, or None if it cannot be read."""
    try:
        dates = load_ohlcv(path)["date"]
    except (OSError, ValueError, KeyError):
        return None
    return f"{dates.min():%Y-%m-%d}", f"{dates.max():%Y-%m-%d}"


def _in_sample(members: Sequence[Policy], start: str | pd.Timestamp, end: str | pd.Timestamp) -> list[str]:
    """One line per member and period of its training or selection that ``start..end`` overlaps."""
    lines = []
    for member in members:
        for name, period in seen_periods(member).items():
            try:
                check_split(**{name: period, "test": (start, end)})
            except ValueError as exc:
                lines.append(f"{member.path}: {exc}")
    return lines


def _source_tickers(source: MarketData | pd.DataFrame | str | None, indicators: Sequence[str]) -> tuple[str, ...]:
    """The tickers a market source holds (aligned data: every ticker trades in every period)."""
    if source is None:
        source = "dow29"
    if isinstance(source, MarketData):
        return source.tickers
    if isinstance(source, pd.DataFrame):
        return tuple(sorted(source["tic"].astype(str).unique()))
    if source in SHIPPED_DATASETS:
        return tuple(sorted(prepared_frame(source, indicators)["tic"].unique()))
    return tuple(sorted(load_ohlcv(source)["tic"].unique()))


def _check_member(policy: Policy, kwargs: Mapping[str, Any], market: MarketData, env: StockTradingVecEnv) -> None:
    """Raise a ValueError naming what differs when ``policy`` cannot trade ``market`` through ``env``."""
    indicators = tuple(kwargs.get("indicators", FINRL_INDICATORS))
    trained = _source_tickers(kwargs.get("data"), indicators)
    if trained != market.tickers:
        missing = sorted(set(trained) - set(market.tickers))
        extra = sorted(set(market.tickers) - set(trained))
        detail = (
            f"missing from the backtest data: {missing}; not seen in training: {extra}"
            if missing or extra
            else f"same tickers in another order: trained {list(trained)}, backtest {list(market.tickers)}"
        )
        raise ValueError(
            f"{policy.path} was trained on {len(trained)} tickers and the backtest market has "
            f"{len(market.tickers)}; they differ ({detail}). Backtest on data with the training tickers."
        )
    obs_dim = int(env.single_observation_space.shape[0])
    if policy.agent.obs_dim != obs_dim or policy.agent.action_dim != market.num_stocks:
        raise ValueError(
            f"{policy.path} expects observations of size {policy.agent.obs_dim} and {policy.agent.action_dim} "
            f"actions, but the backtest env gives {obs_dim} and takes {market.num_stocks} "
            f"({market.num_stocks} tickers, indicators {list(market.indicator_names)}; the policy was trained "
            f"with indicators {list(indicators)})"
        )


# --------------------------------------------------------------------------------------------- market
def _cut_period(market: MarketData, start: str | pd.Timestamp, end: str | pd.Timestamp) -> MarketData:
    """The days ``start <= date <= end`` of ``market``, with errors that name the dates available."""
    dates = pd.DatetimeIndex(market.dates)
    first, last = dates[0], dates[-1]
    available = f"the data hold {len(dates)} trading days from {first:%Y-%m-%d} to {last:%Y-%m-%d}"
    try:
        lo, hi = pd.Timestamp(start), pd.Timestamp(end)
    except ValueError as exc:
        raise ValueError(f"cannot read the period {start!r}..{end!r} as dates ({exc}); {available}") from None
    if lo > hi:
        raise ValueError(f"the period starts {lo:%Y-%m-%d}, after its end {hi:%Y-%m-%d}; {available}")
    if lo < first - _PERIOD_SLACK or hi > last + _PERIOD_SLACK:
        raise ValueError(f"the period {lo:%Y-%m-%d}..{hi:%Y-%m-%d} reaches outside the data; {available}")
    keep = np.asarray((dates >= lo) & (dates <= hi))
    if keep.sum() < 3:
        raise ValueError(
            f"the period {lo:%Y-%m-%d}..{hi:%Y-%m-%d} holds {int(keep.sum())} trading day(s); a backtest needs "
            f"at least 3 (two daily returns); {available}"
        )
    return MarketData(
        dates=market.dates[keep],
        tickers=market.tickers,
        close=market.close[keep],
        indicators=market.indicators[keep],
        indicator_names=market.indicator_names,
        turbulence=None if market.turbulence is None else market.turbulence[keep],
    )


def _full_market(source: MarketData | pd.DataFrame | str | None, indicators: Sequence[str]) -> MarketData:
    """The whole history of a market source (``None`` = the shipped Dow-29 data)."""
    return load_market("dow29" if source is None else source, None, indicators)


@functools.lru_cache(maxsize=8)
def _benchmark_series(ticker: str, source: str) -> pd.Series:
    frame = load_ohlcv(source, tickers=[ticker])
    return frame.set_index("date")["close"].sort_index()


def benchmark_prices(ticker: str, dates: np.ndarray | pd.DatetimeIndex, source: str = "etf") -> np.ndarray:
    """Close prices of one ticker on given trading days (forward-filled over its missing days).

    Args:
        ticker: e.g. ``"DIA"`` (``"SPY"`` and ``"QQQ"`` are also in the shipped ``"etf"`` set).
        dates: ``[T]`` trading days (``datetime64``), increasing.
        source: a shipped data set name or an OHLCV file holding ``ticker``.

    Returns:
        ``[T]`` float64 close prices in dollars.

    Raises:
        ValueError: the ticker is not in ``source``, or ``dates`` reach outside its data (the message names its span).
    """
    series = _benchmark_series(ticker, source)
    days = pd.DatetimeIndex(dates)
    if days[0] < series.index[0] or days[-1] > series.index[-1]:
        raise ValueError(
            f"benchmark {ticker} has prices from {series.index[0]:%Y-%m-%d} to {series.index[-1]:%Y-%m-%d} only; "
            f"the backtest runs {days[0]:%Y-%m-%d}..{days[-1]:%Y-%m-%d}; skip it with benchmark=None "
            "(podium backtest --benchmark none) or choose another"
        )
    return series.reindex(series.index.union(days)).ffill().loc[days].to_numpy(np.float64)


def buy_and_hold(prices: np.ndarray, initial_cash: float) -> np.ndarray:
    """Daily account values of buying at the first close and holding, without costs (fractional shares).

    Args:
        prices: ``[T]`` closes of one asset, or ``[T, S]`` closes of S assets (the cash is split evenly
            over them: an equal-weight basket, not rebalanced), in dollars, > 0.
        initial_cash: dollars invested on day 0.

    Returns:
        ``[T]`` account values in dollars; the first equals ``initial_cash``.
    """
    prices = np.asarray(prices, dtype=np.float64)
    growth = prices / prices[0]
    return initial_cash * (growth if growth.ndim == 1 else growth.mean(axis=1))


# --------------------------------------------------------------------------------------------- backtest
def _act(policies: Sequence[Policy], obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """``[1, S]`` action: the single policy's, or the mean of the ensemble members' actions."""
    actions = [p.act(obs.to(p.agent.device), deterministic=deterministic).to(obs.device) for p in policies]
    return actions[0] if len(actions) == 1 else torch.stack(actions).mean(0)


def backtest(
    policies: PolicyLike | Sequence[PolicyLike],
    start: str | pd.Timestamp,
    end: str | pd.Timestamp,
    *,
    data: MarketData | pd.DataFrame | str | None = None,
    initial_cash: float | None = None,
    deterministic: bool = True,
    device: str | torch.device = "cpu",
    benchmark: str | None = "DIA",
    out_dir: PathLike | None = None,
    fill: str | None = None,
) -> BacktestReport:
    """Trade a policy, or an ensemble of policies, through ``start..end`` and compare with buy-and-hold.

    Runs one evaluation account of :class:`~podium.finance.env.StockTradingVecEnv` over every trading
    day of the period (details and table conventions in the module docstring). The env uses the first
    policy's ``env_kwargs`` with the period replaced, a fixed start (first day, exact cash, no
    ``max_episode_steps``) and float64 accounting; the tensors stay on the policy's device.

    Args:
        policies: a :class:`~podium.api.Policy` or a checkpoint path / pod run directory, or a list of
            them (an ensemble: each day it trades the mean of the members' actions). Paths are loaded
            on ``device``; Policy objects keep theirs and the env follows the first one.
        start, end: the period, inclusive (``"YYYY-MM-DD"``), e.g. the test period 2016-01-04..2017-11-10.
        data: the market to trade (a :class:`~podium.finance.market.MarketData`, a long-format table,
            a shipped name or a file); default: the data the first policy was trained on.
        initial_cash: starting cash in dollars for the policy and the benchmarks; default: the
            policy's ``initial_cash`` (the env's $1M unless its spec says otherwise).
        deterministic: trade the deterministic policy (the mean action), not a sampled one.
        device: where policies given as paths are loaded, and where the env runs.
        benchmark: a ticker of the shipped ETF data (``DIA``, ``SPY``, ``QQQ``) to buy and hold
            alongside; ``None`` skips it.
        out_dir: if given, write ``backtest.csv`` (the daily table), ``trades.csv``, ``metrics.csv``
            and ``backtest.png`` (account values over time) there.
        fill: when the orders made on a day execute (:class:`~podium.finance.env.StockTradingVecEnv`'s
            ``fill``): ``"close"`` (that day's close, which the policy has seen: optimistic) or
            ``"next_close"`` (the next day's); default: as the policy trained.

    Returns:
        A :class:`BacktestReport`.

    Raises:
        ValueError: a policy not trained on a trading env; members whose tickers, observation size or
            observation settings differ from the market's / each other's (the message names the
            tickers that differ); a period outside the data or with fewer than 3 trading days (the
            message names the dates available); a benchmark without prices on those dates.
        CheckpointError: a path that is no valid checkpoint.
        RunDirError: ``out_dir`` is, or lies under, a file (checked before the backtest runs).
    """
    if out_dir is not None:
        not_a_file(Path(out_dir), "out_dir (--out)")
    members = _load_policies(policies, device)
    env_device = members[0].agent.device
    kwargs = _env_kwargs(members[0])
    observed = _effective_kwargs(members[0])
    for other in members[1:]:
        other_kwargs = _effective_kwargs(other)
        differ = [k for k in _OBSERVATION_KWARGS if other_kwargs[k] != observed[k]]
        if differ:
            raise ValueError(
                f"ensemble members observe the market differently: {other.path} and {members[0].path} "
                f"differ in {differ}"
            )
    indicators = tuple(kwargs.get("indicators", FINRL_INDICATORS))
    market = _cut_period(_full_market(data if data is not None else kwargs.get("data"), indicators), start, end)
    overrides: dict[str, Any] = {
        "data": market,
        "period": None,
        "random_start": False,
        "max_episode_steps": None,
        "dtype": torch.float32 if torch.device(env_device).type == "mps" else torch.float64,
        "compile": False,
    }
    if initial_cash is not None:
        overrides["initial_cash"] = float(initial_cash)
    if fill is not None:
        overrides["fill"] = fill
    env = make(members[0].spec.env, num_envs=1, device=env_device, **{**kwargs, **overrides})
    assert isinstance(env, StockTradingVecEnv)  # guaranteed by _env_kwargs
    for member in members:
        _check_member(member, _env_kwargs(member), market, env)

    num_days, num_stocks = market.num_days, market.num_stocks
    with torch.no_grad():
        obs, _ = env.reset(seed=0)
        value = torch.empty(num_days, dtype=env.dtype, device=env.device)
        cash = torch.empty_like(value)
        cost = torch.zeros_like(value)
        held = torch.empty((num_days, num_stocks), dtype=env.dtype, device=env.device)
        value[0], cash[0], held[0] = env.account_value[0], env.cash[0], env.holdings[0]
        ended = torch.zeros(1, dtype=torch.bool, device=env.device)
        delay = FILLS.index(env.fill)
        for t in range(num_days - 1):  # one step per trading day; the last day only closes the books
            obs, _, terminated, truncated, info = env.step(_act(members, obs, deterministic))
            ended = terminated | truncated  # (the data's end: truncated, or terminated with score="sharpe")
            value[t + 1] = info["account_value"][0]
            cash[t + 1] = info["cash"][0]
            held[t + 1] = info["holdings"][0]
            cost[t + delay] = info["transaction_cost"][0]  # on the day the orders fill
        if not bool(ended[0]):
            raise RuntimeError("the backtest episode did not end on the last day of the period (env rules changed?)")
        value_np, cash_np, cost_np = (x.cpu().numpy() for x in (value, cash, cost))
        held_np = held.cpu().numpy()

    dates = pd.DatetimeIndex(market.dates, name="date")
    cash0 = env.initial_cash
    curves: dict[str, np.ndarray] = {POLICY: value_np}
    if benchmark is not None:
        curves[benchmark] = buy_and_hold(benchmark_prices(benchmark, market.dates), cash0)
    curves[EQUAL_WEIGHT] = buy_and_hold(market.close, cash0)
    daily = pd.DataFrame(
        {
            **curves,
            "cash": cash_np,
            "holdings_value": (held_np * market.close).sum(axis=1),
            "transaction_cost": cost_np,
        },
        index=dates,
    )
    holdings = pd.DataFrame(held_np, index=dates, columns=list(market.tickers))
    report = BacktestReport(
        daily=daily,
        trades=_trades(held_np, market, env.transaction_cost, delay=delay),
        holdings=holdings,
        metrics=performance_table(curves),
        tickers=market.tickers,
        start=f"{dates[0]:%Y-%m-%d}",
        end=f"{dates[-1]:%Y-%m-%d}",
        initial_cash=cash0,
        transaction_cost=env.transaction_cost,
        policies=[str(m.path) for m in members],
        in_sample=_in_sample(members, start, end),
    )
    for line in report.in_sample:
        kind = "on data older than its training" if "comes before" in line else "an in-sample backtest"
        warnings.warn(f"{kind}, not a test: {line}", UserWarning, stacklevel=2)
    if out_dir is not None:
        _write(report, Path(out_dir))
    return report


def _trades(held: np.ndarray, market: MarketData, transaction_cost: float, delay: int = 0) -> pd.DataFrame:
    """Long-format trades from ``[T, S]`` holdings: the orders of day t are ``held[t + 1] - held[t]``, filled
    on day ``t + delay`` at its close (``delay`` 1: ``fill="next_close"``)."""
    change = np.diff(held, axis=0)  # [T - 1, S]
    day, stock = np.nonzero(change)
    shares = change[day, stock]
    day = day + delay
    price = market.close[day, stock]
    return pd.DataFrame(
        {
            "date": pd.DatetimeIndex(market.dates[day]),
            "tic": np.asarray(market.tickers, dtype=object)[stock],
            "shares": shares,
            "price": price,
            "value": shares * price,
            "cost": np.abs(shares) * price * transaction_cost,
        }
    )


def _write(report: BacktestReport, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "backtest": out_dir / "backtest.csv",
        "trades": out_dir / "trades.csv",
        "metrics": out_dir / "metrics.csv",
        "plot": out_dir / "backtest.png",
    }
    report.daily.to_csv(files["backtest"], date_format="%Y-%m-%d")
    report.trades.to_csv(files["trades"], index=False, date_format="%Y-%m-%d")
    report.metrics.to_csv(files["metrics"])
    _plot_backtest(report, files["plot"])
    report.files = files


def _plot_backtest(report: BacktestReport, path: Path) -> None:
    fig, (ax,) = figure(9.0, 4.5)
    for name in report.metrics.index:
        final = report.metrics.loc[name, "cumulative_return"]
        label = "policy" if name == POLICY else name.replace("_", " ")
        if name == POLICY and len(report.policies) > 1:
            label = f"ensemble of {len(report.policies)}"
        ax.plot(
            report.daily.index, report.daily[name], label=f"{label} ({final:+.1%})", lw=1.6 if name == POLICY else 1.1
        )
    ax.axhline(report.initial_cash, color="grey", lw=0.6, ls=":")
    ax.set_title(f"Backtest {report.start}..{report.end}, {len(report.tickers)} stocks, ${report.initial_cash:,.0f}")
    ax.set_ylabel("account value ($)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    save_figure(fig, path)


# --------------------------------------------------------------------------------------------- generalisation
def find_snapshots(run_dirs: PathLike | Sequence[PathLike]) -> list[tuple[str, Path]]:
    """The training snapshots of pod run directories (and of the pods inside tournament directories).

    Looks in ``RUN_DIR/checkpoints/snapshots/*.pt`` and ``RUN_DIR/pods/*/checkpoints/snapshots/*.pt``.

    Args:
        run_dirs: one run directory or several.

    Returns:
        ``(run name, snapshot path)`` pairs, grouped by run and sorted by file name within a run;
        the run name is the directory name, ``TOURNAMENT/POD`` for a tournament's pod.

    Raises:
        FileNotFoundError: a run directory does not exist.
        ValueError: no snapshot anywhere; the message says to set ``snapshot_every`` in the pod spec.
    """
    dirs = [Path(run_dirs)] if isinstance(run_dirs, (str, os.PathLike)) else [Path(d) for d in run_dirs]
    found: list[tuple[str, Path]] = []
    for run_dir in dirs:
        if not run_dir.is_dir():
            raise FileNotFoundError(f"run directory {run_dir} does not exist")
        found += [(run_dir.name, p) for p in PodDir(run_dir).snapshot_files()]
        for pod in TournamentDir(run_dir).pod_dirs():
            found += [(f"{run_dir.name}/{pod.root.name}", p) for p in pod.snapshot_files()]
    if not found:
        listed = ", ".join(str(d) for d in dirs)
        raise ValueError(
            f"no snapshots in {listed} (looked for checkpoints/snapshots/*.pt and pods/*/checkpoints/snapshots/*.pt). "
            "Set snapshot_every (seconds of training between snapshots) in the pod spec, e.g. "
            "`snapshot_every: 30` in the YAML or podium.train(..., snapshot_every=30), and train again"
        )
    return found


def generalisation_curve(
    run_dir: PathLike | Sequence[PathLike],
    start: str | pd.Timestamp,
    end: str | pd.Timestamp,
    out_dir: PathLike | None = None,
    *,
    data: MarketData | pd.DataFrame | str | None = None,
    initial_cash: float | None = None,
    device: str | torch.device = "cpu",
    fill: str | None = None,
    benchmark: str | None = "DIA",
) -> pd.DataFrame:
    """Backtest every training snapshot: test performance against training wall-clock time.

    This is the generalisation curve of the ElegantRL-Podracer paper (its Fig. 7, right): how the
    policy does on held-out dates as training goes on. Pods keep snapshots only when their spec sets
    ``snapshot_every``.

    Args:
        run_dir: a pod run directory, a tournament directory (its ``pods/*``), or a list of them.
        start, end: the backtest period, inclusive (``"YYYY-MM-DD"``).
        out_dir: if given, write ``generalisation.csv`` and ``generalisation.png`` there.
        data, initial_cash, device, fill, benchmark: as :func:`backtest`.

    Returns:
        One row per snapshot, sorted by ``wall_time``: ``run``, ``checkpoint``, ``steps`` (env steps
        trained), ``wall_time`` (seconds of training, the checkpoint's ``counters.wall_time``),
        ``final_value`` (dollars) and the snapshot's test :data:`~podium.finance.metrics.METRICS`.
        ``frame.attrs["benchmarks"]`` holds the buy-and-hold cumulative returns over the same period.

    Raises:
        ValueError: no snapshots (set ``snapshot_every``), or any error of :func:`backtest`.
    """
    rows: list[dict[str, Any]] = []
    benchmarks: dict[str, float] = {}
    for run, snapshot in find_snapshots(run_dir):
        counters = load_checkpoint(snapshot).get("counters", {})
        if "wall_time" not in counters:
            raise CheckpointError(f"{snapshot} has no counters.wall_time; is it a pod snapshot?")
        policy = load(snapshot, device=str(device))
        report = backtest(
            policy, start, end, data=data, initial_cash=initial_cash, device=device, fill=fill, benchmark=benchmark
        )
        benchmarks = {k: float(v) for k, v in report.metrics["cumulative_return"].drop(POLICY).items()}
        metrics = report.metrics.loc[POLICY]
        rows.append(
            {
                "run": run,
                "checkpoint": str(snapshot),
                "steps": int(counters.get("steps", 0)),
                "wall_time": float(counters["wall_time"]),
                "final_value": float(metrics["final_value"]),
                **{name: float(metrics[name]) for name in METRICS},
            }
        )
    frame = pd.DataFrame(rows).sort_values(["wall_time", "run"], kind="stable").reset_index(drop=True)
    frame.attrs["benchmarks"] = benchmarks
    frame.attrs["period"] = (f"{pd.Timestamp(start):%Y-%m-%d}", f"{pd.Timestamp(end):%Y-%m-%d}")
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out / "generalisation.csv", index=False)
        _plot_generalisation(frame, out / "generalisation.png")
    return frame


def _plot_generalisation(frame: pd.DataFrame, path: Path) -> None:
    fig, (top, bottom) = figure(8.0, 6.5, rows=2)
    for run, rows in frame.groupby("run", sort=False):
        top.plot(rows["wall_time"], rows["cumulative_return"], marker="o", ms=3, label=str(run))
        bottom.plot(rows["wall_time"], rows["sharpe_ratio"], marker="o", ms=3, label=str(run))
    for (name, value), style in zip(frame.attrs.get("benchmarks", {}).items(), ("--", ":"), strict=False):
        top.axhline(value, color="grey", ls=style, lw=1.0, label=f"{name.replace('_', ' ')} buy & hold")
    start, end = frame.attrs.get("period", ("", ""))
    top.set_title(f"Generalisation: test {start}..{end} vs training time")
    top.set_ylabel("test cumulative return")
    bottom.set_ylabel("test Sharpe ratio")
    bottom.set_xlabel("training wall-clock time (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    top.legend(fontsize="small")
    save_figure(fig, path)


# --------------------------------------------------------------------------------------------- command
def _day(value: str | pd.Timestamp, what: str) -> str:
    """A day as ``YYYY-MM-DD`` (``2016/01/04`` too), so that it can name a directory."""
    try:
        return f"{pd.Timestamp(value):%Y-%m-%d}"
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot read the {what} day {value!r} as a date ({exc}); write it as YYYY-MM-DD") from None


def default_out_dir(
    path: PathLike,
    start: str,
    end: str,
    *,
    top_k: int = 1,
    fill: str | None = None,
    initial_cash: float | None = None,
    benchmark: str | None = "DIA",
) -> Path:
    """Where a backtest's files go unless told: ``RUN_DIR/backtest_START_END`` for a run directory,
    ``backtest_NAME_START_END`` beside a checkpoint file, with a suffix for every choice that changes the
    result, so that variants never overwrite each other: ``_topK`` (an ensemble of K), ``_next_close``
    (the fill), ``_cashN`` (another initial cash, in dollars) and ``_vs_ETF`` / ``_no_benchmark`` (another
    buy-and-hold benchmark than DIA). The one owner of this layout."""
    path = Path(path)
    tail = f"{start}_{end}"
    if top_k > 1:
        tail += f"_top{top_k}"
    if fill not in (None, FILLS[0]):
        tail += f"_{fill}"
    if initial_cash is not None:
        tail += f"_cash{initial_cash:.0f}" if float(initial_cash).is_integer() else f"_cash{initial_cash:.2f}"
    if benchmark != "DIA":
        tail += f"_vs_{benchmark}" if benchmark else "_no_benchmark"
    if path.is_dir():
        return path / f"backtest_{tail}"
    return path.parent / f"backtest_{path.stem}_{tail}"


def backtest_command(
    path: PathLike,
    start: str | None = None,
    end: str | None = None,
    top_k: int = 1,
    out: PathLike | None = None,
    initial_cash: float | None = None,
    *,
    checkpoints: Sequence[PathLike] | None = None,
    device: str = "cpu",
    console: Any = None,
    fill: str | None = None,
    benchmark: str | None = "DIA",
) -> BacktestReport:
    """Everything ``podium backtest`` does: resolve the policies, backtest, write the files, print a table.

    Args:
        path: a checkpoint file, a pod run directory or a tournament run directory (see
            :func:`resolve_policy_paths`).
        start, end: the period (default: the shipped test period 2016-01-04..2017-11-10); any form
            pandas reads (``2016-01-04``, ``2016/01/04``), written ``YYYY-MM-DD`` in the output names.
        top_k: ensemble size (the best ``top_k`` policies of a tournament); when fewer policies exist
            (a short leaderboard, or one pod), all of them are used and a warning says so.
        out: output directory (default: ``RUN_DIR/backtest_START_END`` for a directory,
            ``backtest_NAME_START_END`` next to a checkpoint file, with a suffix for an ensemble, a fill, an
            initial cash or a benchmark other than the policy's or the default: see :func:`default_out_dir`).
        initial_cash: starting cash in dollars (default: the policy's).
        checkpoints: explicit checkpoint files, best first (see :func:`resolve_policy_paths`).
        device: torch device of the policies and the env.
        console: a ``rich.console.Console`` to print to (default: a new one on stdout).
        fill: when orders execute, as in :func:`backtest` (default: as the policy trained); a
            ``next_close`` backtest's default directory ends in ``_next_close``.
        benchmark: the ETF to buy and hold beside the policy, as in :func:`backtest` (None: none).

    Returns:
        The :class:`BacktestReport`; its files are in ``report.out_dir``.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    start, end = _day(start or TEST_PERIOD[0], "start"), _day(end or TEST_PERIOD[1], "end")
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    available = len(checkpoints) if checkpoints is not None else 1  # a checkpoint or a pod run: one policy
    if available == 0:
        raise ValueError(f"{path} has no policy to backtest: its leaderboard is empty")
    if top_k > available:
        holds = f"its leaderboard holds {available}" if checkpoints is not None else "it holds one policy"
        console.print(
            f"[bold yellow]warning:[/] top_k={top_k} asked for, but {escape(str(path))}: {holds}; "
            f"backtesting {'the ensemble of those ' + str(available) if available > 1 else 'that one'}",
            soft_wrap=True,
        )
        top_k = available
    paths = resolve_policy_paths(path, top_k, checkpoints=checkpoints)
    if fill is not None and fill not in FILLS:
        raise ValueError(f"fill {fill!r} is not one of {', '.join(FILLS)}")
    if out is None:  # named by what it runs with: the fill as trained (the first member's) unless told, ...
        trained = _effective_kwargs(load(paths[0], device=device))
        cash = None if initial_cash is None or float(initial_cash) == trained["initial_cash"] else initial_cash
        out_dir = default_out_dir(
            path, start, end, top_k=len(paths), fill=fill or trained["fill"], initial_cash=cash, benchmark=benchmark
        )
    else:
        out_dir = Path(out)
    with warnings.catch_warnings():  # said below, in the table's words
        warnings.simplefilter("ignore", UserWarning)
        report = backtest(
            paths, start, end, initial_cash=initial_cash, device=device, out_dir=out_dir, fill=fill, benchmark=benchmark
        )
    for line in report.in_sample:
        console.print(
            f"[bold yellow]warning: an in-sample backtest, not a test:[/] {escape(line)}; its metrics say how "
            "well the policy fits data it has seen, not how it trades on new data",
            soft_wrap=True,
        )

    names = list(report.metrics.index)
    headers = {POLICY: "policy" if len(paths) == 1 else f"ensemble of {len(paths)}", EQUAL_WEIGHT: "equal weight"}
    table = Table(title=f"Backtest {report.start}..{report.end} ({len(report.tickers)} stocks)")
    table.add_column("metric")
    for name in names:
        table.add_column(headers.get(name, f"{name} buy & hold"), justify="right")
    rows = [
        ("final value ($)", "final_value", "{:,.0f}"),
        ("cumulative return", "cumulative_return", "{:+.2%}"),
        ("annual return", "annual_return", "{:+.2%}"),
        ("annual volatility", "annual_volatility", "{:.2%}"),
        ("Sharpe ratio", "sharpe_ratio", "{:.2f}"),
        ("max drawdown", "max_drawdown", "{:.2%}"),
        ("Calmar ratio", "calmar_ratio", "{:.2f}"),
    ]
    for label, column, fmt in rows:
        table.add_row(label, *(fmt.format(report.metrics.loc[n, column]) for n in names))
    console.print(table)
    costs = report.daily["transaction_cost"].sum()
    console.print(
        f"{len(report.trades)} trades, ${costs:,.0f} in transaction costs; benchmarks are bought once, without costs."
    )
    console.print(f"policies: {escape(', '.join(report.policies))}", soft_wrap=True)  # paths stay whole
    console.print(f"wrote {', '.join(p.name for p in report.files.values())} to {escape(str(out_dir))}", soft_wrap=True)
    return report
