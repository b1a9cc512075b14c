"""SAC's, TD3's and DQN's arithmetic against hand computations: each loss on a tiny batch (the Bellman targets
with their noise drawn again from a copy of the agent's generator), the size and direction of the first
optimiser step of every network, the target networks' Polyak step, the exploration noise, the counters, and
that an agent's own generator alone decides its random draws.

Adam's first step moves every parameter by ``-lr * g / (|g| + eps)`` (the bias-corrected moments are ``g``
and ``g^2``), so comparing a parameter's change with the hand-computed gradient checks the loss, its sign,
which parameters it reaches and the learning rate in one assertion."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import pytest
import torch
from torch import nn
from torch.distributions import Normal

from podium.algos.dqn import DQN, DQNConfig
from podium.algos.sac import SAC, SACConfig
from podium.algos.td3 import TD3, TD3Config

CPU = torch.device("cpu")
OBS = gym.spaces.Box(-1.0, 1.0, (3,))
ACT = gym.spaces.Box(-2.0, 2.0, (2,))  # scale 2: env actions are twice the policy units
N_ACTIONS = 3


def _sac(num_envs: int = 4, **hp) -> SAC:
    torch.manual_seed(0)
    agent = SAC(OBS, ACT, SACConfig(**{"hidden_sizes": (16, 16), **hp}), num_envs, CPU)
    agent.generator.manual_seed(0)
    return agent


def _td3(num_envs: int = 4, **hp) -> TD3:
    torch.manual_seed(0)
    agent = TD3(OBS, ACT, TD3Config(**{"hidden_sizes": (16, 16), **hp}), num_envs, CPU)
    agent.generator.manual_seed(0)
    return agent


def _dqn(num_envs: int = 4, **hp) -> DQN:
    torch.manual_seed(0)
    agent = DQN(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(N_ACTIONS), DQNConfig(**hp), num_envs, CPU)
    agent.generator.manual_seed(0)
    return agent


def _batch(obs_dim: int = 3, actions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {
        "obs": torch.randn(6, obs_dim, generator=g),
        "actions": torch.rand(6, 2, generator=g) * 2 - 1 if actions is None else actions,
        "rewards": 2.0 * torch.randn(6, generator=g),
        "next_obs": torch.randn(6, obs_dim, generator=g),
        "terminated": torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
    }


def _twin(agent) -> torch.Generator:
    """A generator in the agent's generator's current state: it repeats the agent's next draws."""
    twin = torch.Generator()
    twin.set_state(agent.generator.get_state())
    return twin


def _adam_first_step(
    before: nn.Module | list[torch.Tensor], after: nn.Module, loss: torch.Tensor, lr: float, only_loss: bool = False
):
    """Assert that ``after``'s parameters are ``before``'s moved by one Adam step on ``loss`` (built from
    ``before``'s parameters): ``-lr * g / (|g| + 1e-8)``. ``only_loss``: the gradients ``after`` holds are
    those of ``loss`` alone (no other loss reached these parameters)."""
    params = list(before.parameters()) if isinstance(before, nn.Module) else before
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    for old, new, grad in zip(params, after.parameters(), grads, strict=True):
        grad = torch.zeros_like(old) if grad is None else grad
        expected = old.detach() - lr * grad / (grad.abs() + 1e-8)
        torch.testing.assert_close(new.detach(), expected, rtol=0, atol=lr * 1e-3)
        if only_loss:
            torch.testing.assert_close(new.grad, grad)


def _lerp(target: nn.Module, online: nn.Module, tau: float) -> list[torch.Tensor]:
    return [
        (1 - tau) * t.detach() + tau * o.detach() for t, o in zip(target.parameters(), online.parameters(), strict=True)
    ]


def _assert_params(module: nn.Module, expected: list[torch.Tensor]) -> None:
    for p, e in zip(module.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), e)


