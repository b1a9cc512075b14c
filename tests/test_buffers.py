"""The replay buffer's ring: writes that wrap past the end, oldest-first ``state_dict``, sampling only what was
written — by example and, for random sequences of batch sizes, against a plain list (hypothesis). The H-term's
good-episode memory: returns-to-go by hand, the drop quantile, segments, the ring, sample weights."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from podium.algos.buffers import GoodEpisodes, ReplayBuffer, RolloutBuffer

CPU = torch.device("cpu")


def _batch(first: int, n: int) -> dict[str, torch.Tensor]:
    """``n`` transitions numbered ``first .. first + n - 1``: every field carries the number."""
    ids = torch.arange(first, first + n, dtype=torch.float32)
    return {
        "obs": torch.stack([ids, -ids], 1),
        "actions": ids.long(),
        "rewards": ids * 10,
        "next_obs": torch.stack([ids + 0.5, -ids], 1),
        "terminated": (ids.long() % 3 == 0).float(),
    }


def _add(buffer: ReplayBuffer, batch: dict[str, torch.Tensor]) -> None:
    buffer.add(batch["obs"], batch["actions"], batch["rewards"], batch["next_obs"], batch["terminated"].bool())


def _ids(state: dict[str, torch.Tensor]) -> list[int]:
    """The transition numbers held in a state dict (or a sample), checking every field agrees."""
    ids = state["obs"][:, 0]
    assert torch.equal(state["obs"][:, 1], -ids) and torch.equal(state["next_obs"][:, 0], ids + 0.5)
    assert torch.equal(state["actions"], ids.long()) and torch.equal(state["rewards"], ids * 10)
    assert torch.equal(state["terminated"], (ids.long() % 3 == 0).float())
    return [int(i) for i in ids]


def test_writes_that_wrap_overwrite_the_oldest_and_state_dict_is_oldest_first():
    buffer = ReplayBuffer(5, 2, (), torch.long, CPU)
    _add(buffer, _batch(0, 3))
    assert (buffer.size, buffer.pos) == (3, 3) and _ids(buffer.state_dict()) == [0, 1, 2]
    _add(buffer, _batch(3, 3))  # wraps: rows 3, 4, then 0
    assert (buffer.size, buffer.pos) == (5, 1)
    assert buffer.obs[:, 0].tolist() == [5, 1, 2, 3, 4]  # the raw ring
    assert _ids(buffer.state_dict()) == [1, 2, 3, 4, 5]
    _add(buffer, _batch(6, 5))  # a whole capacity at once, starting mid-ring
    assert (buffer.size, buffer.pos) == (5, 1)
    assert buffer.obs[:, 0].tolist() == [10, 6, 7, 8, 9] and _ids(buffer.state_dict()) == [6, 7, 8, 9, 10]
    with pytest.raises(ValueError, match="does not fit"):
        _add(buffer, _batch(11, 6))


def test_sampling_returns_only_written_rows():
    buffer = ReplayBuffer(100, 2, (), torch.long, CPU)
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample(4)
    _add(buffer, _batch(1, 7))  # rows 7..99 were never written (zeros: id 0 would show)
    sample = buffer.sample(2000, torch.Generator().manual_seed(0))
    assert set(_ids(sample)) == set(range(1, 8))  # every written row, and nothing else


def test_a_state_dict_loads_into_a_smaller_buffer_keeping_the_newest():
    big = ReplayBuffer(8, 2, (), torch.long, CPU)
    for first in range(0, 12, 4):
        _add(big, _batch(first, 4))
    small = ReplayBuffer(5, 2, (), torch.long, CPU)
    small.load_state_dict(big.state_dict())
    assert small.size == 5 and _ids(small.state_dict()) == [7, 8, 9, 10, 11]
    _add(small, _batch(12, 2))
    assert _ids(small.state_dict()) == [9, 10, 11, 12, 13]
    other = ReplayBuffer(5, 3, (), torch.long, CPU)  # another observation size: refused, saying why
    with pytest.raises(ValueError, match=r"replay buffer state has shapes .*\(2,\).*this buffer stores .*\(3,\)"):
        other.load_state_dict(big.state_dict())


@pytest.mark.parametrize("rows", [1, 3])
def test_loading_into_a_used_buffer_replaces_everything_it_held(rows):
    """Found by mutation testing: loading must reset the write position and the size, and a single row counts."""
    source = ReplayBuffer(8, 2, (), torch.long, CPU)
    _add(source, _batch(100, rows))
    used = ReplayBuffer(8, 2, (), torch.long, CPU)
    _add(used, _batch(0, 5))  # a buffer that already holds rows and has moved its write position
    used.load_state_dict(source.state_dict())
    assert used.size == rows and _ids(used.state_dict()) == list(range(100, 100 + rows))
    sample = used.sample(256, generator=torch.Generator().manual_seed(0))
    assert set(_ids(sample)) == set(range(100, 100 + rows))  # never an old row, never an empty slot


@settings(max_examples=60, deadline=None, database=None)
@given(capacity=st.integers(1, 12), sizes=st.lists(st.integers(1, 12), min_size=1, max_size=15), reload=st.booleans())
def test_the_ring_holds_the_newest_transitions_in_order_for_any_batch_sizes(capacity, sizes, reload):
    """Against a plain list of everything added: size, oldest-first contents, and samples drawn from them only.
    ``reload``: each state dict is loaded into a fresh buffer, which must carry on identically."""
    buffer = ReplayBuffer(capacity, 2, (), torch.long, CPU)
    added: list[int] = []
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        n = min(n, capacity)
        _add(buffer, _batch(len(added), n))
        added += range(len(added), len(added) + n)
        kept = added[-capacity:]
        assert buffer.size == len(kept)
        assert _ids(buffer.state_dict()) == kept
        assert set(_ids(buffer.sample(4 * capacity, gen))) <= set(kept)
        if reload:
            fresh = ReplayBuffer(capacity, 2, (), torch.long, CPU)
            fresh.load_state_dict(buffer.state_dict())
            buffer = fresh


# ----------------------------------------------------------------- GoodEpisodes (the off-policy H-term's memory)
def _good(num_envs: int = 3, max_len: int = 6, capacity: int = 100, gamma: float = 0.5, drop: float = 0.0):
    return GoodEpisodes(num_envs, max_len, capacity, 1, (), torch.long, gamma, drop, CPU)


def _hand_return_to_go(rewards: list[float], gamma: float) -> list[float]:
    return [sum(gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(len(rewards))]


def test_good_episodes_score_each_step_by_its_discounted_return_to_go_as_each_sub_env_ends():
    good = _good()
    # three sub-envs whose episodes end after 2, 3 and 4 steps; obs and actions number the steps
    ends = {0: 2, 1: 3, 2: 4}
    rewards = {0: [1.0, 2.0], 1: [0.0, 4.0, 8.0], 2: [1.0, 1.0, 1.0, 1.0]}
    for t in range(4):
        obs = torch.tensor([[10.0 * e + t] for e in range(3)])
        reward = torch.tensor([rewards[e][t] if t < ends[e] else 0.0 for e in range(3)])
        done = torch.tensor([t + 1 == ends[e] for e in range(3)])
        good.add(obs, (obs[:, 0]).long(), reward, done)
    assert good.size == 2 + 3 + 4 and good.episodes == 3
    held = {int(o): float(g) for o, g in zip(good.obs[: good.size, 0], good.return_to_go[: good.size], strict=True)}
    expected = {10 * e + t: g for e in range(3) for t, g in enumerate(_hand_return_to_go(rewards[e], 0.5))}
    assert held == pytest.approx(expected)
    assert torch.equal(good.actions[: good.size], good.obs[: good.size, 0].long())
    assert good.length.tolist() == [2, 1, 0]  # sub-envs 0 and 1 started new episodes (not ended yet)


def test_good_episodes_keep_only_episodes_at_or_above_the_drop_quantile_of_recent_returns():
    good = _good(num_envs=1, max_len=4, drop=0.5)
    for total in (1.0, 5.0, 2.0, 0.5, 9.0):  # one-step episodes
        good.add(torch.tensor([[total]]), torch.tensor([0]), torch.tensor([total]), torch.tensor([True]))
    # kept: 1 (its own median), 5 (median of 1, 5: 3), 2 (median of 1, 5, 2: 2), 9; not 0.5 (median 1.5)
    assert sorted(good.obs[: good.size, 0].tolist()) == [1.0, 2.0, 5.0, 9.0]


def test_good_episodes_remember_the_latest_returns_when_more_episodes_end_at_once_than_the_history_holds():
    good = GoodEpisodes(6, 4, 100, 1, (), torch.long, 1.0, 0.5, CPU, history=4)
    totals = torch.arange(1.0, 7.0)  # six one-step episodes end together: returns 1..6
    good.add(totals[:, None], torch.zeros(6, dtype=torch.long), totals, torch.ones(6, dtype=torch.bool))
    assert good.episodes == 6 and sorted(good.returns.tolist()) == [3.0, 4.0, 5.0, 6.0]  # the last four
    good.add(torch.full((6, 1), 9.0), torch.zeros(6, dtype=torch.long), torch.full((6,), 9.0), torch.zeros(6) < 1)
    assert good.returns.tolist() == [9.0] * 4


def test_good_episodes_cut_a_long_episode_into_segments_and_wrap_the_ring():
    good = _good(num_envs=1, max_len=3, capacity=4, gamma=1.0)
    for t in range(7):  # one long episode: segments [0, 1, 2], [3, 4, 5] are scored; step 6 is staged
        good.add(torch.tensor([[float(t)]]), torch.tensor([t]), torch.tensor([1.0]), torch.tensor([False]))
    assert good.episodes == 2 and good.size == 4 and int(good.length[0]) == 1
    # the ring holds the last four written: steps 2, 3, 4, 5, each with its return-to-go within its segment
    held = sorted(zip(good.obs[:, 0].tolist(), good.return_to_go.tolist(), strict=True))
    assert held == [(2.0, 1.0), (3.0, 3.0), (4.0, 2.0), (5.0, 1.0)]


def test_good_episode_samples_weigh_the_return_to_go_from_0_to_1_and_an_empty_memory_cannot_be_sampled():
    good = _good(num_envs=1, max_len=8, gamma=1.0)
    with pytest.raises(RuntimeError, match=r"^no good episode has ended yet; check \.size before sampling$"):
        good.sample(4)
    assert good.returns.shape == (100,)  # the drop quantile is over the last 100 episodes
    for t, r in enumerate([1.0, 2.0, 3.0]):
        good.add(torch.tensor([[float(t)]]), torch.tensor([t]), torch.tensor([r]), torch.tensor([t == 2]))
    batch = good.sample(64, torch.Generator().manual_seed(0))
    # returns-to-go 6, 5, 3 -> weights 1, 2/3, 0
    weight_of = {0.0: 1.0, 1.0: 2 / 3, 2.0: 0.0}
    assert set(batch) == {"obs", "actions", "weight"}
    assert batch["weight"].tolist() == pytest.approx([weight_of[o] for o in batch["obs"][:, 0].tolist()])
    assert set(batch["obs"][:, 0].tolist()) == {0.0, 1.0, 2.0}


def test_good_episode_weights_span_0_to_1_for_a_narrow_range_and_samples_follow_the_generator_alone():
    good = _good(num_envs=1, max_len=8, gamma=1.0)
    for t, r in enumerate([0.1, 0.2, 0.3]):  # returns-to-go 0.6, 0.5, 0.3: a range below 1
        good.add(torch.tensor([[float(t)]]), torch.tensor([t]), torch.tensor([r]), torch.tensor([t == 2]))
    torch.manual_seed(1)
    batch = good.sample(32, torch.Generator().manual_seed(0))
    torch.manual_seed(2)  # the global generator does not matter
    again = good.sample(32, torch.Generator().manual_seed(0))
    assert torch.equal(batch["obs"], again["obs"])
    weight_of = {0.0: 1.0, 1.0: 2 / 3, 2.0: 0.0}
    assert batch["weight"].tolist() == pytest.approx([weight_of[o] for o in batch["obs"][:, 0].tolist()])


# ----------------------------------------------------------------- the rollout buffer and the replay buffer's checks
def test_a_full_rollout_buffer_refuses_more_until_reset_and_then_writes_from_the_start():
    buffer = RolloutBuffer(2, 3, 4, (2,), torch.float32, CPU)
    step = (torch.zeros(3, 4), torch.zeros(3, 2), torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3))
    buffer.add(*step)
    buffer.add(*step)
    with pytest.raises(
        RuntimeError, match=r"^RolloutBuffer is full; call compute_gae\(\) and reset\(\) before adding more$"
    ):
        buffer.add(*step)
    buffer.reset()
    assert buffer.pos == 0
    buffer.add(torch.ones(3, 4), *step[1:])
    assert buffer.pos == 1 and bool((buffer.obs[0] == 1).all()) and not buffer.obs[1].any()
    flat = buffer.flat()
    assert flat["obs"].shape == (6, 4) and flat["actions"].shape == (6, 2) and flat["returns"].shape == (6,)


def test_a_replay_buffer_needs_room_and_an_empty_one_cannot_be_sampled():
    for capacity in (0, -3):
        with pytest.raises(ValueError, match=rf"^replay capacity must be positive, got {capacity}$"):
            ReplayBuffer(capacity, 2, (), torch.long, CPU)
    with pytest.raises(RuntimeError, match=r"^cannot sample from an empty replay buffer$"):
        ReplayBuffer(4, 2, (), torch.long, CPU).sample(2)
