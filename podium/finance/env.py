"""Multi-stock trading: a batched tensor env (thousands of accounts, one market) and its gymnasium twin.

Both envs follow the same rules; :class:`StockTradingEnv` is written the way FinRL writes its
environment (one account, a pandas row lookup per day, a Python loop over stocks) and serves as the
reference implementation in tests and as the peer in ``benchmarks/trading_env.py``.

**The market.** S stocks over T trading days (:class:`~podium.finance.market.MarketData`). Every
trade executes at a close price: by default the close of the day the agent observed (``fill="close"``,
FinRL's convention), with ``fill="next_close"`` the next day's.

**When orders fill.** The observation of day ``d`` holds ``close[d]`` and the indicators computed from it.
Filling the orders made from it at that same close is optimistic: nobody can see a closing price and then
trade at it (a market-on-close order must be sent minutes before the close, on the prices of that moment).
``fill="next_close"`` removes the look-ahead: the orders made on day ``d`` execute at ``close[d + 1]``, one
bar later, as in a backtest that can only act on what it knew. ``podium backtest --fill next_close`` (or
``backtest(..., fill="next_close")``) measures what the same-close convention adds. Both envs take ``fill``.

**An episode.** An account starts on day ``d0`` with some cash and no shares. Each step is one
trading day ``d``: the agent's orders execute at ``close[d]`` (``next_close``: ``close[d + 1]``), then the
day advances to ``d + 1`` and the reward is the change of the account value

    ``value(d) = cash + sum_s holdings[s] * close[d, s]``    (dollars)

times ``reward_scaling``. The episode ends when the day reaches the last day of the data (``T - 1``), or
after ``max_episode_steps`` steps if that comes first, and both ends are *truncations*: the account and
the market go on after the data does, so an agent bootstraps the value of the last day as it does at a
time limit, rather than learning that the last days are worth nothing (the observation does not say how
many days are left, and a policy trades later periods: Pardo et al., "Time Limits in Reinforcement
Learning", 2018). With ``score="sharpe"`` (one reward, the episode's Sharpe ratio, at its end) the last
day *terminates* the episode: the score is of that episode alone.
Training (``random_start=True``): ``d0`` is uniform in ``0 .. floor(start_fraction * (T - 2))``
and the cash is ``initial_cash × U(1 - cash_jitter, 1 + cash_jitter)``. Evaluation
(``random_start=False``): ``d0 = 0`` and the cash is exactly ``initial_cash``.

**An action** is a vector in ``[-1, 1]^S`` (values outside are clipped): ``a_s × hmax`` shares of
stock s, rounded toward zero; negative = sell, positive = buy. Within a step:

1. *Turbulence* (only with ``turbulence_threshold``): if ``turbulence[d] > turbulence_threshold``
   the action is replaced by "close every position" (sell all long shares, buy back all short
   ones) and nothing else is bought.
2. *Sells first*: sell ``min(wanted, holdings)`` shares of each stock (without the cap when
   ``allow_short=True``, so holdings may go negative); the cash grows by
   ``shares × price × (1 - transaction_cost)``.
3. *Then buys*, limited by the cash after the sells. If the wanted buys would cost
   ``C = sum_s shares_s × price_s × (1 + transaction_cost)`` more than the cash, every wanted
   amount is scaled by ``cash / C`` and rounded down to whole shares (so their total cost never
   exceeds the cash); the cash shrinks by ``shares × price × (1 + transaction_cost)``.

Cash never goes negative; holdings are whole numbers of shares (stored as floats).

**The observation** (float32, ``1 + 2S + K·S`` numbers) is
``[cash / initial_cash,  close[d] × price_scale (S),  holdings / hmax (S),  indicators[d] (K·S)]``
with indicators in indicator-major order (all stocks' first indicator, then the second, ...), each
multiplied by a fixed factor from :data:`INDICATOR_SCALES` (``price_scale`` for price-like
indicators, 0.01 for 0..100 oscillators, ...; override with ``indicator_scales``). The factors are
constants, not statistics of the data, so train and test periods are observed identically. On the
shipped data the market features lie within about ±7 (mostly within ±3); ``holdings / hmax`` grows
with the position (about 3.4 for $1M spread evenly over the 29 stocks at $100 a share).

**info** (both envs, besides the base :class:`~podium.envs.base.VecEnv` keys): ``account_value``
(dollars, after the step), ``cash`` (dollars), ``holdings`` (shares held after the step's trades),
``day`` (index into ``env.market.dates`` of the day the account has reached) and ``transaction_cost``
(dollars paid this step). For a sub-env whose episode just ended they describe the final day of that
episode, not the reset account.

**Differences from FinRL's StockTradingEnv**, on purpose: unaffordable buys are scaled down
together (FinRL buys greedily in order of action size, so the last stocks get nothing); the
turbulence rule fires when the index is strictly above the threshold (FinRL: at or above) and also
covers shorts; observations are scaled (FinRL feeds raw dollars and share counts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import pandas as pd
import torch

from podium.envs.base import State, TensorVecEnv
from podium.finance.indicators import FINRL_INDICATORS
from podium.finance.market import MarketData, Period, load_market

SCORES = ("return", "sharpe")
"""What an episode's return can measure (``StockTradingVecEnv(score=...)``)."""
FILLS = ("close", "next_close")
"""When an order made on day ``d`` executes: at ``close[d]`` (the default, FinRL's) or at ``close[d + 1]``."""