# ----------------------------------------------------------------- SAC
def _squashed(actor: nn.Module, obs: torch.Tensor, noise: torch.Tensor, low: float = -5.0, high: float = 2.0):
    """tanh-Gaussian actions of a SAC actor with the given standard-normal noise, and their log-density
    (``N(u; mean, std)`` by torch's Normal, minus ``log(1 - tanh(u)^2) = -2 log cosh(u)``)."""
    mean, log_std = actor(obs).chunk(2, -1)
    std = log_std.clamp(low, high).exp()
    u = mean + std * noise
    return torch.tanh(u), (Normal(mean, std).log_prob(u) + 2 * _log_cosh(u)).sum(-1)


def _log_cosh(u: torch.Tensor) -> torch.Tensor:
    """``log cosh(u)``, finite where ``tanh(u)`` rounds to +-1."""
    return u.abs() + torch.log1p(torch.exp(-2 * u.abs())) - math.log(2)


def test_sac_update_computes_the_critic_actor_and_temperature_losses_and_steps_each_network_by_hand():
    agent = _sac(gamma=0.9, init_alpha=0.5, tau=0.1, target_entropy=-1.5, actor_lr=1e-3, critic_lr=2e-3, alpha_lr=5e-3)
    batch = _batch()
    actor, critic, critic_target = (copy.deepcopy(m) for m in (agent.actor, agent.critic, agent.critic_target))
    log_alpha = agent.log_alpha.detach().clone().requires_grad_(True)
    twin = _twin(agent)
    stats = agent.update(batch)

    # critics: both regress onto r + gamma (1 - terminated) (min target Q - alpha log pi) of a fresh next action
    with torch.no_grad():
        next_actions, next_logp = _squashed(actor, batch["next_obs"], torch.randn(6, 2, generator=twin))
        next_q = critic_target(torch.cat((batch["next_obs"], next_actions), -1)).squeeze(-1)
        soft = torch.minimum(next_q[0], next_q[1]) - 0.5 * next_logp
        target = batch["rewards"] + 0.9 * (1 - batch["terminated"]) * soft
    q = critic(torch.cat((batch["obs"], batch["actions"]), -1)).squeeze(-1)
    critic_loss = 0.5 * ((q[0] - target).square().mean() + (q[1] - target).square().mean())
    torch.testing.assert_close(stats["loss/critic"], critic_loss.detach())
    torch.testing.assert_close(stats["q"], q.detach().mean())
    _adam_first_step(critic, agent.critic, critic_loss, 2e-3, only_loss=True)  # the actor's loss stops short

    # actor: alpha log pi - min Q of its own action, against the critics as the critic step left them
    new_actions, logp = _squashed(actor, batch["obs"], torch.randn(6, 2, generator=twin))
    q_new = agent.critic(torch.cat((batch["obs"], new_actions), -1)).squeeze(-1)
    actor_loss = (0.5 * logp - torch.minimum(q_new[0], q_new[1])).mean()
    torch.testing.assert_close(stats["loss/actor"], actor_loss.detach())
    _adam_first_step(actor, agent.actor, actor_loss, 1e-3)

    # temperature: -log(alpha) (log pi + target entropy), with log pi held fixed
    alpha_loss = -(log_alpha * (logp.detach() - 1.5)).mean()
    torch.testing.assert_close(stats["loss/alpha"], alpha_loss.detach())
    _adam_first_step([log_alpha], agent.log_alpha_holder, alpha_loss, 5e-3)
    torch.testing.assert_close(stats["alpha"], torch.tensor(0.5))
    torch.testing.assert_close(stats["entropy"], -logp.detach().mean())

    # the target critics take one Polyak step towards the updated critics
    _assert_params(agent.critic_target, _lerp(critic_target, agent.critic, 0.1))


def test_sac_alpha_rises_while_the_entropy_is_below_target_and_falls_above_it_and_stays_fixed_without_autotune():
    for target_entropy, rises in ((10.0, True), (-10.0, False)):
        agent = _sac(target_entropy=target_entropy)
        before = float(agent.log_alpha.detach())
        agent.update(_batch())
        assert (float(agent.log_alpha.detach()) > before) == rises
    agent = _sac(autotune_alpha=False, init_alpha=0.3)
    assert len(agent.actor_optimizer.param_groups) == 1
    for _ in range(2):
        stats = agent.update(_batch())
    assert float(agent.log_alpha.detach().exp()) == pytest.approx(0.3) and float(stats["alpha"]) == pytest.approx(0.3)


