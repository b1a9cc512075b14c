"""The running normalisers: their statistics equal a one-pass computation over everything seen, whatever the
batching; normalised values are clipped; rewards are scaled by the running std of each sub-env's discounted
return, which restarts when an episode ends."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from podium.algos.normalization import RewardScaler, RunningMeanStd

_batches = st.lists(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=2, max_size=12),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(_batches)
def test_running_statistics_equal_those_of_everything_seen_however_it_was_batched(batches):
    rms = RunningMeanStd((2,))
    for batch in batches:
        rms.update(torch.tensor(batch, dtype=torch.float32).reshape(-1, 1).repeat(1, 2) * torch.tensor([1.0, -2.0]))
    seen = np.concatenate([np.asarray(b, dtype=np.float32) for b in batches]).astype(np.float64)
    # the prior (mean 0, var 1, weight 1e-8) adds at most (1 + mean^2) * 1e-8 to the variance
    prior = 1e-7 * (1 + 4 * float(np.abs(seen).max()) ** 2)
    np.testing.assert_allclose(rms.mean.numpy(), [seen.mean(), -2 * seen.mean()], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rms.var.numpy(), [seen.var(), 4 * seen.var()], rtol=1e-6, atol=prior)
    assert float(rms.count) == pytest.approx(len(seen) + 1e-8, rel=1e-12)
    assert rms.mean.dtype == rms.var.dtype == torch.float64


def test_a_fresh_normaliser_is_the_identity_and_normalised_values_are_clipped():
    rms = RunningMeanStd((3,), clip=5.0)
    x = torch.tensor([[0.5, -2.0, 4.0]])
    torch.testing.assert_close(rms.normalize(x), x / (1 + 1e-8) ** 0.5)  # mean 0, var 1 before any update
    rms.update(torch.tensor([[1.0, 0.0, 0.0], [3.0, 0.0, 2.0]]))  # mean [2, 0, 1], var [1, 0, 1]
    out = rms.normalize(torch.tensor([[2.0, 1.0, -9.0]]))
    assert out.dtype == torch.float32
    # var 0 is kept finite by eps: 1 / sqrt(1e-8) = 1e4, clipped to 5
    torch.testing.assert_close(out, torch.tensor([[0.0, 5.0, -5.0]]), atol=1e-4, rtol=0)
    assert RunningMeanStd(()).clip == 10.0 and RunningMeanStd(()).eps == 1e-8
    assert float(RunningMeanStd(()).count) == 1e-8 and float(RunningMeanStd(()).var) == 1.0


def test_rewards_are_scaled_by_the_running_std_of_each_sub_envs_discounted_return_restarting_at_episode_ends():
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=100.0)
    rewards = [torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), torch.tensor([4.0, 2.0])]
    dones = [torch.tensor([False, False]), torch.tensor([True, False]), torch.tensor([False, False])]
    returns, ret, scaled = [], np.zeros(2), []
    for reward, done in zip(rewards, dones, strict=True):
        ret = 0.5 * ret + reward.numpy()
        returns.extend(ret.tolist())
        std = np.sqrt(np.var(returns) + 1e-8)
        scaled.append(scaler.scale(reward, done))
        np.testing.assert_allclose(scaled[-1].numpy(), reward.numpy() / std, rtol=1e-5)
        ret = np.where(done.numpy(), 0.0, ret)  # a finished episode's return restarts from 0
    assert returns == [1.0, 2.0, 1.5, 3.0, 4.0, 3.5]
    assert scaler.ret.dtype == torch.float64  # returns accumulate in double precision, as the statistics do
    assert "ret" not in scaler.state_dict() and "stats.var" in scaler.state_dict()


def test_scaled_rewards_are_clipped_and_keep_the_rewards_dtype():
    scaler = RewardScaler(num_envs=1_000, gamma=0.99)
    assert scaler.clip == 10.0
    scaler.scale(torch.full((1_000,), 1e-3), torch.ones(1_000, dtype=torch.bool))  # returns of 1e-3: a tiny std
    reward = torch.full((1_000,), 1e-3)
    reward[:2] = torch.tensor([5.0, -5.0])  # about 45 standard deviations
    out = scaler.scale(reward, torch.zeros(1_000, dtype=torch.bool))
    assert out.dtype == torch.float32 and out[:2].tolist() == [10.0, -10.0]


def test_on_a_device_without_float64_the_statistics_are_float32_and_agree():
    """Apple's mps has no float64: PPO's normalisers could not be moved there, so PPO could not be built."""
    from podium.algos.normalization import statistics_dtype

    assert statistics_dtype("mps") == torch.float32 and statistics_dtype("cpu") == statistics_dtype("cuda:0")
    assert statistics_dtype("cpu") == torch.float64
    x = torch.randn(500, 3) * 5 + 2
    wide, narrow = RunningMeanStd((3,)), RunningMeanStd((3,), dtype=torch.float32)
    for part in x.split(64):
        wide.update(part)
        narrow.update(part)
    assert narrow.mean.dtype == narrow.var.dtype == narrow.count.dtype == torch.float32
    torch.testing.assert_close(narrow.mean, wide.mean.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(narrow.var, wide.var.float(), rtol=1e-5, atol=1e-5)
    scaler = RewardScaler(4, 0.99, dtype=torch.float32)
    out = scaler.scale(torch.ones(4), torch.zeros(4, dtype=torch.bool))
    assert scaler.ret.dtype == scaler.stats.mean.dtype == torch.float32 and out.dtype == torch.float32
    narrow.load_state_dict(wide.state_dict())  # a float64 checkpoint loads into float32 statistics
    torch.testing.assert_close(narrow.mean, wide.mean.float())
