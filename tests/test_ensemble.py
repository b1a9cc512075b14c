"""``podium.load_ensemble``: several trained policies acting as one (mean action, or majority vote)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import podium

FAST = {"eval_every": 256, "eval_episodes": 2, "tensorboard": False, "progress": False}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    for name, env, algo, seed in [
        ("p0", "Pendulum-v1", "ppo", 0),
        ("p1", "Pendulum-v1", "sac", 1),
        ("p2", "Pendulum-v1", "td3", 2),
        ("c0", "CartPole-v1", "ppo", 0),
        ("c1", "CartPole-v1", "dqn", 1),
        ("c2", "CartPole-v1", "ppo", 2),
    ]:
        hparams = {"learning_starts": 64} if algo != "ppo" else {}
        podium.train(env, algo, steps=512, seed=seed, hparams=hparams, run_dir=root / name, **FAST)
    return root


def test_continuous_members_act_as_their_mean_action(runs):
    ensemble = podium.load_ensemble([runs / "p0", runs / "p1", runs / "p2"])
    assert len(ensemble) == 3
    obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)
    members = np.stack([m.act(obs) for m in ensemble.members])  # [K, B, A]
    assert np.abs(members[0] - members[1]).max() > 1e-3  # different policies, so the mean is not trivial
    np.testing.assert_allclose(ensemble.act(obs), members.mean(0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ensemble.act(obs[0]), members.mean(0)[0], rtol=1e-6, atol=1e-6)  # one observation
    out = ensemble.act(torch.as_tensor(obs))  # torch in, torch out
    assert isinstance(out, torch.Tensor) and torch.allclose(out, torch.as_tensor(members.mean(0)), atol=1e-6)
    assert ensemble.members[0].act(obs).shape == ensemble.act(obs).shape == (16, 1)


def test_discrete_members_vote_and_a_tie_goes_to_the_first(runs):
    ensemble = podium.load_ensemble([runs / "c0", runs / "c1", runs / "c2"])
    obs = np.random.default_rng(1).normal(size=(256, 4)).astype(np.float32)
    votes = np.stack([m.act(obs) for m in ensemble.members])  # [3, 256] ints
    majority = np.array([np.bincount(v, minlength=2).argmax() for v in votes.T])  # 3 voters, 2 actions: no tie
    np.testing.assert_array_equal(ensemble.act(obs), majority)
    assert isinstance(ensemble.act(obs[0]), int)

    pair = podium.load_ensemble([runs / "c1", runs / "c0"])  # two voters: a tie wherever they disagree
    first, second = pair.members[0].act(obs), pair.members[1].act(obs)
    assert (first != second).any()  # the tie-break is exercised
    np.testing.assert_array_equal(pair.act(obs), first)


def test_members_of_different_envs_are_refused(runs):
    with pytest.raises(ValueError, match=r"same env.*'CartPole-v1'.*'Pendulum-v1'"):
        podium.load_ensemble([runs / "p0", runs / "c0"])
    with pytest.raises(ValueError, match="at least one policy"):
        podium.load_ensemble([])
    for one in (str(runs / "p0"), runs / "p0"):  # a string is a sequence too: of one-letter "paths"
        with pytest.raises(TypeError, match=r"takes a list of checkpoints .* or podium.load\("):
            podium.load_ensemble(one)


def test_a_policy_is_evaluated_only_on_an_env_with_its_spaces(runs):
    policy = podium.load(runs / "p0")
    assert policy.evaluate(episodes=2, env="Pendulum-v1") == policy.evaluate(episodes=2)
    with pytest.raises(ValueError, match=r"CartPole-v1 has observations of size 4 and 2 discrete actions, but"):
        policy.evaluate(episodes=2, env="CartPole-v1")  # it failed in a matmul
    with pytest.raises(ValueError, match=r"MountainCarContinuous-v0 has observations of size 2 .* size 3"):
        policy.evaluate(episodes=2, env="MountainCarContinuous-v0")


def test_members_of_one_env_id_with_other_spaces_are_refused(tmp_path):
    """FrozenLake 4x4 and 8x8 share the id: the ensemble was built, then refused valid observations with a
    misleading message and failed deep inside the ONNX export."""
    for name, kwargs in (("small", {}), ("large", {"map_name": "8x8"})):
        podium.train("FrozenLake-v1", "dqn", steps=256, env_kwargs=kwargs, run_dir=tmp_path / name, **FAST)
    with pytest.raises(ValueError, match=r"same env: .*observation_space .*\(the same id with other env_kwargs\?\)"):
        podium.load_ensemble([tmp_path / "small", tmp_path / "large"])