def test_sac_steps_the_actor_and_alpha_with_their_own_learning_rates_and_targets_minus_the_action_count():
    agent = _sac(actor_lr=1e-3, critic_lr=2e-3, alpha_lr=5e-3)
    assert [g["lr"] for g in agent.actor_optimizer.param_groups] == [1e-3, 5e-3]
    assert agent.actor_optimizer.param_groups[1]["params"] == [agent.log_alpha]
    assert [g["lr"] for g in agent.critic_optimizer.param_groups] == [2e-3]
    assert agent.target_entropy == -2.0  # -|A|
    assert _sac(target_entropy=0.7).target_entropy == 0.7


@pytest.mark.parametrize(("low", "high"), [(-5.0, 2.0), (-3.0, 1.0)])
@pytest.mark.parametrize("raw", [10.0, -10.0])
def test_sac_clamps_the_actors_log_std_to_its_configured_bounds(low, high, raw):
    agent = _sac(log_std_min=low, log_std_max=high)
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.3, -0.2, raw, raw]))  # mean, then log std
    obs = torch.randn(5, 3)
    twin = _twin(agent)
    actions, logp = agent._sample(obs)
    expected_actions, expected_logp = _squashed(agent.actor, obs, torch.randn(5, 2, generator=twin), low, high)
    torch.testing.assert_close(actions, expected_actions)
    torch.testing.assert_close(logp, expected_logp, rtol=1e-4, atol=1e-4)


def test_sac_acts_with_the_squashed_mean_or_a_squashed_sample_in_the_envs_units():
    agent = _sac()
    obs = torch.randn(5, 3)
    mean = agent.actor(obs)[:, :2].detach()
    torch.testing.assert_close(agent.act(obs), 2 * torch.tanh(mean))
    twin = _twin(agent)
    expected, _ = _squashed(agent.actor, obs, torch.randn(5, 2, generator=twin))
    torch.testing.assert_close(agent.act(obs, deterministic=False), 2 * expected.detach())


