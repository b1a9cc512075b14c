"""Trading env accounting, the batched env against the reference single env, registry and gymnasium use."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import podium.envs as envs
from podium.finance.env import StockTradingEnv, StockTradingVecEnv
from podium.finance.market import TEST_PERIOD, MarketData, load_market

S = 29
COST = 0.002


@pytest.fixture(scope="module")
def market() -> MarketData:
    return load_market("dow29", period=TEST_PERIOD)


def make_env(market: MarketData, num_envs: int = 1, **kwargs: Any) -> StockTradingVecEnv:
    options: dict[str, Any] = {"random_start": False, "dtype": torch.float64, **kwargs}
    env = StockTradingVecEnv(num_envs=num_envs, data=market, **options)
    env.reset(seed=0)
    return env


def place(env: StockTradingVecEnv, cash: float, day: int, holdings: dict[int, float] | None = None) -> None:
    held = torch.zeros(env.num_envs, S, dtype=torch.float64)
    for stock, shares in (holdings or {}).items():
        held[:, stock] = shares
    env.set_state(torch.full((env.num_envs,), cash), held, torch.full((env.num_envs,), day))


def order(**shares_by_stock: float) -> torch.Tensor:
    """One action row: {"s3": 0.5} means action 0.5 on stock 3."""
    action = torch.zeros(1, S, dtype=torch.float64)
    for name, value in shares_by_stock.items():
        action[0, int(name[1:])] = value
    return action


def test_buy_then_sell_accounting_is_exact(market: MarketData) -> None:
    env = make_env(market)
    day, cash = 10, 100_000.0
    place(env, cash, day)
    p0, p1, p2 = (market.close[d, 3] for d in (day, day + 1, day + 2))
    _, reward, terminated, _, info = env.step(order(s3=1.0))
    cash_after_buy = cash - 100 * p0 * (1 + COST)
    assert env.holdings[0, 3].item() == 100 and env.holdings.sum().item() == 100
    assert env.cash.item() == pytest.approx(cash_after_buy, abs=1e-9)
    value = cash_after_buy + 100 * p1
    assert info["account_value"].item() == pytest.approx(value, abs=1e-9)
    assert info["transaction_cost"].item() == pytest.approx(100 * p0 * COST, abs=1e-9)
    assert reward.item() == pytest.approx((value - cash) * 1e-4, rel=1e-6)
    assert info["day"].item() == day + 1 and not terminated.item()

    _, reward, _, _, info = env.step(order(s3=-1.0))
    final_cash = cash_after_buy + 100 * p1 * (1 - COST)
    assert env.holdings.abs().sum().item() == 0
    assert info["cash"].item() == pytest.approx(final_cash, abs=1e-9)
    assert info["account_value"].item() == pytest.approx(final_cash, abs=1e-9)
    assert info["transaction_cost"].item() == pytest.approx(100 * p1 * COST, abs=1e-9)
    assert reward.item() == pytest.approx((final_cash - value) * 1e-4, rel=1e-6)
    assert p2 > 0  # day + 2 exists: the account is now on it
    assert env.day.item() == day + 2


def test_next_close_fills_the_orders_of_a_day_at_the_next_days_close(market: MarketData) -> None:
    """fill="next_close": the policy cannot trade at the close its observation already shows."""
    env = make_env(market, fill="next_close")
    day, cash = 10, 100_000.0
    place(env, cash, day)
    p1, p2 = (market.close[d, 3] for d in (day + 1, day + 2))
    _, reward, _, _, info = env.step(order(s3=1.0))
    after_buy = cash - 100 * p1 * (1 + COST)
    assert env.cash.item() == pytest.approx(after_buy, abs=1e-9)
    assert info["transaction_cost"].item() == pytest.approx(100 * p1 * COST, abs=1e-9)
    assert info["account_value"].item() == pytest.approx(after_buy + 100 * p1, abs=1e-9)
    assert reward.item() == pytest.approx((after_buy + 100 * p1 - cash) * 1e-4, rel=1e-6)
    _, _, _, _, info = env.step(order(s3=-1.0))
    assert info["cash"].item() == pytest.approx(after_buy + 100 * p2 * (1 - COST), abs=1e-9)
    last = market.num_days - 1  # the last step's orders fill on the last day: the data has it
    place(env, cash, last - 1)
    _, _, _, truncated, info = env.step(order(s3=1.0))
    assert truncated.item() and info["cash"].item() == pytest.approx(cash - 100 * market.close[last, 3] * (1 + COST))
    with pytest.raises(ValueError, match="fill 'open' is not one of close, next_close"):
        make_env(market, fill="open")


def test_actions_round_toward_zero_and_clip(market: MarketData) -> None:
    env = make_env(market)
    place(env, 1e6, 0, {0: 500.0, 1: 500.0})
    env.step(order(s0=-0.999, s1=-2.0, s2=0.999, s3=5.0, s4=0.004, s5=-0.009))
    held = env.holdings[0]
    assert held[:6].tolist() == [401.0, 400.0, 99.0, 100.0, 0.0, 0.0]


def test_sells_are_limited_by_holdings_without_shorts(market: MarketData) -> None:
    env = make_env(market)
    place(env, 1000.0, 5, {7: 30.0})
    price = market.close[5, 7]
    _, _, _, _, info = env.step(order(s7=-1.0, s8=-1.0))
    assert env.holdings[0].tolist() == [0.0] * S
    assert info["cash"].item() == pytest.approx(1000.0 + 30 * price * (1 - COST), abs=1e-9)


def test_shorts_only_when_allowed(market: MarketData) -> None:
    env = make_env(market, allow_short=True)
    place(env, 1000.0, 5)
    price = market.close[5, 8]
    env.step(order(s8=-0.5))
    assert env.holdings[0, 8].item() == -50.0
    assert env.cash.item() == pytest.approx(1000.0 + 50 * price * (1 - COST), abs=1e-9)


def test_sells_execute_before_buys(market: MarketData) -> None:
    env = make_env(market)
    day = 20
    place(env, 0.0, day, {0: 100.0})
    p = market.close[day]
    env.step(order(s0=-1.0, s1=1.0))
    proceeds = 100 * p[0] * (1 - COST)
    wanted_cost = 100 * p[1] * (1 + COST)
    expected = 100.0 if wanted_cost <= proceeds else np.floor(100 * (proceeds / wanted_cost))
    assert expected > 0  # the sale paid for (part of) the purchase
    assert env.holdings[0, 0].item() == 0 and env.holdings[0, 1].item() == expected
    assert env.cash.item() == pytest.approx(proceeds - expected * p[1] * (1 + COST), abs=1e-9)
    assert env.cash.item() >= 0


def test_unaffordable_buys_scale_down_together(market: MarketData) -> None:
    env = make_env(market)
    day, cash = 30, 5_000.0
    place(env, cash, day)
    p = market.close[day]
    env.step(order(s2=1.0, s9=0.5, s20=1.0))
    wanted = {2: 100, 9: 50, 20: 100}
    total = sum(n * p[s] for s, n in wanted.items()) * (1 + COST)
    assert total > cash
    expected = {s: np.floor(n * (cash / total)) for s, n in wanted.items()}
    assert [env.holdings[0, s].item() for s in wanted] == list(expected.values())
    spent = sum(n * p[s] for s, n in expected.items()) * (1 + COST)
    assert 0 <= env.cash.item() == pytest.approx(cash - spent, abs=1e-9)


def test_cash_and_holdings_never_negative(market: MarketData) -> None:
    env = StockTradingVecEnv(num_envs=64, data=market, initial_cash=20_000.0, dtype=torch.float32)
    env.reset(seed=1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(60):
        actions = torch.rand(64, S, generator=generator) * 2 - 1 + 0.3
        env.step(actions)
        assert (env.cash >= 0).all() and (env.holdings >= 0).all()
        assert torch.equal(env.holdings, env.holdings.round())


def test_turbulence_liquidates_and_blocks_buys(market: MarketData) -> None:
    assert market.turbulence is not None
    threshold = float(np.quantile(market.turbulence, 0.9))
    day = int(np.argmax(market.turbulence[:-1] > threshold))
    calm = int(np.argmax(market.turbulence[:-1] <= threshold))
    env = make_env(market, num_envs=2, turbulence_threshold=threshold)
    held = torch.zeros(2, S, dtype=torch.float64)
    held[:, [3, 4]] = torch.tensor([40.0, 25.0], dtype=torch.float64)
    env.set_state(torch.tensor([1e4, 1e4]), held, torch.tensor([day, calm]))
    env.step(torch.ones(2, S, dtype=torch.float64))
    p = market.close[day]
    assert env.holdings[0].abs().sum().item() == 0  # everything sold, nothing bought
    assert env.cash[0].item() == pytest.approx(1e4 + (40 * p[3] + 25 * p[4]) * (1 - COST), abs=1e-9)
    assert env.holdings[1].sum().item() > 65  # a calm day trades normally

    short = make_env(market, turbulence_threshold=threshold, allow_short=True)
    place(short, 1e5, day, {5: -20.0})
    short.step(-torch.ones(1, S, dtype=torch.float64))
    assert short.holdings.abs().sum().item() == 0  # the short was bought back, no new short opened


def test_the_last_day_cuts_the_episode_off_and_reports_it(market: MarketData) -> None:
    """The data's end is a time limit, not the end of the account: truncated, so that an agent bootstraps the
    value of the last day (it was *terminated*, which taught the critic that the last days of every training
    episode were worth nothing, though nothing in an observation says how many days are left)."""
    env = make_env(market, num_envs=2)
    last = market.num_days - 1
    held = torch.zeros(2, S, dtype=torch.float64)
    held[:, 0] = 10.0
    env.set_state(torch.tensor([5e3, 5e3]), held, torch.tensor([last - 1, last - 3]))
    obs, _, terminated, truncated, info = env.step(torch.zeros(2, S))
    assert truncated.tolist() == [True, False] and not terminated.any()
    assert info["day"].tolist() == [last, last - 2]
    assert info["account_value"][0].item() == pytest.approx(5e3 + 10 * market.close[last, 0], abs=1e-9)
    assert info["_final_obs"].tolist() == [True, False]
    # the finished account was reset to an evaluation start; info still describes its last day
    assert env.day.tolist() == [0, last - 2] and env.cash[0].item() == 1e6
    assert obs[0, 0].item() == pytest.approx(1.0)
    assert info["final_obs"][0, 1 + S].item() == pytest.approx(10 / 100)


def test_truncation_and_episode_statistics(market: MarketData) -> None:
    env = make_env(market, num_envs=3, max_episode_steps=5)
    returns = torch.zeros(3, dtype=torch.float64)
    for step in range(5):
        _, reward, terminated, truncated, info = env.step(torch.full((3, S), 0.2))
        returns += reward.double()
        assert not terminated.any()
        assert truncated.all() == (step == 4)
    assert torch.allclose(info["episode_return"].double(), returns, rtol=1e-5)
    assert info["episode_length"].tolist() == [5, 5, 5]


def test_starts(market: MarketData) -> None:
    train = StockTradingVecEnv(num_envs=512, data=market, initial_cash=2e5, random_start=True)
    train.reset(seed=3)
    assert int(train.day.min()) >= 0 and int(train.day.max()) <= train.max_start_day
    assert train.max_start_day == int(0.25 * (market.num_days - 2)) and int(train.day.max()) > 0
    assert ((train.cash >= 0.9 * 2e5) & (train.cash <= 1.1 * 2e5)).all() and train.cash.std() > 0
    evaluation = StockTradingVecEnv(num_envs=4, data=market, random_start=False)
    obs, _ = evaluation.reset(seed=0)
    assert evaluation.day.tolist() == [0] * 4 and (evaluation.cash == 1e6).all()
    assert obs.shape == (4, 1 + 2 * S + 8 * S) and obs.dtype == torch.float32
    assert obs.abs().max() < 20


def test_same_seed_same_trajectory(market: MarketData) -> None:
    def run(seed: int) -> torch.Tensor:
        env = StockTradingVecEnv(num_envs=16, data=market)
        env.reset(seed=seed)
        generator = torch.Generator().manual_seed(0)
        values = []
        for _ in range(20):
            values.append(env.step(torch.rand(16, S, generator=generator) * 2 - 1)[4]["account_value"])
        return torch.stack(values)

    assert torch.equal(run(7), run(7)) and not torch.equal(run(7), run(8))


def test_bad_actions_and_arguments(market: MarketData) -> None:
    env = make_env(market, num_envs=2)
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, S + 1))
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.full((2, S), float("nan")))
    with pytest.raises(ValueError, match="turbulence_threshold needs"):
        calm = MarketData(market.dates, market.tickers, market.close, market.indicators, market.indicator_names)
        StockTradingVecEnv(data=calm, turbulence_threshold=1.0)
    with pytest.raises(ValueError, match="hmax"):
        StockTradingVecEnv(data=market, hmax=0)
    with pytest.raises(ValueError, match="day must be in"):
        place(env, 1e4, market.num_days - 1)
    # the tensor env has no reset options (its gymnasium twin's day/cash/holdings): refused, not ignored
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'day'; the options it accepts: none"):
        env.reset(options={"day": 3})


@pytest.mark.parametrize(
    "config",
    [
        {"initial_cash": 1e6},
        {"initial_cash": 2e4},
        {"initial_cash": 1e5, "turbulence_threshold": 40.0},
        {"initial_cash": 5e4, "allow_short": True, "turbulence_threshold": 60.0, "hmax": 37},
        {"initial_cash": 1e5, "turbulence_threshold": 40.0, "fill": "next_close"},
    ],
    ids=["rich", "poor", "turbulence", "shorts", "next-close"],
)
def test_batched_env_matches_reference_env(market: MarketData, config: dict[str, Any]) -> None:
    starts = [0, 3, 10, 50, 200, market.num_days - 40]  # the last one ends and resets on the way
    n = len(starts)
    batched = make_env(market, num_envs=n, **config)
    batched.set_state(torch.full((n,), config["initial_cash"]), torch.zeros(n, S), torch.tensor(starts))
    singles = [StockTradingEnv(data=market, random_start=False, **config) for _ in starts]
    for env, start in zip(singles, starts, strict=True):
        env.reset(options={"day": start})
    rng = np.random.default_rng(0)
    scaled_down = 0
    for _ in range(60):
        actions = rng.uniform(-1, 1, (n, S)).astype(np.float32)
        actions[:, :6] += 0.6  # lean towards buying so that cash runs out
        obs, reward, terminated, truncated, info = batched.step(torch.as_tensor(actions))
        for i, env in enumerate(singles):
            held_before = env.holdings.copy()
            obs_i, reward_i, terminated_i, truncated_i, info_i = env.step(actions[i])
            wanted = np.trunc(np.clip(actions[i].astype(np.float64), -1, 1) * env.hmax)
            scaled_down += bool(((env.holdings - held_before < wanted) & (wanted > 0)).any())
            assert info_i["day"] == info["day"][i].item()
            assert info_i["account_value"] == pytest.approx(info["account_value"][i].item(), rel=1e-12, abs=1e-6)
            assert info_i["cash"] == pytest.approx(info["cash"][i].item(), rel=1e-12, abs=1e-6)
            assert info_i["transaction_cost"] == pytest.approx(info["transaction_cost"][i].item(), abs=1e-6)
            assert reward_i == pytest.approx(reward[i].item(), rel=1e-5, abs=1e-6)  # float32 rewards
            assert (terminated_i, truncated_i) == (terminated[i].item(), truncated[i].item())
            if terminated_i or truncated_i:
                np.testing.assert_allclose(obs_i, info["final_obs"][i].numpy(), rtol=1e-6, atol=1e-6)
                obs_i, _ = env.reset(options={"day": 0})
            else:
                np.testing.assert_array_equal(env.holdings, batched.holdings[i].numpy())
            np.testing.assert_allclose(obs_i, obs[i].numpy(), rtol=1e-6, atol=1e-6)
    assert scaled_down > 0  # the cash-limited buy rule was exercised


def test_registered_with_make() -> None:
    env = envs.make("StockTrading-v0", num_envs=8, seed=0)
    obs, _ = env.reset()
    assert isinstance(env, StockTradingVecEnv) and obs.shape == (8, 1 + 2 * S + 8 * S)
    assert str(env.dates[0])[:10] == "2009-01-02" and str(env.dates[-1])[:10] == "2015-12-31"
    test = envs.make("StockTrading-v0", num_envs=2, period=TEST_PERIOD, random_start=False)
    assert str(test.dates[0])[:10] == "2016-01-04" and len(test.dates) == 470
    test.reset(seed=0)
    _, reward, *_ = test.step(torch.zeros(2, S))
    assert reward.tolist() == [0.0, 0.0]  # no position, no cost, no change


def test_reference_env_is_a_gymnasium_env(market: MarketData) -> None:
    from gymnasium.utils.env_checker import check_env

    with pytest.warns(UserWarning):  # the observation space is unbounded, which the checker mentions
        check_env(StockTradingEnv(data=market))
    vector = gym.vector.SyncVectorEnv([lambda: StockTradingEnv(data=market) for _ in range(3)])
    obs, _ = vector.reset(seed=0)
    obs, reward, *_ = vector.step(vector.action_space.sample())
    assert obs.shape == (3, 1 + 2 * S + 8 * S) and reward.shape == (3,)


def test_a_sharpe_scored_episode_returns_the_sharpe_ratio_that_the_backtest_reports(market):
    from podium.finance.metrics import performance

    actions = torch.linspace(-1.0, 1.0, market.close.shape[1], dtype=torch.float64).repeat(2, 1)
    actions[1] *= 0.3
    values, returns = [[], []], None
    for score in ("return", "sharpe"):
        env = make_env(market, num_envs=2, random_start=False, score=score, dtype=torch.float64)
        env.reset(seed=0)
        total = torch.zeros(2, dtype=torch.float64)
        start = env.account_value.clone()
        for _ in range(env.num_days - 1):
            _, reward, terminated, truncated, info = env.step(actions)
            total += reward.double()
            if score == "return":
                for k in range(2):
                    values[k].append(float(info["account_value"][k]))
        # a Sharpe ratio is the score of the episode that ends there: terminated; a profit goes on: truncated
        assert bool(terminated.all() if score == "sharpe" else truncated.all() and not terminated.any())
        if score == "sharpe":
            returns = total
    for k in range(2):
        expected = performance([float(start[k]), *values[k]])["sharpe_ratio"]
        assert float(returns[k]) == pytest.approx(expected, rel=1e-4)


def test_a_score_that_does_not_exist_or_needs_whole_episodes_is_refused(market):
    with pytest.raises(ValueError, match="score 'calmar' is not one of return, sharpe"):
        make_env(market, score="calmar")
    with pytest.raises(ValueError, match="leave max_episode_steps unset"):
        make_env(market, score="sharpe", max_episode_steps=10)


# ----------------------------------------------------------------- the reference env on its own
def test_the_reference_env_has_the_batched_envs_spaces_defaults_and_options(market):
    T = market.num_days
    env = StockTradingEnv(data=market)
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (1 + 2 * S + 8 * S,), np.float32)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (S,), np.float32)
    assert env.max_start_day == int(0.25 * (T - 2)) and env.initial_cash == 1e6
    assert StockTradingEnv(data=market, random_start=False).max_start_day == 0
    obs, info = StockTradingEnv(data=market, random_start=False).reset(seed=0)
    assert info["day"] == 0 and info["cash"] == 1e6 and info["account_value"] == 1e6
    assert info["transaction_cost"] == 0.0 and info["holdings"].tolist() == [0.0] * S
    assert info["date"] == market.dates[0] and obs[0] == 1.0
    # an account given in options: holdings rounded to whole shares, kept as floats
    held = [0] * S
    held[2], held[5] = 7, 3
    obs, info = env.reset(options={"day": T - 2, "cash": 1234.5, "holdings": held})
    assert info["day"] == T - 2 and info["cash"] == 1234.5 and info["date"] == market.dates[T - 2]
    assert env.holdings.dtype == np.float64 and info["holdings"].tolist() == [float(h) for h in held]
    assert info["account_value"] == pytest.approx(1234.5 + 7 * market.close[T - 2, 2] + 3 * market.close[T - 2, 5])
    assert obs[1 + S + 2] == pytest.approx(7 / 100)
    for day in (-1, T - 1):
        with pytest.raises(ValueError, match=rf"day must be in 0\.\.{T - 2} \(a step needs a next day\)"):
            env.reset(options={"day": day})


def test_the_reference_env_draws_its_start_day_and_cash_from_the_documented_ranges(market):
    env = StockTradingEnv(data=market, start_fraction=0.01, cash_jitter=0.5, initial_cash=1e4)  # days 0..4
    days, cash = set(), []
    for seed in range(60):
        _, info = env.reset(seed=seed)
        days.add(info["day"])
        cash.append(info["cash"])
    assert days == {0, 1, 2, 3, 4}
    assert 5e3 <= min(cash) < 7e3 and 1.3e4 < max(cash) <= 1.5e4


def test_the_reference_env_refuses_what_the_batched_env_refuses(market):
    calm = MarketData(market.dates, market.tickers, market.close, market.indicators, market.indicator_names)
    with pytest.raises(ValueError, match="turbulence_threshold needs a 'turbulence' column"):
        StockTradingEnv(data=calm, turbulence_threshold=1.0)
    for limit in (0, -2):
        with pytest.raises(ValueError, match=f"max_episode_steps must be positive or None, got {limit}"):
            StockTradingEnv(data=market, max_episode_steps=limit)
    env = StockTradingEnv(data=market, max_episode_steps=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"^StockTradingEnv: action contains NaN or inf$"):
        env.step(np.full(S, np.nan))


def test_the_reference_env_truncates_at_its_step_limit_and_where_the_data_ends(market):
    T = market.num_days
    env = StockTradingEnv(data=market, random_start=False, max_episode_steps=3)
    for start in (0, T - 4):  # the limit, then the data's last day, at the third step
        env.reset(options={"day": start})
        for step in range(1, 4):
            _, _, terminated, truncated, info = env.step(np.zeros(S))
            assert (terminated, truncated) == (False, step == 3)
        assert info["day"] == start + 3
        env.reset(options={"day": start})  # a reset starts the count again
        assert env.step(np.zeros(S))[3] is False


def test_the_reference_env_clips_orders_reads_a_row_of_actions_and_keeps_empty_accounts_empty(market):
    env = StockTradingEnv(data=market, random_start=False)
    held = [0.0] * S
    held[0] = 500.0
    env.reset(options={"day": 10, "holdings": held})
    _, _, _, _, info = env.step(np.array([[-5.0] + [0.0] * (S - 1)]))  # a batch of one; clipped to -1
    assert info["holdings"][0] == 400.0
    # a float32 0.57 is 0.56999999...: 56 shares, though 0.57 * 100 in float32 arithmetic rounds to 57
    action = np.zeros(S, dtype=np.float32)
    action[1] = 0.57
    _, _, _, _, info = env.step(action)
    assert info["holdings"][1] == 56.0
    batched = StockTradingVecEnv(num_envs=1, data=market, random_start=False, dtype=torch.float64)
    batched.reset(seed=0)
    batched.step(torch.as_tensor(action)[None])
    assert batched.holdings[0, 1].item() == 56.0
    env.reset(options={"day": 10, "cash": 0.0})
    _, _, _, _, info = env.step(np.zeros(S))
    assert info["cash"] == 0.0 and info["account_value"] == 0.0


def test_turbulence_exactly_at_the_threshold_is_calm_in_both_envs(market):
    day = 30
    threshold = float(market.turbulence[day])
    held = [0.0] * S
    held[3] = 40.0
    reference = StockTradingEnv(data=market, random_start=False, turbulence_threshold=threshold)
    reference.reset(options={"day": day, "cash": 1e4, "holdings": held})
    _, _, _, _, info = reference.step(np.zeros(S))
    assert info["holdings"][3] == 40.0  # not liquidated: the rule needs turbulence strictly above
    batched = make_env(market, turbulence_threshold=threshold)
    place(batched, 1e4, day, {3: 40.0})
    batched.step(torch.zeros(1, S))
    assert batched.holdings[0, 3].item() == 40.0
    reference = StockTradingEnv(data=market, random_start=False, turbulence_threshold=threshold - 1e-6)
    reference.reset(options={"day": day, "cash": 1e4, "holdings": held})
    assert reference.step(np.zeros(S))[4]["holdings"][3] == 0.0


def test_a_period_indicators_and_scales_of_a_table_shape_both_envs_alike(market):
    table = market.frame.reset_index(drop=True)
    options: dict[str, Any] = {
        "data": table,
        "period": ("2016-03-01", "2016-06-30"),
        "indicators": ("macd", "rsi_30"),
        "indicator_scales": {"macd": 1.0, "rsi_30": "price"},
        "price_scale": 0.02,  # not rsi's own factor (0.01): the override must be what scales it
        "random_start": False,
    }
    reference = StockTradingEnv(**options)
    batched = StockTradingVecEnv(num_envs=1, dtype=torch.float64, **options)
    obs, _ = reference.reset(seed=0)
    first = int(np.argmax(market.dates >= np.datetime64("2016-03-01")))
    assert reference.market.num_days == batched.num_days == 86 and obs.shape == (1 + 2 * S + 2 * S,)
    macd = market.indicators[first, market.indicator_names.index("macd")]
    rsi = market.indicators[first, market.indicator_names.index("rsi_30")]
    np.testing.assert_allclose(obs[1 + 2 * S : 1 + 3 * S], macd, rtol=1e-6)  # factor 1
    np.testing.assert_allclose(obs[1 + 3 * S :], rsi * 0.02, rtol=1e-6)  # the price factor
    np.testing.assert_allclose(batched.reset(seed=0)[0][0].numpy(), obs, rtol=1e-6)


# ----------------------------------------------------------------- the batched env's own checks
def test_a_scripted_start_with_holdings_is_valued_at_that_days_close(market):
    env = make_env(market)
    day = 40
    place(env, 2_000.0, day, {3: 40.0, 7: 10.0})
    p, q = market.close[day], market.close[day + 1]
    value = 2_000.0 + 40 * p[3] + 10 * p[7]
    assert env.account_value.item() == pytest.approx(value, abs=1e-9)
    _, reward, _, _, info = env.step(torch.zeros(1, S))
    after = 2_000.0 + 40 * q[3] + 10 * q[7]
    assert info["account_value"].item() == pytest.approx(after, abs=1e-9)
    assert reward.item() == pytest.approx((after - value) * 1e-4, rel=1e-6)  # a float32 reward


def test_set_state_checks_every_part_of_the_account(market):
    env = make_env(market, num_envs=2)
    T = market.num_days
    good = {"cash": torch.full((2,), 10.0), "holdings": torch.zeros(2, S), "day": torch.tensor([0, T - 2])}
    env.set_state(**good)
    for part, bad in (("cash", torch.zeros(3)), ("holdings", torch.zeros(2, S - 1)), ("day", torch.zeros(1))):
        shapes = {k: tuple(v.shape) for k, v in {**good, part: bad}.items()}
        got = ", ".join(str(shapes[k]) for k in ("cash", "holdings", "day"))
        with pytest.raises(ValueError, match=rf"^set_state expects cash \[2\], holdings \[2, {S}\], day \[2\]; got "):
            env.set_state(**{**good, part: bad})
        with pytest.raises(ValueError, match=re.escape(got)):
            env.set_state(**{**good, part: bad})
    for day in ([-1, 0], [0, T - 1]):
        with pytest.raises(ValueError, match=rf"^day must be in 0\.\.{T - 2} \(a step needs a next day\)$"):
            env.set_state(good["cash"], good["holdings"], torch.tensor(day))
    with pytest.raises(ValueError, match=r"^cash must be non-negative$"):
        env.set_state(torch.tensor([10.0, -0.01]), good["holdings"], good["day"])


def test_float32_accounts_order_the_shares_float64_and_the_twin_do(market):
    """0.57 * 100 is 57.0 in float32 and 56.99999 in float64: the same action bought 57 shares in training
    (float32) and 56 in the backtest (float64) and the gymnasium twin."""
    orders = {}
    for dtype in (torch.float32, torch.float64):
        env = StockTradingVecEnv(data=market, random_start=False, cash_jitter=0.0, dtype=dtype)
        env.reset(seed=0)
        actions = torch.zeros(1, market.num_stocks)
        actions[0, :2] = torch.tensor([0.57, 0.29])
        env.step(actions)
        orders[dtype] = env.holdings[0, :2].tolist()
    assert orders[torch.float32] == orders[torch.float64] == [56.0, 28.0]


@pytest.mark.parametrize(
    ("field", "bad", "fine", "match"),
    [
        ("initial_cash", 0.0, 0.5, r"^initial_cash must be a positive number of dollars, got 0.0$"),
        ("initial_cash", float("inf"), 1e9, "initial_cash"),
        ("reward_scaling", float("nan"), 1.0, r"^reward_scaling must be a positive number, got nan$"),
        ("price_scale", -1.0, 1.0, "price_scale must be a positive number"),
        ("turbulence_threshold", float("nan"), None, "turbulence_threshold must be a finite number"),
        ("indicator_scales", {"mcad": 5.0}, {"macd": 5.0}, "names 'mcad', which the env does not observe"),
        ("indicator_scales", {"macd": "prices"}, {"macd": "price"}, r"must be a finite number or 'price'"),
        ("indicator_scales", {"macd": None}, {"macd": 2}, r"must be a finite number or 'price', got None"),
        ("price_scale", "0.01", 0.01, "price_scale must be a positive number"),
        ("hmax", 2.5, 1, r"^hmax \(most shares per trade per stock\) must be a positive integer, got 2.5$"),
        ("hmax", True, 3, "hmax"),
        ("transaction_cost", 1.0, 0.0, r"^transaction_cost is a fraction of the traded value in \[0, 1\), got 1.0$"),
        ("transaction_cost", 1.5, 0.99, "transaction_cost"),
        ("start_fraction", 1.5, 0.0, r"^start_fraction must be in \[0, 1\], got 1.5$"),
        ("start_fraction", -0.1, 1.0, "start_fraction"),
        ("cash_jitter", 1.0, 0.0, r"^cash_jitter must be in \[0, 1\), got 1.0$"),
        ("cash_jitter", 1.5, 0.99, "cash_jitter"),
    ],
)
def test_each_parameter_is_checked_at_its_bounds(market, field, bad, fine, match):
    with pytest.raises(ValueError, match=match):
        StockTradingVecEnv(data=market, **{field: bad})
    StockTradingVecEnv(data=market, **{field: fine})


def test_the_batched_env_describes_itself_and_its_defaults(market):
    env = StockTradingVecEnv(data=market)
    assert env.num_envs == 1 and env.validate_actions
    assert env.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (1 + 2 * S + 8 * S,), np.float32)
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (S,), np.float32)
    calm = MarketData(market.dates, market.tickers, market.close, market.indicators, market.indicator_names)
    with pytest.raises(ValueError, match=r"^turbulence_threshold needs a 'turbulence' column in the data \(see add"):
        StockTradingVecEnv(data=calm, turbulence_threshold=1.0)
    assert StockTradingVecEnv(data=market, turbulence_threshold=50.0).turbulence_threshold == 50.0
    assert StockTradingVecEnv(data=market, random_start=False).max_start_day == 0
    trusting = make_env(market, validate_actions=False)
    trusting.step(torch.full((1, S), float("nan")))  # not checked: the caller vouches for its actions


def test_indicator_factors_come_from_the_table_the_overrides_or_default_to_1():
    from podium.finance.env import _indicator_factors

    names = ["macd", "boll_ub", "rsi_30", "mystery"]
    assert _indicator_factors(names, 0.01, None).tolist() == [0.1, 0.01, 0.01, 1.0]
    assert _indicator_factors(names, 0.5, {"mystery": 3.0, "macd": "price"}).tolist() == [0.5, 0.5, 0.01, 3.0]


def test_random_starts_cover_every_allowed_day_from_the_first(market):
    env = StockTradingVecEnv(num_envs=64, data=market, start_fraction=0.01)  # days 0..4
    env.reset(seed=0)
    assert set(env.day.tolist()) == {0, 1, 2, 3, 4}


def test_a_sharpe_score_over_two_days_uses_the_sample_spread_and_a_flat_account_scores_0(market):
    T = market.num_days
    env = make_env(market, score="sharpe")
    place(env, 1_000.0, T - 3, {3: 40.0, 7: 10.0})  # two steps to the last day
    values = [float(env.account_value)]
    _, first, _, _, info = env.step(torch.zeros(1, S))
    values.append(float(info["account_value"]))
    _, last, terminated, _, info = env.step(torch.zeros(1, S))
    values.append(float(info["account_value"]))
    daily = np.diff(values) / np.array(values[:-1])
    assert first.item() == 0.0 and terminated.item()
    assert last.item() == pytest.approx(daily.mean() / daily.std(ddof=1) * np.sqrt(252), rel=1e-5)
    flat = make_env(market, score="sharpe")
    place(flat, 1_000.0, T - 4)  # cash only: no daily return
    for _ in range(3):
        _, reward, terminated, _, _ = flat.step(torch.zeros(1, S))
    assert terminated.item() and reward.item() == 0.0
