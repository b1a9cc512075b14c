"""Trading accounting of ``StockTrading-v0`` (``StockTradingVecEnv``) under random action sequences (hypothesis).

On every step of every account: the account value is cash plus holdings at the day's close, trades execute at the
close of the day the order is placed (the close the policy saw), the transaction cost is exactly ``cost × traded
value`` and is what the cash pays, sells never exceed the holdings unless shorting is allowed (and with shorting,
short positions are valued the same way), and the reward is the change of the value times ``reward_scaling``.
Episodes are short, so the checks run across auto-resets too.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from podium.envs import make

STEPS, ACCOUNTS = 30, 4


def _actions(rng: np.random.Generator, style: str, stocks: int) -> np.ndarray:
    """One batch of actions ``[ACCOUNTS, stocks]``; every style sells some stocks and buys others."""
    if style == "uniform":
        return rng.uniform(-1, 1, (ACCOUNTS, stocks))
    if style == "extreme":  # all-in orders: buys often exceed the cash and are scaled down
        return rng.choice([-1.0, 1.0], (ACCOUNTS, stocks))
    if style == "sparse":  # a few orders, most stocks untouched
        return rng.uniform(-1, 1, (ACCOUNTS, stocks)) * (rng.random((ACCOUNTS, stocks)) < 0.2)
    return rng.uniform(-3, 3, (ACCOUNTS, stocks))  # "wide": outside [-1, 1], clipped by the env


@settings(max_examples=20, deadline=None, database=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    allow_short=st.booleans(),
    cost=st.sampled_from([0.0, 0.001, 0.02]),
    hmax=st.sampled_from([1, 37, 100]),
    style=st.sampled_from(["uniform", "extreme", "sparse", "wide"]),
    initial_cash=st.sampled_from([2e4, 1e6]),  # little cash: buys are often scaled down to what it pays
)
def test_value_is_cash_plus_holdings_and_costs_are_charged_exactly(seed, allow_short, cost, hmax, style, initial_cash):
    env = make(
        "StockTrading-v0",
        num_envs=ACCOUNTS,
        dtype=torch.float64,  # exact accounting
        max_episode_steps=12,
        allow_short=allow_short,
        transaction_cost=cost,
        hmax=hmax,
        initial_cash=initial_cash,
    )
    env.reset(seed=seed)
    close = torch.as_tensor(env.market.close.copy(), dtype=torch.float64)  # [T, S]
    rng = np.random.default_rng(seed)
    shorted = beyond = scaled = resets = 0
    for _ in range(STEPS):
        cash0, held0, day0 = env.cash.clone(), env.holdings.clone(), env.day.clone()
        value0 = cash0 + (held0 * close[day0]).sum(1)
        torch.testing.assert_close(env.account_value, value0, rtol=1e-12, atol=1e-6)
        actions = _actions(rng, style, env.num_stocks)
        _, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))
        cash, held, day, value, fee = (
            info[k] for k in ("cash", "holdings", "day", "account_value", "transaction_cost")
        )
        # the identity, on the day the account has reached (the final day for an episode that just ended)
        assert torch.equal(day, day0 + 1)
        torch.testing.assert_close(value, cash + (held * close[day]).sum(1), rtol=1e-12, atol=1e-6)
        torch.testing.assert_close(reward, ((value - value0) * env.reward_scaling).float(), rtol=1e-5, atol=1e-6)
        # the orders: whole shares, at most hmax per stock, in the direction asked
        traded = held - held0
        assert torch.equal(traded, traded.round()) and bool((traded.abs() <= hmax).all())
        wanted = torch.as_tensor(np.trunc(np.clip(actions, -1, 1) * hmax))
        sold = (-traded).clamp_min(0.0)
        bought = traded.clamp_min(0.0)
        assert bool((sold[wanted >= 0] == 0).all()) and bool((bought[wanted <= 0] == 0).all())
        # sells: exactly what was asked, capped by the holdings unless shorting is allowed
        want_sell = (-wanted).clamp_min(0.0)
        beyond += int((want_sell > held0).sum())  # sells of more than is held: shorts, if allowed
        assert torch.equal(sold, want_sell if allow_short else torch.minimum(want_sell, held0))
        if not allow_short:
            assert bool((held >= 0).all())
        shorted += int((held < 0).sum())
        # buys: never more than asked; all of it when the cash after the sells pays for it
        price = close[day0]  # trades execute at the close of the day they are placed
        proceeds, spent = (sold * price).sum(1), (bought * price).sum(1)
        assert bool((bought <= wanted.clamp_min(0.0)).all())
        affordable = (wanted.clamp_min(0.0) * price).sum(1) * (1 + cost) <= cash0 + proceeds * (1 - cost)
        assert torch.equal(bought[affordable], wanted.clamp_min(0.0)[affordable])
        scaled += int((~affordable).sum())
        # costs: exactly cost × traded value, and the cash pays exactly that on top of the trades
        torch.testing.assert_close(fee, (proceeds + spent) * cost, rtol=1e-12, atol=1e-6)
        torch.testing.assert_close(cash, cash0 + proceeds - spent - fee, rtol=1e-12, atol=1e-6)
        assert bool((cash >= 0).all())
        resets += int((terminated | truncated).sum())
    assert resets >= ACCOUNTS  # the checks ran across auto-resets
    assert shorted > 0 if allow_short and beyond else shorted == 0
    if initial_cash < 1e5 and hmax == 100 and style != "sparse":
        assert scaled > 0  # the scaled-down buys were checked too