def test_sac_gsde_without_matrices_draws_one_for_the_batch_and_keeps_a_floor_under_the_variance():
    agent = _sac(use_sde=True, sde_log_std_init=-12.0)  # latent^2 @ sigma^2 ~ 1e-10: the 1e-6 floor decides
    obs = torch.randn(5, 3)
    twin = _twin(agent)
    actions, logp = agent._sample(obs)
    with torch.no_grad():
        latent = agent.actor[:-1](obs)
        mean = agent.actor[-1](latent)
        sigma = agent.sde_module["log_std"].exp()
        u = mean + latent @ (sigma * torch.randn(sigma.shape, generator=twin))
        std = (latent.square() @ sigma.square() + 1e-6).sqrt()
        expected = (Normal(mean, std).log_prob(u) + 2 * _log_cosh(u)).sum(-1)
    torch.testing.assert_close(actions.detach(), torch.tanh(u))
    torch.testing.assert_close(logp.detach(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("freq", "draws"), [(1, [0, 1, 2, 3]), (2, [0, 2]), (0, [0]), (-1, [0])])
def test_sac_gsde_redraws_every_sde_sample_freq_steps_and_zero_means_only_at_episode_ends(freq, draws):
    agent = _sac(use_sde=True, sde_sample_freq=freq, learning_starts=0)
    obs = torch.rand(4, 3)
    for step in range(4):
        before = agent.noise_matrices.clone()
        agent.explore(obs)
        assert (not torch.equal(agent.noise_matrices, before)) == (step in draws)


def test_sac_gsde_draws_each_sub_envs_matrix_from_n_0_sigma2_and_a_fresh_one_when_its_first_episode_ends():
    agent = _sac(use_sde=True, learning_starts=0)
    with torch.no_grad():
        agent.sde_module["log_std"].copy_(torch.linspace(-1.0, 0.5, 32).reshape(16, 2))
    sigma = agent.sde_module["log_std"].detach().exp()
    twin = _twin(agent)
    agent.explore(torch.rand(4, 3))
    torch.testing.assert_close(agent.noise_matrices, sigma * torch.randn((4, 16, 2), generator=twin))
    agent.episodes_ended(torch.tensor([False, False, True, False]))  # after a single step
    fresh = sigma * torch.randn((4, 16, 2), generator=twin)
    torch.testing.assert_close(agent.noise_matrices[2], fresh[2])


def test_sac_gsde_sizes_sigma_by_the_last_hidden_layer_or_the_observation_without_one():
    assert _sac(use_sde=True, hidden_sizes=(8, 6, 5)).sde_module["log_std"].shape == (5, 2)
    bare = SAC(OBS, ACT, SACConfig(use_sde=True, hidden_sizes=(), learning_starts=0), 2, CPU)
    assert bare.sde_module["log_std"].shape == (3, 2)
    assert bare.explore(torch.rand(2, 3))[0].shape == (2, 2)


# ----------------------------------------------------------------- TD3
def test_td3_update_regresses_both_critics_onto_a_smoothed_target_and_ascends_the_first_critic_by_hand():
    hp = {"actor_lr": 1e-3, "critic_lr": 2e-3, "tau": 0.1, "policy_delay": 1}
    agent = _td3(gamma=0.9, target_noise=0.5, target_noise_clip=0.3, **hp)
    with torch.no_grad():
        agent.actor_target[-2].bias.add_(torch.tensor([1.5, -1.5]))  # target actions near both bounds
    batch = _batch()
    actor, critic = copy.deepcopy(agent.actor), copy.deepcopy(agent.critic)
    actor_target, critic_target = copy.deepcopy(agent.actor_target), copy.deepcopy(agent.critic_target)
    twin = _twin(agent)
    stats = agent.update(batch)

    with torch.no_grad():
        raw = 0.5 * torch.randn(6, 2, generator=twin)
        assert bool((raw.abs() > 0.3).any())  # some smoothing noise is clipped
        next_actions = (actor_target(batch["next_obs"]) + raw.clamp(-0.3, 0.3)).clamp(-1, 1)
        assert bool((next_actions.abs() == 1).any()) and bool((next_actions.abs() < 1).any())
        next_q = critic_target(torch.cat((batch["next_obs"], next_actions), -1)).squeeze(-1)
        target = batch["rewards"] + 0.9 * (1 - batch["terminated"]) * torch.minimum(next_q[0], next_q[1])
    q = critic(torch.cat((batch["obs"], batch["actions"]), -1)).squeeze(-1)
    critic_loss = (q[0] - target).square().mean() + (q[1] - target).square().mean()
    torch.testing.assert_close(stats["loss/critic"], critic_loss.detach())
    torch.testing.assert_close(stats["q"], q.detach().mean())
    _adam_first_step(critic, agent.critic, critic_loss, 2e-3, only_loss=True)  # the actor's loss stops short

    actor_loss = -agent.critic(torch.cat((batch["obs"], actor(batch["obs"])), -1))[0].squeeze(-1).mean()
    torch.testing.assert_close(stats["loss/actor"], actor_loss.detach())
    _adam_first_step(actor, agent.actor, actor_loss, 1e-3)
    _assert_params(agent.critic_target, _lerp(critic_target, agent.critic, 0.1))
    _assert_params(agent.actor_target, _lerp(actor_target, agent.actor, 0.1))


def test_td3_counts_critic_steps_and_reports_the_last_actor_loss_between_actor_steps():
    agent = _td3(policy_delay=2)
    batch = _batch()
    targets = copy.deepcopy(agent.critic_target)
    stats = agent.update(batch)
    assert agent.critic_updates == 1 and float(stats["loss/actor"]) == 0.0
    _assert_params(agent.critic_target, [p.detach() for p in targets.parameters()])  # no actor step: no Polyak
    second = agent.update(batch)
    assert agent.critic_updates == 2 and float(second["loss/actor"]) != 0.0
    third = agent.update(batch)
    assert agent.critic_updates == 3 and float(third["loss/actor"]) == float(second["loss/actor"])
    assert set(third) == {"loss/critic", "loss/actor", "q"}


def test_td3_gaussian_exploration_adds_unclipped_noise_and_keeps_the_action_in_bounds():
    agent = _td3(exploration_noise=2.0, learning_starts=0)
    obs = torch.randn(6, 3)
    twin = _twin(agent)
    actions, extras = agent.explore(obs)
    with torch.no_grad():
        expected = (agent.actor(obs) + 2.0 * torch.randn(6, 2, generator=twin)).clamp(-1, 1)
    assert bool((expected.abs() == 1).any()) and bool((expected.abs() < 1).any())
    torch.testing.assert_close(extras["policy_actions"], expected)
    torch.testing.assert_close(actions, 2 * expected)
    stochastic = agent.act(obs, deterministic=False)
    with torch.no_grad():
        torch.testing.assert_close(
            stochastic, 2 * (agent.actor(obs) + 2.0 * torch.randn(6, 2, generator=twin)).clamp(-1, 1)
        )
        torch.testing.assert_close(agent.act(obs), 2 * agent.actor(obs))


def test_td3_ou_exploration_follows_its_recursion_and_keeps_the_action_in_bounds():
    agent = _td3(noise_type="ou", exploration_noise=30.0, ou_theta=5.0, ou_dt=0.01, learning_starts=0)
    obs = torch.randn(4, 3)
    twin = _twin(agent)
    noise = torch.zeros(4, 2)
    for _ in range(3):
        _actions, extras = agent.explore(obs)
        noise = noise * (1 - 5.0 * 0.01) + 30.0 * 0.1 * torch.randn(4, 2, generator=twin)
        with torch.no_grad():
            expected = (agent.actor(obs) + noise).clamp(-1, 1)
        torch.testing.assert_close(agent.ou_noise, noise)
        torch.testing.assert_close(extras["policy_actions"], expected)
    assert bool((expected.abs() == 1).any()) and bool((expected.abs() < 1).any())


# ----------------------------------------------------------------- DQN
def test_dqn_clips_the_gradient_norm_only_when_asked():
    for max_norm in (1e-3, None):
        agent = _dqn(max_grad_norm=max_norm, loss="mse")
        agent.optimizer = torch.optim.SGD(agent.q_net.parameters(), lr=1.0)  # the change is the gradient
        batch = _batch(4, torch.tensor([0, 1, 2, 1, 0, 2]))
        before = copy.deepcopy(agent.q_net)
        q = before(batch["obs"]).gather(-1, batch["actions"][:, None]).squeeze(-1)
        with torch.no_grad():
            target = batch["rewards"] + 0.99 * (1 - batch["terminated"]) * agent.q_target(batch["next_obs"]).amax(-1)
        grads = torch.autograd.grad((q - target).square().mean(), list(before.parameters()))
        agent.update(batch)
        change = [b.detach() - a.detach() for a, b in zip(agent.q_net.parameters(), before.parameters(), strict=True)]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(c) for c in change]))
        if max_norm is None:
            for c, g in zip(change, grads, strict=True):
                torch.testing.assert_close(c, g)
        else:
            assert float(norm) == pytest.approx(1e-3, rel=1e-3)


