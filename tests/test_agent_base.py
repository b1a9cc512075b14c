"""What every agent inherits from ``podium.algos.base``: the space checks and their messages, action scaling,
the checkpoint contract's errors, optimiser hyperparameters kept from the agent's own config on load, and the
algorithm registry."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from podium.algos import algo_names, get_algo
from podium.algos.dqn import DQN, DQNConfig
from podium.algos.ppo import PPO, PPOConfig
from podium.algos.sac import SAC, SACConfig

CPU = torch.device("cpu")
OBS = gym.spaces.Box(-1.0, 1.0, (3,))


def test_a_non_flat_observation_space_is_refused_with_the_wrapper_that_fixes_it():
    flatten = r"; flatten it \(gymnasium\.wrappers\.FlattenObservation\) first$"
    with pytest.raises(ValueError, match=r"ppo needs a flat Box observation space, got .*" + flatten):
        PPO(gym.spaces.Box(-1.0, 1.0, (2, 3)), gym.spaces.Discrete(2), PPOConfig(), 2, CPU)
    with pytest.raises(ValueError, match="flat Box observation space"):
        PPO(gym.spaces.Discrete(4), gym.spaces.Discrete(2), PPOConfig(), 2, CPU)


def test_an_unsupported_action_space_names_the_algorithms_that_can_handle_it():
    with pytest.raises(ValueError, match=r"sac cannot handle Discrete action spaces .*; algorithms that can: ") as info:
        SAC(OBS, gym.spaces.Discrete(2), SACConfig(), 2, CPU)
    assert info.value.args[0].endswith("algorithms that can: d3qn, dqn, ppo")
    with pytest.raises(ValueError, match=r"dqn cannot handle Box \(continuous\) action spaces") as info:
        DQN(OBS, gym.spaces.Box(-1.0, 1.0, (2,)), DQNConfig(), 2, CPU)
    assert info.value.args[0].endswith("algorithms that can: ddpg, ppo, sac, td3")


@pytest.mark.parametrize("space", [gym.spaces.Box(-1.0, 1.0, (2, 2)), gym.spaces.MultiDiscrete([2, 3])])
def test_an_action_space_that_is_neither_discrete_nor_a_flat_box_is_refused_at_once(space):
    """A Box(2, 2) became two outputs and failed at the env's first step with a shape error (one env: a
    [2, 2] batch of actions went through)."""
    for algo, config in ((SAC, SACConfig()), (PPO, PPOConfig())):
        with pytest.raises(ValueError, match=r"needs a Discrete or a flat Box action space, got .*ActionWrapper"):
            algo(OBS, space, config, 1, CPU)


@pytest.mark.parametrize("bound", [(-np.inf, 1.0), (-1.0, np.inf)])
def test_an_unbounded_box_action_space_is_refused(bound):
    low, high = np.array([-1.0, bound[0]], dtype=np.float32), np.array([1.0, bound[1]], dtype=np.float32)
    with pytest.raises(ValueError, match="sac needs a bounded Box action space"):
        SAC(OBS, gym.spaces.Box(low, high), SACConfig(), 2, CPU)


def test_actions_scale_from_the_unit_box_to_asymmetric_bounds_and_back():
    space = gym.spaces.Box(np.array([-1.0, 0.0], dtype=np.float32), np.array([3.0, 10.0], dtype=np.float32))
    agent = SAC(OBS, space, SACConfig(), 2, CPU)
    assert agent.obs_dim == 3 and agent.action_dim == 2 and not agent.discrete and agent.num_envs == 2
    assert agent.budget_steps is None and agent.device == CPU
    unit = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.5]])
    env = agent.scale_action(unit)
    torch.testing.assert_close(env, torch.tensor([[-1.0, 0.0], [3.0, 10.0], [1.0, 7.5]]))
    torch.testing.assert_close(agent.unscale_action(env), unit)
    wide = SAC(OBS, gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float64), SACConfig(), 2, CPU)
    assert wide.scale_action(unit).dtype == torch.float32  # a float64 space still gets float32 actions
    dqn = DQN(OBS, gym.spaces.Discrete(5), DQNConfig(), 2, CPU)
    assert dqn.discrete and dqn.action_dim == 5 and not hasattr(dqn, "action_scale")


def _ppo(**hp) -> PPO:
    return PPO(OBS, gym.spaces.Box(-1.0, 1.0, (2,)), PPOConfig(**hp), 2, CPU)


def test_a_checkpoint_with_modules_this_agent_lacks_is_refused_naming_them_and_the_likely_cause():
    state = _ppo(use_sde=True).state_dict()
    state["module.extra"] = {}
    with pytest.raises(ValueError) as info:
        _ppo(use_sde=False).load_state_dict(state)
    assert info.value.args[0] == (
        "checkpoint has module.extra, module.sde_log_std, which this ppo agent does not have: it was trained with "
        "other options (e.g. use_sde); load it with the hyperparameters it was trained with"
    )


def test_a_checkpoint_from_before_a_module_was_saved_warns_at_the_callers_line_and_loads_everything_else():
    old = _ppo(use_sde=False)
    with torch.no_grad():
        old.log_std.fill_(-1.0)
    state = old.state_dict()
    del state["module.log_std"]  # a checkpoint from before log_std was saved (PPO's added_modules)
    new = _ppo(use_sde=False)
    predates = r"this checkpoint predates ppo's saved 'log_std'; .* \(init_log_std\)"
    with pytest.warns(UserWarning, match=predates) as rec:
        new.load_state_dict(state)
    assert not rec[0].filename.endswith(
        os.path.join("algos", "base.py")
    )  # attributed to the caller, not to the agent's own code
    assert not torch.equal(new.log_std.detach(), old.log_std.detach())  # kept its initial value
    for name in ("actor", "critic", "obs_rms"):  # the modules after it still load
        pairs = zip(new.modules()[name].state_dict().values(), old.modules()[name].state_dict().values(), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs), name


def test_a_checkpoint_missing_a_part_or_with_a_part_that_does_not_fit_is_refused_by_name():
    state = _ppo(use_sde=False).state_dict()
    del state["optim.optimizer"]
    with pytest.raises(
        ValueError, match=r"checkpoint has no 'optim\.optimizer' for ppo; is it from another algorithm\?"
    ):
        _ppo(use_sde=False).load_state_dict(state)
    wide = PPO(OBS, gym.spaces.Box(-1.0, 1.0, (2,)), PPOConfig(use_sde=False, hidden_sizes=(7,)), 2, CPU)
    with pytest.raises(ValueError, match=r"checkpoint part 'module\.actor' does not fit this ppo agent: "):
        _ppo(use_sde=False).load_state_dict(wide.state_dict())


def test_loading_keeps_the_agents_own_optimiser_hyperparameters_and_restores_the_optimiser_state():
    parent = SAC(OBS, gym.spaces.Box(-1.0, 1.0, (2,)), SACConfig(actor_lr=1e-3, alpha_lr=2e-3, critic_lr=3e-3), 2, CPU)
    parent.update(
        {
            "obs": torch.randn(8, 3),
            "actions": torch.rand(8, 2) * 2 - 1,
            "rewards": torch.randn(8),
            "next_obs": torch.randn(8, 3),
            "terminated": torch.zeros(8),
        }
    )
    child = SAC(OBS, gym.spaces.Box(-1.0, 1.0, (2,)), SACConfig(actor_lr=5e-4, alpha_lr=6e-4, critic_lr=7e-4), 2, CPU)
    child.load_state_dict(parent.state_dict())
    assert [g["lr"] for g in child.actor_optimizer.param_groups] == [5e-4, 6e-4]
    assert [g["lr"] for g in child.critic_optimizer.param_groups] == [7e-4]
    moments = child.critic_optimizer.state_dict()["state"][0]["exp_avg"]
    torch.testing.assert_close(moments, parent.critic_optimizer.state_dict()["state"][0]["exp_avg"])


def test_load_modules_takes_the_networks_it_finds_and_needs_nothing_else():
    source, target = _ppo(use_sde=False), _ppo(use_sde=False)
    with torch.no_grad():
        source.log_std.fill_(-2.0)
    state = source.state_dict()
    del state["module.critic"], state["optim.optimizer"]  # a part may be missing: the rest still loads
    critic = [p.clone() for p in target.critic.parameters()]
    target.load_modules(state)
    torch.testing.assert_close(target.log_std.detach(), torch.full((2,), -2.0))
    assert all(torch.equal(a, b) for a, b in zip(critic, target.critic.parameters(), strict=True))


def test_the_base_agent_refuses_extra_state_it_does_not_know():
    agent = _ppo()
    agent.load_extra_state({})
    with pytest.raises(ValueError, match=r"checkpoint has extra state \['a', 'b'\] that ppo does not know"):
        agent.load_extra_state({"b": 1, "a": 2})


def test_the_registry_lists_every_builtin_finds_names_in_any_case_and_suggests_close_ones():
    assert algo_names() == ["d3qn", "ddpg", "dqn", "ppo", "sac", "td3"]
    assert get_algo("SAC") is SAC and get_algo("Ppo") is PPO
    with pytest.raises(KeyError, match=r"unknown algorithm 'sacc'\. Did you mean 'sac'\? Available: d3qn, ddpg, dqn"):
        get_algo("sacc")
    with pytest.raises(KeyError) as info:
        get_algo("zzzz")
    assert info.value.args[0] == "unknown algorithm 'zzzz'. Available: d3qn, ddpg, dqn, ppo, sac, td3"
    with pytest.raises(KeyError, match=r"Did you mean 'dqn', 'd3qn', 'ddpg'\? "):  # up to three, from 0.5 alike
        get_algo("ddqn")
    with pytest.raises(KeyError, match=r"Did you mean 'd3qn', 'td3', 'dqn'\? "):
        get_algo("dd3q")