__all__ = ["INDICATOR_SCALES", "StockTradingEnv", "StockTradingVecEnv"]

INDICATOR_SCALES: dict[str, float | str] = {
    "macd": 0.1,
    "boll_ub": "price",
    "boll_lb": "price",
    "rsi_30": 0.01,
    "cci_30": 0.01,
    "dx_30": 0.01,
    "close_30_sma": "price",
    "close_60_sma": "price",
    "turbulence": 0.01,
    "vix": 0.01,
}
"""Observation factor of each known indicator; ``"price"`` means ``price_scale``. Other names: 1.0."""


def _indicator_factors(
    names: Sequence[str], price_scale: float, overrides: Mapping[str, float | str] | None
) -> np.ndarray:
    """``[K]`` observation factors of the indicators ``names``."""
    table: dict[str, float | str] = {**INDICATOR_SCALES, **(overrides or {})}
    return np.array([price_scale if table.get(n, 1.0) == "price" else float(table.get(n, 1.0)) for n in names])


def _check_params(
    market: MarketData,
    initial_cash: float,
    hmax: int,
    transaction_cost: float,
    turbulence_threshold: float | None,
    start_fraction: float,
    cash_jitter: float,
    reward_scaling: float,
    price_scale: float,
    indicator_scales: Mapping[str, float | str] | None,
) -> None:
    if not 0 < initial_cash < math.inf:
        raise ValueError(f"initial_cash must be a positive number of dollars, got {initial_cash}")
    for name, value in (("reward_scaling", reward_scaling), ("price_scale", price_scale)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive number, got {value}")
    if turbulence_threshold is not None and not math.isfinite(turbulence_threshold):
        raise ValueError(f"turbulence_threshold must be a finite number (or None: no rule), got {turbulence_threshold}")
    for name, scale in (indicator_scales or {}).items():
        if name not in market.indicator_names:
            raise ValueError(
                f"indicator_scales names {name!r}, which the env does not observe: its indicators are "
                f"{', '.join(market.indicator_names)}"
            )
        number = isinstance(scale, int | float) and not isinstance(scale, bool)
        if scale != "price" and not (number and math.isfinite(scale)):
            raise ValueError(f"indicator_scales[{name!r}] must be a finite number or 'price', got {scale!r}")
    if isinstance(hmax, bool) or int(hmax) != hmax or hmax < 1:
        raise ValueError(f"hmax (most shares per trade per stock) must be a positive integer, got {hmax}")
    if not 0 <= transaction_cost < 1:
        raise ValueError(f"transaction_cost is a fraction of the traded value in [0, 1), got {transaction_cost}")
    if turbulence_threshold is not None and market.turbulence is None:
        raise ValueError("turbulence_threshold needs a 'turbulence' column in the data (see add_turbulence)")
    if not 0 <= start_fraction <= 1:
        raise ValueError(f"start_fraction must be in [0, 1], got {start_fraction}")
    if not 0 <= cash_jitter < 1:
        raise ValueError(f"cash_jitter must be in [0, 1), got {cash_jitter}")


class StockTradingVecEnv(TensorVecEnv):
    """``num_envs`` trading accounts stepping through the same market together (rules: module docstring).

    The market (``close [S, T]``, observation tables, turbulence flags) lives on ``device`` once and
    is shared by all sub-envs; each sub-env has its own cash, holdings and day. State (sub-env
    dimension last): ``cash [N]``, ``holdings [S, N]``, ``day [N]`` (int64), and two running totals,
    ``value [N]`` (the account value at ``day``, so that a step gathers prices once per day),
    ``fee [N]`` (the transaction cost paid by the last step), and the episode's daily returns so far as
    ``count [N]``, ``total [N]`` and ``squares [N]`` (kept only with ``score="sharpe"``, else 0).

    Args:
        num_envs: number of accounts N.
        device: torch device of the market and the accounts.
        data: the market. ``None``: the shipped Dow-29 data with FinRL's indicators and turbulence,
            over ``period`` (default: the training period 2009-01-02..2015-12-31). Otherwise a
            :class:`~podium.finance.market.MarketData`, a long-format DataFrame, a shipped name or
            a file path (see :func:`~podium.finance.market.load_market`).
        period: inclusive ``(start, end)`` dates to trade, e.g. ``("2016-01-04", "2017-11-10")``
            for the test period of the shipped data.
        indicators: indicator columns in the observation (used when ``data`` is not a MarketData).
        initial_cash: starting cash in dollars.
        hmax: most shares bought or sold per stock per step (an action of ±1).
        transaction_cost: fraction of the traded value paid on every buy and every sell.
        reward_scaling: the reward is the change of the account value (dollars) times this.
        turbulence_threshold: liquidate and stop buying on days whose turbulence exceeds it;
            ``None`` disables the rule.
        random_start: training starts (random day and cash) instead of evaluation starts (day 0,
            exactly ``initial_cash``).
        max_episode_steps: truncate episodes after this many steps; ``None`` = run to the last day.
        allow_short: let sells exceed the holdings (negative holdings are short positions). There is no margin
            rule: a short's proceeds are cash that may buy other stocks, so leverage is bounded only by ``hmax``
            per step, and an account whose value reaches zero ends a backtest with an error.
        start_fraction: random start days are drawn from the first ``start_fraction`` of the period.
        cash_jitter: random starting cash is ``initial_cash × U(1 - cash_jitter, 1 + cash_jitter)``.
        price_scale: observation factor of prices and price-like indicators (per dollar).
        indicator_scales: overrides of :data:`INDICATOR_SCALES`.
        dtype: dtype of the accounts. float32 (default) keeps cash to a few cents at $1M; use
            float64 for exact accounting and parity checks.
        validate_actions: see :class:`~podium.envs.base.VecEnv`.
        compile: see :class:`~podium.envs.base.TensorVecEnv`.
        score: what an episode's return measures. ``"return"`` (default): the reward of every step is the
            change of the account value, so the return is the profit (times ``reward_scaling``).
            ``"sharpe"``: every reward is 0 except the last step's, which is the episode's annualised
            Sharpe ratio of daily returns (``mean / std * sqrt(252)``, sample std, no risk-free rate: as
            empyrical and ``podium backtest`` compute it; 0 for a flat account). For evaluation envs
            (``eval_env_kwargs``): a tournament then ranks policies by their Sharpe ratio on that period.
            Needs episodes that run to the last day (``max_episode_steps=None``).
        fill: when the orders made on day ``d`` execute: ``"close"`` (default, FinRL's convention) at
            ``close[d]``, the price the observation already shows (optimistic: see "When orders fill" in
            the module docstring); ``"next_close"`` at ``close[d + 1]``.
    """

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device | None = "cpu",
        data: MarketData | pd.DataFrame | str | None = None,
        period: Period | None = None,
        indicators: Sequence[str] = FINRL_INDICATORS,
        initial_cash: float = 1e6,
        hmax: int = 100,
        transaction_cost: float = 0.002,
        reward_scaling: float = 1e-4,
        turbulence_threshold: float | None = None,
        random_start: bool = True,
        max_episode_steps: int | None = None,
        allow_short: bool = False,
        start_fraction: float = 0.25,
        cash_jitter: float = 0.1,
        price_scale: float = 1e-2,
        indicator_scales: Mapping[str, float | str] | None = None,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        compile: bool = False,
        score: Literal["return", "sharpe"] = "return",
        fill: Literal["close", "next_close"] = "close",
    ) -> None:
        if score not in SCORES:
            raise ValueError(f"score {score!r} is not one of {', '.join(SCORES)}")
        if fill not in FILLS:
            raise ValueError(f"fill {fill!r} is not one of {', '.join(FILLS)}")
        if score != "return" and max_episode_steps is not None:
            raise ValueError(f"score {score!r} is measured over whole episodes: leave max_episode_steps unset")
        market = load_market(data, period, indicators)
        _check_params(
            market,
            initial_cash,
            hmax,
            transaction_cost,
            turbulence_threshold,
            start_fraction,
            cash_jitter,
            reward_scaling,
            price_scale,
            indicator_scales,
        )
        num_days, num_stocks = market.close.shape
        obs_dim = 1 + 2 * num_stocks + market.indicators.shape[1] * num_stocks
        super().__init__(
            num_envs,
            gym.spaces.Box(-np.inf, np.inf, (obs_dim,), dtype=np.float32),
            gym.spaces.Box(-1.0, 1.0, (num_stocks,), dtype=np.float32),
            device=device,
            max_episode_steps=max_episode_steps,
            dtype=dtype,
            validate_actions=validate_actions,
            compile=compile,
        )
        self.market = market
        self.initial_cash = float(initial_cash)
        self.hmax = int(hmax)
        self.transaction_cost = float(transaction_cost)
        self.reward_scaling = float(reward_scaling)
        self.turbulence_threshold = turbulence_threshold
        self.random_start = random_start
        self.score = score
        self.fill = fill
        self._fill_delay = FILLS.index(fill)  # days between the observation and the close the orders fill at
        self.allow_short = allow_short
        self.cash_jitter = float(cash_jitter)
        self.max_start_day = int(start_fraction * (num_days - 2)) if random_start else 0
        self.num_days, self.num_stocks = num_days, num_stocks

        def on_device(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
            return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=self.device)

        self._close = on_device(market.close.T, self.dtype)  # [S, T]: a day's prices are a column
        factors = _indicator_factors(market.indicator_names, price_scale, indicator_scales)
        # the market part of every observation, one row per day; cash and holdings slots are filled per step
        table = np.zeros((num_days, obs_dim))
        table[:, 1 : 1 + num_stocks] = market.close * price_scale
        table[:, 1 + 2 * num_stocks :] = (market.indicators * factors[None, :, None]).reshape(num_days, -1)
        self._obs_table = on_device(table, torch.float32)  # [T, obs_dim]
        self._turbulent: torch.Tensor | None = None
        if turbulence_threshold is not None and market.turbulence is not None:
            self._turbulent = on_device(market.turbulence > turbulence_threshold, torch.bool)  # [T]

    # ----------------------------------------------------------------- hooks
    def _initial_state(self, k: int) -> State:
        holdings = torch.zeros((self.num_stocks, k), dtype=self.dtype, device=self.device)
        fee = torch.zeros(k, dtype=self.dtype, device=self.device)
        totals = (fee.clone(), fee.clone(), fee.clone())  # count, total, squares of the daily returns
        if not self.random_start:
            cash = torch.full((k,), self.initial_cash, dtype=self.dtype, device=self.device)
            return cash, holdings, torch.zeros(k, dtype=torch.int64, device=self.device), cash.clone(), fee, *totals
        cash = self._uniform((k,), 1.0 - self.cash_jitter, 1.0 + self.cash_jitter).mul_(self.initial_cash)
        day = torch.randint(0, self.max_start_day + 1, (k,), generator=self.generator, device=self.device)
        return cash, holdings, day, cash.clone(), fee, *totals

    def _dynamics(self, state: State, actions: torch.Tensor) -> tuple[State, torch.Tensor, torch.Tensor]:
        cash, holdings, day, value, _, count, total, squares = state
        # [S, k] the close every trade executes at: today's, or tomorrow's (fill="next_close"; day <= T - 2 here)
        price = self._close.index_select(1, day + self._fill_delay if self._fill_delay else day)
        # shares wanted [S, k]: clip to [-1, 1], scale by hmax, round toward zero (floor of each side), in float64
        # whatever the accounts' dtype: in float32, 0.57 * 100 rounds up to 57.0 (float64 and the twin: 56)
        exact = torch.float32 if self.device.type == "mps" else torch.float64  # mps has no float64
        order = actions.T.to(exact).clamp(-1.0, 1.0).mul_(self.hmax)
        sell = order.neg().clamp_min_(0.0).floor_().to(holdings.dtype)
        buy = order.clamp_min_(0.0).floor_().to(holdings.dtype)
        if self._turbulent is not None:  # a turbulent day: close every position, buy nothing else
            turbulent = self._turbulent[day]
            sell = torch.where(turbulent, holdings.clamp_min(0.0), sell)
            buy = torch.where(turbulent, holdings.neg().clamp_min_(0.0), buy)
        if not self.allow_short:
            sell = torch.minimum(sell, holdings)
        proceeds = (sell * price).sum(0)
        cash = cash + proceeds * (1.0 - self.transaction_cost)
        wanted_cost = (buy * price).sum(0) * (1.0 + self.transaction_cost)
        # cannot afford every buy: scale all of them by cash / cost, round down (cost > cash implies cost > 0)
        buy = torch.where(wanted_cost > cash, (buy * (cash / wanted_cost)).floor_(), buy)
        spent = (buy * price).sum(0)
        cash = (cash - spent * (1.0 + self.transaction_cost)).clamp_min_(0.0)
        holdings = holdings - sell + buy
        day = day + 1
        new_value = cash + (holdings * self._close.index_select(1, day)).sum(0)
        fee = (proceeds + spent) * self.transaction_cost
        done = day >= self.num_days - 1
        if self.score == "sharpe":  # the episode's daily returns so far (left at 0 otherwise: no cost per step)
            daily = torch.where(value > 0, new_value / value.clamp_min(1e-12) - 1.0, torch.zeros_like(value))
            count, total, squares = count + 1.0, total + daily, squares + daily * daily
            mean = total / count
            var = (squares - count * mean * mean).clamp_min(0.0) / (count - 1.0).clamp_min(1.0)
            sharpe = torch.where(var > 1e-20, mean / var.clamp_min(1e-20).sqrt() * math.sqrt(252.0), 0.0)
            reward = torch.where(done & (count > 1.0), sharpe, torch.zeros_like(sharpe))
        else:  # the account goes on after the data ends: a cut-off (_cut_off), not a termination
            reward = (new_value - value) * self.reward_scaling
            done = torch.zeros_like(done)
        return (cash, holdings, day, new_value, fee, count, total, squares), reward, done

    def _cut_off(self, state: State) -> torch.Tensor | None:
        """The accounts whose data ran out (their day is the last one): truncated, with ``score="return"``."""
        return state[2] >= self.num_days - 1 if self.score == "return" else None

    def _observe(self, state: State) -> torch.Tensor:
        cash, holdings, day = state[:3]
        obs = self._obs_table.index_select(0, day)  # a fresh [k, obs_dim] tensor
        obs[:, 0] = cash * (1.0 / self.initial_cash)
        obs[:, 1 + self.num_stocks : 1 + 2 * self.num_stocks] = holdings.T * (1.0 / self.hmax)
        return obs

    # ----------------------------------------------------------------- API
    def _step_info(self, state: State) -> dict[str, torch.Tensor]:
        """``info`` entries describing each account right after the step, before any auto-reset:
        ``account_value``, ``cash`` and ``transaction_cost`` (``[N]`` dollars, in ``self.dtype``; the
        cost is what this step paid), ``holdings`` (``[N, S]`` shares after the step's trades, a
        transposed view of the state) and ``day`` (``[N]`` int64)."""
        cash, holdings, day, value, fee = state[:5]
        return {"account_value": value, "cash": cash, "holdings": holdings.T, "day": day, "transaction_cost": fee}

    def set_state(self, cash: torch.Tensor, holdings: torch.Tensor, day: torch.Tensor) -> None:
        """Overwrite the accounts (after ``reset``): ``cash [N]`` dollars, ``holdings [N, S]`` shares,
        ``day [N]`` day indices in ``0 .. T - 2``. For tests and scripted starts.

        Raises:
            ValueError: wrong shapes, a day out of range, or negative cash.
        """
        n, s = self.num_envs, self.num_stocks
        cash = torch.as_tensor(cash, dtype=self.dtype, device=self.device).reshape(-1)
        holdings = torch.as_tensor(holdings, dtype=self.dtype, device=self.device)
        day = torch.as_tensor(day, device=self.device).to(torch.int64).reshape(-1)
        if cash.shape != (n,) or holdings.shape != (n, s) or day.shape != (n,):
            raise ValueError(
                f"set_state expects cash [{n}], holdings [{n}, {s}], day [{n}]; "
                f"got {tuple(cash.shape)}, {tuple(holdings.shape)}, {tuple(day.shape)}"
            )
        if bool((day < 0).any()) or bool((day > self.num_days - 2).any()):
            raise ValueError(f"day must be in 0..{self.num_days - 2} (a step needs a next day)")
        if bool((cash < 0).any()):
            raise ValueError("cash must be non-negative")
        held = holdings.T.round().contiguous()
        value = cash + (held * self._close.index_select(1, day)).sum(0)
        zero = torch.zeros_like(cash)
        self.state = (cash.clone(), held, day.clone(), value, zero, zero.clone(), zero.clone(), zero.clone())

    @property
    def cash(self) -> torch.Tensor:
        """``[N]`` cash of each account in dollars."""
        return self.state[0]

    @property
    def holdings(self) -> torch.Tensor:
        """``[N, S]`` shares held (a transposed view of the state)."""
        return self.state[1].T

    @property
    def day(self) -> torch.Tensor:
        """``[N]`` current day index of each account (into ``self.market.dates``)."""
        return self.state[2]

    @property
    def account_value(self) -> torch.Tensor:
        """``[N]`` cash plus holdings at today's close, in dollars."""
        return self.state[3]

    @property
    def dates(self) -> np.ndarray:
        """``[T]`` the trading days (``datetime64``); ``dates[info["day"]]`` maps days to dates."""
        return self.market.dates