def test_dqn_steps_adam_with_its_learning_rate_and_counts_its_updates():
    agent = _dqn(learning_rate=2e-3, loss="mse")
    batch = _batch(4, torch.tensor([0, 1, 2, 1, 0, 2]))
    before = copy.deepcopy(agent.q_net)
    q = before(batch["obs"]).gather(-1, batch["actions"][:, None]).squeeze(-1)
    with torch.no_grad():
        target = batch["rewards"] + 0.99 * (1 - batch["terminated"]) * agent.q_target(batch["next_obs"]).amax(-1)
    stats = agent.update(batch)
    _adam_first_step(before, agent.q_net, (q - target).square().mean(), 2e-3)
    assert agent.updates == 1 and set(stats) == {"loss/td", "q"}
    for _ in range(3):
        agent.update(batch)
    assert agent.updates == 4


def test_dqn_decays_epsilon_over_at_least_one_step():
    for steps in (0, 1):
        agent = _dqn(learning_starts=0, exploration_steps=steps, initial_eps=1.0, final_eps=0.1)
        agent.env_steps = 1
        assert agent.epsilon() == pytest.approx(0.1)


def test_dqn_at_epsilon_one_draws_only_uniform_actions():
    agent = _dqn()
    obs = torch.randn(500, 4)
    twin = _twin(agent)
    actions = agent._epsilon_greedy(obs, 1.0)
    assert torch.equal(actions, torch.randint(0, N_ACTIONS, (500,), generator=twin))
    assert torch.equal(agent.generator.get_state(), twin.get_state())  # nothing else drawn


