"""PPO's arithmetic against hand computations: GAE over a rollout with episode ends in the middle, and the
clipped surrogate, value loss, entropy and the optimiser step of ``PPO.update`` on a tiny batch."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import pytest
import torch
from torch.distributions import Categorical, Normal

from podium.algos.buffers import RolloutBuffer
from podium.algos.ppo import PPO, PPOConfig


def _hand_gae(rewards, values, dones, last_value, gamma, lam):
    """Advantages as the explicit sum ``A_t = sum_k (gamma lam)^k delta_{t+k}``, cut after a step that ended an
    episode, with ``delta_s = r_s + gamma V_{s+1} (0 if step s ended an episode) - V_s`` and ``V_T = last_value``.
    Plain Python floats, no recursion."""
    steps, envs = len(rewards), len(rewards[0])
    advantages = [[0.0] * envs for _ in range(steps)]
    for i in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for s in range(t, steps):
                next_value = last_value[i] if s == steps - 1 else values[s + 1][i]
                delta = rewards[s][i] + (0.0 if dones[s][i] else gamma * next_value) - values[s][i]
                total += weight * delta
                if dones[s][i]:
                    break
                weight *= gamma * lam
            advantages[t][i] = total
    return advantages


@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (1.0, 1.0), (0.9, 0.0)])
def test_gae_matches_a_hand_computation_with_episode_ends_in_the_middle(gamma, lam):
    steps, envs = 7, 3
    gen = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(steps, envs, generator=gen), torch.randn(steps, envs, generator=gen)
    last_value = torch.randn(envs, generator=gen)
    dones = torch.zeros(steps, envs)
    dones[1, 0] = dones[4, 0] = 1.0  # env 0: two episodes end in the middle
    dones[2, 1] = 1.0  # env 1: one
    dones[6, 2] = 1.0  # env 2: only at the last step (no bootstrap from last_value)
    buffer = RolloutBuffer(steps, envs, 1, (), torch.long, torch.device("cpu"))
    for t in range(steps):
        zeros = torch.zeros(envs)
        buffer.add(torch.zeros(envs, 1), torch.zeros(envs, dtype=torch.long), zeros, values[t], rewards[t], dones[t])
    buffer.compute_gae(last_value, gamma, lam)
    expected = torch.tensor(
        _hand_gae(rewards.tolist(), values.tolist(), dones.tolist(), last_value.tolist(), gamma, lam)
    )
    torch.testing.assert_close(buffer.advantages, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(buffer.returns, expected + values, rtol=1e-5, atol=1e-5)
    if (gamma, lam) == (1.0, 1.0):  # Monte Carlo: the rewards to the episode's end (+ bootstrap) minus V
        torch.testing.assert_close(buffer.returns[2, 0], rewards[2:5, 0].sum())
        torch.testing.assert_close(buffer.returns[3, 1], rewards[3:, 1].sum() + last_value[1])


@pytest.mark.parametrize("clip_vloss", [False, True])
@pytest.mark.parametrize("discrete", [False, True])
def test_ppo_update_computes_the_clipped_surrogate_value_loss_and_entropy_and_steps_down_their_gradient(
    discrete, clip_vloss
):
    """Losses from the same network outputs with explicit formulas (torch.distributions for the log-densities);
    the parameters then move exactly as one Adam step on ``pg - ent_coef * H + vf_coef * V`` (after gradient
    clipping) moves them."""
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,))
    act_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-2.0, 2.0, (2,))
    config = PPOConfig(
        clip_coef=0.2, clip_vloss=clip_vloss, ent_coef=0.05, vf_coef=0.5, init_log_std=-0.3, learning_rate=0.01
    )
    agent = PPO(obs_space, act_space, config, num_envs=1, device=torch.device("cpu"))
    reference = copy.deepcopy(agent)
    batch_size, eps = 12, config.clip_coef
    obs = torch.randn(batch_size, 3)
    out = reference.actor(obs)
    dist = Categorical(logits=out) if discrete else Normal(out, reference.log_std.exp())
    actions = dist.sample()
    logp = dist.log_prob(actions) if discrete else dist.log_prob(actions).sum(-1)
    entropy = dist.entropy() if discrete else dist.entropy().sum(-1)
    # old log-probabilities chosen so that the ratios spread over both sides of the clip range
    ratios = torch.linspace(0.55, 1.65, batch_size)[torch.randperm(batch_size)]
    value = reference.critic(obs).squeeze(-1)
    batch = {
        "obs": obs,
        "actions": actions.detach(),
        "logprobs": (logp - ratios.log()).detach(),
        "values": (value + 0.4 * torch.randn(batch_size)).detach(),
        "advantages": 2.0 * torch.randn(batch_size) + 0.5,
        "returns": (value + torch.randn(batch_size)).detach(),
    }
    # the hand computation, one sample at a time
    adv = batch["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (logp - batch["logprobs"]).exp()
    surrogate, value_terms = [], []
    for i in range(batch_size):
        clipped = min(max(ratio[i], 1 - eps), 1 + eps)
        surrogate.append(torch.minimum(ratio[i] * adv[i], clipped * adv[i]))
        error = (value[i] - batch["returns"][i]) ** 2
        if clip_vloss:
            v_clipped = batch["values"][i] + torch.clamp(value[i] - batch["values"][i], -eps, eps)
            error = torch.maximum(error, (v_clipped - batch["returns"][i]) ** 2)
        value_terms.append(error)
    pg_loss = -torch.stack(surrogate).mean()
    v_loss = 0.5 * torch.stack(value_terms).mean()
    loss = pg_loss - config.ent_coef * entropy.mean() + config.vf_coef * v_loss
    params = reference.optimizer.param_groups[0]["params"]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
    before = [p.detach().clone() for p in agent.optimizer.param_groups[0]["params"]]

    stats = agent.update(batch)

    torch.testing.assert_close(stats["loss/policy"], pg_loss.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats["loss/value"], v_loss.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats["loss/entropy"], entropy.mean().detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats["approx_kl"], ((ratio - 1) - ratio.log()).mean().detach(), rtol=1e-4, atol=1e-6)
    assert float(stats["clipfrac"]) == pytest.approx(float(((ratios - 1).abs() > eps).float().mean()))
    assert 0 < float(stats["clipfrac"]) < 1  # both sides of the clip were exercised
    # one Adam step (first step: m_hat = g, v_hat = g^2) on the clipped gradient
    norm = math.sqrt(sum(float(g.square().sum()) for g in grads))
    scale = min(1.0, config.max_grad_norm / (norm + 1e-6))
    after = agent.optimizer.param_groups[0]["params"]
    for p0, p1, g in zip(before, after, grads, strict=True):
        g = g * scale
        step = -config.learning_rate * g / (g.abs() + 1e-5)
        torch.testing.assert_close(p1.detach() - p0, step, rtol=1e-3, atol=1e-6)


def test_the_h_term_weights_good_transitions_by_return_and_pulls_the_policy_towards_their_actions():
    torch.manual_seed(0)
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(3)
    config = PPOConfig(h_term_lambda=1.0, h_term_drop=0.5, ent_coef=0.0, vf_coef=0.0, learning_rate=0.05)
    config = config.model_copy(update={"num_steps": 4, "num_minibatches": 1, "update_epochs": 1, "norm_adv": True})
    agent = PPO(obs_space, act_space, config, num_envs=1, device=torch.device("cpu"))
    # the learner's weights: 0 below the median return-to-go, then (R - floor) / (max - floor)
    buffer = agent.make_buffer()
    obs = torch.zeros(1, 3)
    for t, reward in enumerate([0.0, 1.0, 2.0, 3.0]):
        buffer.add(obs, torch.tensor([t % 3]), torch.zeros(1), torch.zeros(1), torch.tensor([reward]), torch.ones(1))
    seen = {}
    original = agent.update
    agent.update = lambda batch: seen.update(batch) or original(batch)  # type: ignore[method-assign]
    agent.learn(buffer, obs)
    order = torch.argsort(seen["returns"])
    assert seen["returns"][order].tolist() == [0.0, 1.0, 2.0, 3.0]  # each step ended an episode: R = r
    assert seen["h_weight"][order].tolist() == pytest.approx([0.0, 0.0, 1 / 3, 1.0])  # floor: the median, 1.5
    # with zero advantages only the H-term moves the policy: towards the good transition's action
    batch = {
        "obs": torch.zeros(2, 3),
        "actions": torch.tensor([2, 0]),
        "logprobs": torch.zeros(2),
        "values": torch.zeros(2),
        "advantages": torch.zeros(2),
        "returns": torch.zeros(2),
        "h_weight": torch.tensor([1.0, 0.0]),
    }
    before = torch.softmax(agent.actor(torch.zeros(1, 3)), -1)[0, 2].item()
    first = agent.update(batch)
    for _ in range(19):
        agent.update(batch)
    after = torch.softmax(agent.actor(torch.zeros(1, 3)), -1)[0, 2].item()
    assert after > before + 0.2
    assert float(first["loss/h_term"]) == pytest.approx(math.log(before) / 2, rel=1e-4)  # mean of (log p, 0)

    off = PPO(obs_space, act_space, PPOConfig(), num_envs=1, device=torch.device("cpu"))
    buffer = off.make_buffer()
    for _ in range(off.config.num_steps):
        buffer.add(obs, torch.tensor([0]), torch.zeros(1), torch.zeros(1), torch.ones(1), torch.zeros(1))
    seen.clear()
    original_off = off.update
    off.update = lambda batch: seen.update(batch) or original_off(batch)  # type: ignore[method-assign]
    off.learn(buffer, obs)
    assert "h_weight" not in seen  # off by default


def _sde_agent(num_envs: int = 6, **hp) -> PPO:
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-2.0, 2.0, (2,))
    config = PPOConfig(use_sde=True, num_steps=4, hidden_sizes=(8, 5), **hp)
    agent = PPO(obs_space, act_space, config, num_envs, torch.device("cpu"))
    agent.generator.manual_seed(0)
    with torch.no_grad():
        agent.sde_module["log_std"].copy_(torch.linspace(-1.0, 0.5, 10).reshape(5, 2))
    return agent


def test_gsde_acts_with_latent_times_a_noise_matrix_held_for_a_rollout_and_scores_its_marginal_gaussian():
    agent = _sde_agent()
    obs = torch.rand(6, 3) * 2 - 1
    first = agent.explore(obs)[1]
    matrices = agent.noise_matrices.clone()
    assert matrices.shape == (6, 5, 2)
    with torch.no_grad():
        latent = agent.actor[:-1](obs)
        mean = agent.actor[-1](latent)
    # the action in policy units is mean + latent @ E, with this sub-env's own matrix E
    torch.testing.assert_close(first["policy_actions"], mean + torch.einsum("bl,bla->ba", latent, matrices))
    # its log-probability is that of the Gaussian over E: variance latent^2 @ sigma^2 per action
    sigma2 = (2 * agent.sde_module["log_std"]).exp()
    std = (latent.square() @ sigma2 + 1e-6).sqrt()
    expected = Normal(mean, std).log_prob(first["policy_actions"]).sum(-1)
    torch.testing.assert_close(first["logprob"], expected)
    # the same matrices for the rest of the rollout (num_steps = 4 explore calls), then a new draw
    for _ in range(3):
        agent.explore(obs)
        assert torch.equal(agent.noise_matrices, matrices)
    agent.explore(obs)
    assert not torch.equal(agent.noise_matrices, matrices)


def test_gsde_sample_freq_redraws_the_matrices_every_k_steps():
    agent = _sde_agent(sde_sample_freq=2)
    obs = torch.zeros(6, 3)
    seen = []
    for _ in range(6):
        agent.explore(obs)
        seen.append(agent.noise_matrices.clone())
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[2], seen[3]) and torch.equal(seen[4], seen[5])
    assert not torch.equal(seen[1], seen[2]) and not torch.equal(seen[3], seen[4])


def test_gsde_sigma_is_trained_and_saved():
    agent = _sde_agent()
    obs = torch.rand(6, 3)
    _, extras = agent.explore(obs)
    batch = {
        "obs": obs,
        "actions": extras["policy_actions"],
        "logprobs": extras["logprob"],
        "values": extras["value"],
        "advantages": torch.linspace(-1.0, 1.0, 6),
        "returns": torch.zeros(6),
    }
    before = agent.sde_module["log_std"].detach().clone()
    agent.update(batch)
    assert not torch.equal(agent.sde_module["log_std"], before)  # the surrogate's gradient reached sigma
    assert agent.unsaved_parameters() == []
    state = agent.state_dict()
    assert torch.equal(state["module.sde_log_std"]["log_std"], agent.sde_module["log_std"])
    fresh = _sde_agent()
    fresh.load_state_dict(copy.deepcopy(state))
    with torch.no_grad():
        assert torch.equal(fresh._sde_mean_log_std(obs)[1], agent._sde_mean_log_std(obs)[1])
    plain = PPO(agent.observation_space, agent.action_space, PPOConfig(hidden_sizes=(8, 5)), 6, torch.device("cpu"))
    with pytest.raises(ValueError, match="sde_log_std"):  # a gSDE checkpoint is not a plain PPO's
        plain.load_state_dict(state)