class StockTradingEnv(gym.Env):
    """One trading account, written the way FinRL's ``StockTradingEnv`` is (rules: module docstring).

    Each step looks the day up in a long-format pandas table (``frame.loc[day]``) and loops over
    the stocks in Python, first for the sells and then for the buys. It follows exactly the same
    accounting as :class:`StockTradingVecEnv` and doubles as its reference implementation. Use it
    where a library expects a plain ``gymnasium.Env`` (e.g. Stable-Baselines3, gymnasium's vector envs).

    Args: as :class:`StockTradingVecEnv` (without ``num_envs``, ``device``, ``dtype``, ``compile``,
    ``validate_actions`` and ``score``).
    ``reset(options=...)`` accepts ``{"day": d, "cash": c, "holdings": [S]}`` to start from a given
    account instead of a drawn one.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        data: MarketData | pd.DataFrame | str | None = None,
        period: Period | None = None,
        indicators: Sequence[str] = FINRL_INDICATORS,
        initial_cash: float = 1e6,
        hmax: int = 100,
        transaction_cost: float = 0.002,
        reward_scaling: float = 1e-4,
        turbulence_threshold: float | None = None,
        random_start: bool = True,
        max_episode_steps: int | None = None,
        allow_short: bool = False,
        start_fraction: float = 0.25,
        cash_jitter: float = 0.1,
        price_scale: float = 1e-2,
        indicator_scales: Mapping[str, float | str] | None = None,
        fill: Literal["close", "next_close"] = "close",
    ) -> None:
        if fill not in FILLS:
            raise ValueError(f"fill {fill!r} is not one of {', '.join(FILLS)}")
        market = load_market(data, period, indicators)
        _check_params(
            market,
            initial_cash,
            hmax,
            transaction_cost,
            turbulence_threshold,
            start_fraction,
            cash_jitter,
            reward_scaling,
            price_scale,
            indicator_scales,
        )
        self.fill = fill
        self._fill_delay = FILLS.index(fill)  # days between the observation and the close the orders fill at
        if max_episode_steps is not None and max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be positive or None, got {max_episode_steps}")
        self.market = market
        self.df = market.frame  # rows of day d: self.df.loc[d]
        self.stock_dim = market.num_stocks
        self.tech_indicator_list = list(market.indicator_names)
        self.initial_cash = float(initial_cash)
        self.hmax = int(hmax)
        self.transaction_cost = float(transaction_cost)
        self.reward_scaling = float(reward_scaling)
        self.turbulence_threshold = turbulence_threshold
        self.random_start = random_start
        self.max_episode_steps = max_episode_steps
        self.allow_short = allow_short
        self.cash_jitter = float(cash_jitter)
        self.max_start_day = int(start_fraction * (market.num_days - 2)) if random_start else 0
        self.price_scale = float(price_scale)
        self.indicator_factors = _indicator_factors(market.indicator_names, price_scale, indicator_scales)
        obs_dim = 1 + 2 * self.stock_dim + len(self.tech_indicator_list) * self.stock_dim
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.stock_dim,), dtype=np.float32)
        self.day = 0
        self.cash = self.initial_cash
        self.holdings = np.zeros(self.stock_dim)
        self.steps = 0
        self.data = self.df.loc[self.day]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: a drawn start (see ``random_start``) or the account given in ``options``."""
        super().reset(seed=seed)
        options = options or {}
        if self.random_start:
            self.day = int(self.np_random.integers(0, self.max_start_day + 1))
            self.cash = self.initial_cash * float(self.np_random.uniform(1 - self.cash_jitter, 1 + self.cash_jitter))
        else:
            self.day, self.cash = 0, self.initial_cash
        self.day = int(options.get("day", self.day))
        if not 0 <= self.day <= self.market.num_days - 2:
            raise ValueError(f"day must be in 0..{self.market.num_days - 2} (a step needs a next day)")
        self.cash = float(options.get("cash", self.cash))
        self.holdings = np.array(options.get("holdings", np.zeros(self.stock_dim)), dtype=np.float64).round()
        self.steps = 0
        self.data = self.df.loc[self.day]
        return self._observation(), self._info(0.0)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Trade one day. Returns ``(obs, reward, terminated, truncated, info)``."""
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self.stock_dim), -1.0, 1.0)
        if not np.isfinite(action).all():
            raise ValueError("StockTradingEnv: action contains NaN or inf")
        begin_value = self.account_value  # at today's close
        # the close every trade executes at: today's, or tomorrow's (fill="next_close"; a step has a next day)
        prices = self.df.loc[self.day + self._fill_delay]["close"].to_numpy()
        wanted = np.trunc(action * self.hmax)
        if self.turbulence_threshold is not None and self.data["turbulence"].iloc[0] > self.turbulence_threshold:
            wanted = -self.holdings.copy()
        traded = 0.0
        for index in range(self.stock_dim):  # sells first
            if wanted[index] < 0:
                shares = -wanted[index] if self.allow_short else min(-wanted[index], self.holdings[index])
                self.cash += prices[index] * shares * (1 - self.transaction_cost)
                self.holdings[index] -= shares
                traded += prices[index] * shares
        wanted_cost = 0.0
        for index in range(self.stock_dim):
            if wanted[index] > 0:
                wanted_cost += prices[index] * wanted[index] * (1 + self.transaction_cost)
        fraction = self.cash / wanted_cost if wanted_cost > self.cash else 1.0
        spent = 0.0
        for index in range(self.stock_dim):  # then buys, scaled down together if unaffordable
            if wanted[index] > 0:
                shares = np.floor(wanted[index] * fraction) if fraction < 1.0 else wanted[index]
                spent += prices[index] * shares * (1 + self.transaction_cost)
                self.holdings[index] += shares
                traded += prices[index] * shares
        self.cash = max(self.cash - spent, 0.0)

        self.day += 1
        self.steps += 1
        self.data = self.df.loc[self.day]
        end_value = self.cash + float(np.sum(self.holdings * self.data["close"].to_numpy()))
        reward = (end_value - begin_value) * self.reward_scaling
        # the data's end cuts the episode off, as a time limit does (module docstring): never a termination
        truncated = self.day >= self.market.num_days - 1 or (
            self.max_episode_steps is not None and self.steps >= self.max_episode_steps
        )
        return self._observation(), float(reward), False, truncated, self._info(traded * self.transaction_cost)

    @property
    def account_value(self) -> float:
        """Cash plus holdings at today's close, in dollars."""
        return self.cash + float(np.sum(self.holdings * self.data["close"].to_numpy()))

    def _observation(self) -> np.ndarray:
        names, factors = self.tech_indicator_list, self.indicator_factors
        indicators = [self.data[name].to_numpy() * factor for name, factor in zip(names, factors, strict=True)]
        parts = [
            [self.cash / self.initial_cash],
            self.data["close"].to_numpy() * self.price_scale,
            self.holdings / self.hmax,
            *indicators,
        ]
        return np.concatenate(parts).astype(np.float32)

    def _info(self, transaction_cost: float) -> dict[str, Any]:
        return {
            "account_value": self.account_value,
            "cash": self.cash,
            "holdings": self.holdings.copy(),
            "day": self.day,
            "date": self.data["date"].iloc[0],
            "transaction_cost": transaction_cost,
        }