def test_dqn_acts_greedily_or_with_its_final_epsilon():
    agent = _dqn(final_eps=0.4)
    obs = torch.randn(6_000, 4)
    greedy = agent.act(obs)
    torch.testing.assert_close(greedy, agent.q_net(obs).argmax(-1))
    changed = (agent.act(obs, deterministic=False) != greedy).float().mean().item()
    assert changed == pytest.approx(0.4 * 2 / 3, abs=0.03)  # a random action differs 2 times in 3


# ----------------------------------------------------------------- every off-policy agent
def test_warm_up_actions_cover_every_discrete_action_and_the_whole_box():
    agent = _dqn()
    discrete = agent.random_actions(3_000)
    assert set(discrete.tolist()) == set(range(N_ACTIONS))
    box = _sac().random_actions(3_000)
    assert box.shape == (3_000, 2) and float(box.min()) >= -1 and float(box.max()) <= 1
    assert float(box.min()) < -0.99 and float(box.max()) > 0.99


def test_learning_starts_at_once_with_learning_starts_zero_and_reports_each_algorithms_statistics():
    expected = {
        "sac": {"loss/critic", "loss/actor", "loss/alpha", "alpha", "entropy", "q"},
        "td3": {"loss/critic", "loss/actor", "q"},
        "dqn": {"loss/td", "q", "epsilon"},
    }
    for name, make in (("sac", _sac), ("td3", _td3), ("dqn", _dqn)):
        agent = make(num_envs=1, learning_starts=0, batch_size=4)
        buffer = agent.make_buffer()
        obs = torch.randn(1, agent.obs_dim)
        actions, extras = agent.explore(obs)
        no = torch.zeros(1, dtype=torch.bool)
        agent.record(buffer, obs, actions, extras, torch.ones(1), obs, no, no, obs)
        assert buffer.size == 1
        assert set(agent.learn(buffer, obs)) == expected[name]


@pytest.mark.parametrize(
    ("make", "hp"),
    [
        (_sac, {}),
        (_sac, {"use_sde": True}),
        (_td3, {}),
        (_td3, {"noise_type": "ou"}),
        (_dqn, {"final_eps": 0.5, "exploration_steps": 1}),
    ],
)
def test_the_agents_own_generator_alone_decides_its_exploration_replay_samples_and_updates(make, hp):
    def run(global_seed: int) -> torch.Tensor:
        agent = make(num_envs=2, learning_starts=4, batch_size=8, gradient_steps=2, **hp)
        torch.manual_seed(global_seed)  # the global generator differs between the two runs
        data = torch.Generator().manual_seed(3)
        buffer, seen = agent.make_buffer(), []
        no = torch.zeros(2, dtype=torch.bool)
        for _ in range(6):  # two warm-up steps, then the exploration policy
            obs = torch.rand(2, agent.obs_dim, generator=data)
            actions, extras = agent.explore(obs)
            seen.append(actions.float().flatten())
            agent.record(buffer, obs, actions, extras, torch.rand(2, generator=data), obs, no, no, obs)
        agent.learn(buffer, obs)
        seen.append(agent.act(obs, deterministic=False).float().flatten())
        return torch.cat(seen + [p.detach().flatten() for m in agent.modules().values() for p in m.parameters()])

    assert torch.equal(run(1), run(2))


def test_networks_use_pytorchs_default_init_the_chosen_activation_and_frozen_targets():
    kinds = (nn.ReLU, nn.Tanh, nn.ELU, nn.SiLU)
    for agent in (_sac(activation="elu"), _td3(activation="elu"), _dqn(activation="elu")):
        online = [m for name, m in agent.modules().items() if "target" not in name and name != "log_alpha"]
        for module in online:
            linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
            assert all(bool((m.bias != 0).all()) for m in linears)  # orthogonal_init would zero the biases
            hidden = [m for m in module.modules() if isinstance(m, kinds)]
            if module is getattr(agent, "actor", None) and isinstance(agent, TD3):
                assert isinstance(hidden.pop(), nn.Tanh)  # TD3's output squashing
            assert hidden and all(isinstance(m, nn.ELU) for m in hidden)
        for name, module in agent.modules().items():
            if "target" in name:
                assert not any(p.requires_grad for p in module.parameters())


# ----------------------------------------------------------------- the off-policy H-term
def test_sac_scores_given_actions_with_the_log_density_its_sampler_reports():
    for sde in (False, True):
        agent = _sac(use_sde=sde)
        obs = torch.randn(6, 3)
        actions, logp = agent._sample(obs)
        torch.testing.assert_close(agent.action_log_prob(obs, actions.detach()), logp.detach(), rtol=1e-4, atol=1e-3)


def test_td3_scores_actions_by_a_gaussian_around_its_actor_with_the_exploration_scale():
    for noise, sigma in ((0.3, 0.3), (0.0, 0.1)):
        agent = _td3(exploration_noise=noise)
        obs, actions = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
        expected = Normal(agent.actor(obs), sigma).log_prob(actions).sum(-1)
        torch.testing.assert_close(agent.action_log_prob(obs, actions), expected)


def _with_good(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return {
        **batch,
        "h_obs": torch.randn(6, 3, generator=g),
        "h_actions": torch.rand(6, 2, generator=g) * 1.8 - 0.9,
        "h_weight": torch.tensor([1.0, 0.5, 0.0, 0.25, 1.0, 0.75]),
    }


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_the_h_term_pulls_the_actor_towards_good_actions_by_their_weight_and_is_reported(algo):
    agent = (
        _sac(h_term_lambda=0.5, init_alpha=0.5, actor_lr=1e-3)
        if algo == "sac"
        else _td3(h_term_lambda=0.5, policy_delay=1, actor_lr=1e-3)
    )
    batch = _with_good(_batch())
    actor = copy.deepcopy(agent.actor)
    twin = _twin(agent)
    stats = agent.update(batch)
    if algo == "sac":
        torch.randn(6, 2, generator=twin)  # (the Bellman target's draw)
        new_actions, logp = _squashed(actor, batch["obs"], torch.randn(6, 2, generator=twin))
        q_new = agent.critic(torch.cat((batch["obs"], new_actions), -1)).squeeze(-1)
        base = (0.5 * logp - torch.minimum(q_new[0], q_new[1])).mean()
        mean, log_std = actor(batch["h_obs"]).chunk(2, -1)
        u = torch.atanh(batch["h_actions"])
        h_logp = (Normal(mean, log_std.clamp(-5, 2).exp()).log_prob(u) + 2 * _log_cosh(u)).sum(-1)
    else:
        base = -agent.critic(torch.cat((batch["obs"], actor(batch["obs"])), -1))[0].squeeze(-1).mean()
        h_logp = Normal(actor(batch["h_obs"]), 0.1).log_prob(batch["h_actions"]).sum(-1)
    h_term = (batch["h_weight"] * h_logp.clamp_min(-20)).mean()
    torch.testing.assert_close(stats["loss/h_term"], h_term.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stats["loss/actor"], (base - 0.5 * h_term).detach(), rtol=1e-4, atol=1e-4)
    _adam_first_step(actor, agent.actor, base - 0.5 * h_term, 1e-3)


def test_with_the_h_term_the_replay_buffer_keeps_good_episodes_and_learning_uses_them():
    agent = _sac(num_envs=2, h_term_lambda=0.1, learning_starts=4, batch_size=8, h_term_segment=5)
    buffer = agent.make_buffer()
    assert buffer.good is not None and buffer.good.max_len == 5 and buffer.good.capacity == 50_000
    assert _sac().make_buffer().good is None  # off by default
    no = torch.zeros(2, dtype=torch.bool)
    obs = torch.rand(2, 3)
    for _ in range(4):
        actions, extras = agent.explore(obs)
        agent.record(buffer, obs, actions, extras, torch.ones(2), obs, no, no, obs)
    assert buffer.good.size == 0
    assert agent.learn(buffer, obs)["loss/h_term"] == 0.0  # no good episode yet: the term is 0
    actions, extras = agent.explore(obs)
    agent.record(buffer, obs, actions, extras, torch.ones(2), obs, torch.tensor([True, False]), no, obs)
    assert buffer.good.size == 5 + 5  # sub-env 0's episode ended; sub-env 1's 5-step segment was cut
    assert agent.learn(buffer, obs)["loss/h_term"] != 0.0


def test_the_h_term_memory_is_saved_and_restored_with_the_replay_buffer():
    """A resumed pod or a tournament member's next round keeps the episodes that worked (and the returns the
    keep-or-drop quantile is taken over); a buffer saved without the H-term loads into one with it."""
    agent = _sac(num_envs=2, h_term_lambda=0.1, h_term_segment=3, h_term_capacity=4)
    buffer = agent.make_buffer()
    no, yes = torch.zeros(2, dtype=torch.bool), torch.ones(2, dtype=torch.bool)
    for step in range(7):  # episodes of 1 step, returns 0..6 per sub-env: the ring of 4 wraps
        obs = torch.full((2, 3), float(step))
        actions, extras = agent.explore(obs)
        agent.record(buffer, obs, actions, extras, torch.tensor([float(step), -1.0]), obs, yes, no, obs)
    good = buffer.good
    assert good.size == 4 and good.episodes == 14
    state = buffer.state_dict()
    assert state["good.obs"].shape == (4, 3) and state["good.returns"].shape == (14,)
    restored = _sac(num_envs=2, h_term_lambda=0.1, h_term_segment=3, h_term_capacity=4).make_buffer()
    restored.load_state_dict(state)
    for name in ("obs", "actions", "return_to_go", "returns"):
        torch.testing.assert_close(restored.good.state_dict()[name], good.state_dict()[name])
    assert restored.good.episodes == 14 and restored.size == buffer.size
    # the history of returns goes on where it stopped: the next episode replaces the oldest return
    obs = torch.full((2, 3), 9.0)
    actions, extras = agent.explore(obs)
    for b in (buffer, restored):
        agent.record(b, obs, actions, extras, torch.tensor([9.0, -1.0]), obs, yes, no, obs)
    torch.testing.assert_close(restored.good.state_dict()["returns"], buffer.good.state_dict()["returns"])
    torch.testing.assert_close(restored.good.state_dict()["obs"], buffer.good.state_dict()["obs"])
    # without the H-term on the saving side: the transitions load, the memory stays empty
    plain = _sac(num_envs=2).make_buffer()
    plain.load_state_dict(state)
    assert plain.good is None and plain.size == state["rewards"].shape[0] == 14
    empty = _sac(num_envs=2, h_term_lambda=0.1).make_buffer()
    empty.load_state_dict(_sac(num_envs=2).make_buffer().state_dict())
    assert empty.good is not None and empty.good.size == 0


def test_dqn_refuses_the_h_term_naming_the_algorithms_that_have_it():
    with pytest.raises(ValueError, match=r"h_term_lambda: DQN has no action likelihood.*ppo, sac, td3 and ddpg"):
        DQNConfig(h_term_lambda=0.1)
