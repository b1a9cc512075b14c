"""PPO's arithmetic against hand computations: GAE over a rollout with episode ends in the middle, and the
clipped surrogate, value loss, entropy and the optimiser step of ``PPO.update`` on a tiny batch."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
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


def test_gsde_stochastic_act_draws_its_own_noise_whatever_the_batch_size():
    """A stochastic evaluation of as many episodes as the pod has sub-envs used to take the worker's matrices
    (all zeros in an evaluator's agent, which never explores), so its "stochastic" actions were deterministic."""
    agent = _sde_agent()  # 6 sub-envs, no rollout yet
    obs = torch.rand(6, 3) * 2 - 1
    for batch in (obs, obs[:5]):
        assert not torch.allclose(agent.act(batch, deterministic=False), agent.act(batch, deterministic=True))
    agent.explore(obs)  # the worker's matrices are drawn now; acting must not use them
    matrices = agent.noise_matrices.clone()
    with torch.no_grad():
        latent = agent.actor[:-1](agent._norm(obs))
        held = agent._to_env(agent.actor[-1](latent) + torch.einsum("bl,bla->ba", latent, matrices))
    assert not torch.allclose(agent.act(obs, deterministic=False), held)
    assert torch.equal(agent.noise_matrices, matrices)


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


# ----------------------------------------------------------------- sampling, bounds and bookkeeping
def _box_agent(**hp) -> PPO:
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(np.array([-1.0, 0.0]), np.array([3.0, 1.0]))
    agent = PPO(obs_space, act_space, PPOConfig(**hp), 4, torch.device("cpu"))
    agent.generator.manual_seed(0)
    return agent


def test_the_actor_and_critic_heads_are_orthogonal_with_gains_0_01_and_1_and_use_the_chosen_activation():
    agent = _box_agent(activation="relu", hidden_sizes=(8, 6))
    torch.testing.assert_close(torch.linalg.svdvals(agent.actor[-1].weight), torch.full((2,), 0.01))
    torch.testing.assert_close(torch.linalg.svdvals(agent.critic[-1].weight), torch.ones(1))
    assert isinstance(agent.actor[1], torch.nn.ReLU) and isinstance(agent.critic[1], torch.nn.ReLU)


def _rl_zoo_ppo_presets() -> dict[str, dict]:
    """The PPO presets translated from rl-zoo (the MuJoCo ids): env -> hparams."""
    from podium.algos.presets import PRESETS

    return {env: p.hparams for (algo, env), p in PRESETS.items() if algo == "ppo" and env.endswith("-v5")}


def test_ortho_init_false_keeps_pytorchs_default_init_as_sb3s_ortho_init_false():
    """rl-zoo's tuned MuJoCo entries set ``ortho_init=False``: the heads then are not orthogonal with gains
    0.01 and 1, and no bias is zeroed (orthogonal init zeroes them all)."""
    torch.manual_seed(0)
    agent = _box_agent(hidden_sizes=(8, 6), ortho_init=False)
    linears = [m for net in (agent.actor, agent.critic) for m in net if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 6 and all(bool((m.bias != 0).all()) for m in linears)
    assert torch.linalg.svdvals(agent.actor[-1].weight).max() > 0.05  # far from the 0.01 of the orthogonal head
    ortho = {env: hp.get("ortho_init", True) for env, hp in _rl_zoo_ppo_presets().items()}
    assert PPOConfig().ortho_init and ortho == {
        "HalfCheetah-v5": False, "Hopper-v5": False, "Ant-v5": True, "Humanoid-v5": False  # as rl-zoo's entries
    }  # fmt: skip


def test_the_value_loss_is_half_sb3s_so_the_rl_zoo_presets_carry_twice_its_vf_coef():
    """SB3's value loss is the mean squared error; podium's (CleanRL's) is half of it. A preset translated
    from rl-zoo therefore carries twice rl-zoo's ``vf_coef`` (SB3's default 0.5 for Ant's entry)."""
    agent = _box_agent()
    batch = {
        "obs": torch.rand(16, 3),
        "actions": torch.rand(16, 2),
        "logprobs": torch.zeros(16),
        "advantages": torch.randn(16),
        "values": torch.zeros(16),
        "returns": torch.randn(16),
    }
    with torch.no_grad():
        sb3 = torch.nn.functional.mse_loss(batch["returns"], agent.critic(batch["obs"]).squeeze(-1))
    torch.testing.assert_close(agent.update(batch)["loss/value"], sb3 / 2)
    coefs = {env: hp["vf_coef"] for env, hp in _rl_zoo_ppo_presets().items()}
    rl_zoo = {"HalfCheetah-v5": 0.58096, "Hopper-v5": 0.835671, "Ant-v5": 0.5, "Humanoid-v5": 0.431892}
    assert coefs == {env: 2 * value for env, value in rl_zoo.items()}


def test_discrete_sampling_follows_the_softmax_and_reports_its_log_probability():
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(3)
    agent = PPO(obs_space, act_space, PPOConfig(), 20_000, torch.device("cpu"))
    agent.generator.manual_seed(0)
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
    probs = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), -1)
    actions, extras = agent.explore(torch.zeros(20_000, 3))
    assert actions.shape == (20_000,) and actions.dtype == torch.long
    freq = torch.bincount(actions, minlength=3).float() / 20_000
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)
    torch.testing.assert_close(extras["logprob"], probs.log()[actions])
    assert agent.make_buffer().actions.dtype == torch.long


def test_continuous_sampling_is_gaussian_around_the_mean_with_its_log_density_and_clipped_to_the_bounds():
    agent = _box_agent(init_log_std=-0.5)
    obs = torch.rand(4, 3)
    _, extras = agent.explore(obs)
    with torch.no_grad():
        mean = agent.actor(obs)
    expected = Normal(mean, agent.log_std.exp().detach()).log_prob(extras["policy_actions"]).sum(-1)
    torch.testing.assert_close(extras["logprob"], expected)
    many = PPO(agent.observation_space, agent.action_space, PPOConfig(init_log_std=-0.5), 20_000, agent.device)
    many.generator.manual_seed(0)
    with torch.no_grad():
        for p in many.actor.parameters():
            p.zero_()
    sampled = many.explore(torch.zeros(20_000, 3))[1]["policy_actions"]
    torch.testing.assert_close(sampled.mean(0), torch.zeros(2), atol=0.02, rtol=0)
    torch.testing.assert_close(sampled.std(0), torch.full((2,), math.exp(-0.5)), atol=0.02, rtol=0)
    # policy units -> the env's asymmetric bounds [-1, 3] x [0, 1], clipped there
    units = torch.tensor([[-10.0, 10.0], [10.0, -10.0], [0.5, -0.5]])
    torch.testing.assert_close(agent._to_env(units), torch.tensor([[-1.0, 1.0], [3.0, 0.0], [2.0, 0.25]]))


def test_the_agents_own_generator_alone_decides_its_samples_and_minibatches():
    def run(global_seed: int, discrete: bool, sde: bool = False):
        torch.manual_seed(1)
        space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (2,))
        config = PPOConfig(num_steps=4, use_sde=sde, hidden_sizes=(8,))
        agent = PPO(gym.spaces.Box(-1.0, 1.0, (3,)), space, config, 2, torch.device("cpu"))
        agent.generator.manual_seed(0)
        torch.manual_seed(global_seed)  # the global generator differs between the two runs
        data = torch.Generator().manual_seed(3)
        buffer, obs, seen = agent.make_buffer(), torch.rand(2, 3, generator=data), []
        no = torch.zeros(2, dtype=torch.bool)
        for _ in range(4):
            actions, extras = agent.explore(obs)
            seen.append(actions.float())
            agent.record(buffer, obs, actions, extras, torch.rand(2, generator=data), obs, no, no, obs)
        if sde:
            seen.append(agent.act(torch.rand(3, 3, generator=data), deterministic=False))
        agent.learn(buffer, obs)
        return torch.cat([s.flatten() for s in seen] + [p.detach().flatten() for p in agent.actor.parameters()])

    for discrete, sde in ((True, False), (False, False), (False, True)):
        assert torch.equal(run(1, discrete, sde), run(2, discrete, sde))


def test_gsde_sizes_its_sigma_by_the_last_hidden_layer_or_the_observation_without_one():
    deep = PPOConfig(use_sde=True, hidden_sizes=(8, 6, 5))
    agent = PPO(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-1.0, 1.0, (2,)), deep, 2, torch.device("cpu"))
    assert agent.sde_module["log_std"].shape == (5, 2)
    bare = PPO(
        gym.spaces.Box(-1.0, 1.0, (3,)),
        gym.spaces.Box(-1.0, 1.0, (2,)),
        PPOConfig(use_sde=True, hidden_sizes=()),
        2,
        torch.device("cpu"),
    )
    assert bare.sde_module["log_std"].shape == (3, 2)
    assert bare.explore(torch.rand(2, 3))[0].shape == (2, 2)


def test_gsde_stochastic_acting_works_before_exploring_and_draws_matrices_for_a_batch_of_another_size():
    agent = _sde_agent()
    assert agent.act(torch.rand(6, 3), deterministic=False).shape == (6, 2)  # the worker's batch, before a draw
    agent.explore(torch.rand(6, 3))
    held = agent.noise_matrices.clone()
    obs = torch.rand(5, 3)
    first, second = agent.act(obs, deterministic=False), agent.act(obs, deterministic=False)
    assert first.shape == (5, 2) and not torch.equal(first, second)  # fresh matrices for each such batch
    assert torch.equal(agent.noise_matrices, held)  # the worker's are left alone
    assert bool(((first >= -2.0) & (first <= 2.0)).all())


def test_gsde_entropy_is_that_of_the_marginal_gaussian_per_row():
    agent = _sde_agent()
    obs = torch.rand(6, 3)
    actions = torch.rand(6, 2)
    logp, entropy = agent._log_prob_entropy(obs, actions)
    with torch.no_grad():
        mean, log_std = agent._sde_mean_log_std(obs)
    dist = Normal(mean, log_std.exp())
    torch.testing.assert_close(entropy.detach(), dist.entropy().sum(-1))
    torch.testing.assert_close(logp.detach(), dist.log_prob(actions).sum(-1))


def test_observations_are_normalised_by_the_running_statistics_only_when_asked():
    obs = torch.tensor([[1.0, 2.0, 3.0], [3.0, 6.0, -1.0], [2.0, 4.0, 1.0], [0.0, 0.0, 100.0]])  # 100: past any clip
    plain = _box_agent()
    assert torch.equal(plain.explore(obs)[1]["nobs"], obs)
    normed = _box_agent(normalize_obs=True)
    nobs = normed.explore(obs)[1]["nobs"]
    assert torch.equal(nobs, normed.obs_rms.normalize(obs)) and not torch.allclose(nobs, obs)


def test_learn_sets_the_annealed_learning_rate_and_splits_each_epoch_into_whole_minibatches():
    def learn(steps: int, **hp):
        obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)
        agent = PPO(obs_space, act_space, PPOConfig(num_steps=steps, learning_rate=0.01, **hp), 1, torch.device("cpu"))
        agent.generator.manual_seed(0)
        buffer, sizes = agent.make_buffer(), []
        gen = torch.Generator().manual_seed(0)
        for t in range(steps):
            obs = torch.rand(1, 3, generator=gen)
            _, extras = agent.explore(obs)
            buffer.add(
                extras["nobs"], torch.tensor([t % 2]), extras["logprob"], extras["value"], torch.ones(1), torch.zeros(1)
            )
        original = agent.update
        agent.update = lambda batch: sizes.append(len(batch["obs"])) or original(batch)  # type: ignore[method-assign]
        return agent, agent.learn(buffer, torch.zeros(1, 3)), sizes

    agent, stats, sizes = learn(4, num_minibatches=4, update_epochs=2)
    assert sizes == [1] * 8 and agent.optimizer.param_groups[0]["lr"] == 0.01
    assert isinstance(stats, dict) and math.isfinite(stats["loss/policy"])
    _, _, sizes = learn(5, num_minibatches=2, update_epochs=1)
    assert sizes == [2, 2]  # the fifth transition waits for the next epoch's permutation
    halved, _, _ = learn(4, num_minibatches=1, update_epochs=1)
    halved.lr_fraction = 0.5
    buffer = halved.make_buffer()
    for _ in range(4):
        _, extras = halved.explore(torch.zeros(1, 3))
        buffer.add(extras["nobs"], torch.tensor([0]), extras["logprob"], extras["value"], torch.ones(1), torch.zeros(1))
    halved.learn(buffer, torch.zeros(1, 3))
    assert halved.optimizer.param_groups[0]["lr"] == pytest.approx(0.005)


def _counting(update, calls: list):
    def counted(batch):
        calls.append(1)
        return update(batch)

    return counted


def test_target_kl_stops_the_epochs_once_the_last_minibatch_drifts_past_it():
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)
    counts = {}
    for target_kl in (None, 1e-4):
        torch.manual_seed(0)
        config = PPOConfig(num_steps=8, num_minibatches=1, update_epochs=5, learning_rate=0.01, target_kl=target_kl)
        agent = PPO(obs_space, act_space, config, 1, torch.device("cpu"))
        agent.generator.manual_seed(0)
        buffer, calls = agent.make_buffer(), []
        gen = torch.Generator().manual_seed(0)
        for _ in range(8):
            actions, extras = agent.explore(torch.rand(1, 3, generator=gen))
            buffer.add(
                extras["nobs"],
                actions,
                extras["logprob"],
                extras["value"],
                torch.randn(1, generator=gen),
                torch.zeros(1),
            )
        agent.update = _counting(agent.update, calls)  # type: ignore[method-assign]
        stats = agent.learn(buffer, torch.zeros(1, 3))
        assert isinstance(stats, dict)
        counts[target_kl] = len(calls)
    assert counts == {None: 5, 1e-4: 2}  # the first epoch starts at the rollout's policy (KL 0), the second has moved


def test_explained_variance_is_one_minus_the_residual_variance_over_the_return_variance_and_0_for_flat_returns():
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)
    for rewards, values in (([0.1, 0.3, 0.2, 0.6], [0.2, 0.2, 0.1, 0.4]), ([0.5] * 4, [0.1, 0.2, 0.3, 0.4])):
        agent = PPO(
            obs_space, act_space, PPOConfig(num_steps=4, num_minibatches=1, update_epochs=1), 1, torch.device("cpu")
        )
        buffer = agent.make_buffer()
        for r, v in zip(rewards, values, strict=True):
            buffer.add(
                torch.zeros(1, 3),
                torch.tensor([0]),
                torch.zeros(1),
                torch.tensor([v]),
                torch.tensor([r]),
                torch.ones(1),
            )
        stats = agent.learn(buffer, torch.zeros(1, 3))
        returns, residual = torch.tensor(rewards), torch.tensor(rewards) - torch.tensor(values)
        expected = 1 - float(residual.var() / returns.var()) if returns.var() > 0 else 0.0
        assert stats["explained_variance"] == pytest.approx(expected, abs=1e-6)


def _update_at_ratio_one(agent: PPO, advantages: torch.Tensor) -> dict:
    n = len(advantages)
    obs, actions = torch.zeros(n, 3), torch.zeros(n, dtype=torch.long)
    with torch.no_grad():
        logp, _ = agent._log_prob_entropy(obs, actions)
    zeros = torch.zeros(n)
    batch = {
        "obs": obs,
        "actions": actions,
        "logprobs": logp,
        "values": zeros,
        "advantages": advantages,
        "returns": zeros,
    }
    return agent.update(batch)


def test_advantages_are_normalised_per_minibatch_only_when_asked_and_only_with_more_than_one():
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)
    for norm_adv, advantages, expected in (
        (True, torch.tensor([1.0, 3.0]), 0.0),  # normalised: mean 0, so the surrogate at ratio 1 is 0
        (True, torch.tensor([2.5]), -2.5),  # one advantage is kept as it is
        (False, torch.tensor([1.0, 3.0, 5.0]), -3.0),
    ):
        agent = PPO(obs_space, act_space, PPOConfig(norm_adv=norm_adv), 1, torch.device("cpu"))
        stats = _update_at_ratio_one(agent, advantages)
        assert float(stats["loss/policy"]) == pytest.approx(expected, abs=1e-5)


def test_the_h_term_clamps_log_probabilities_at_minus_20_and_weights_returns_on_a_narrow_range():
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(3)
    agent = PPO(obs_space, act_space, PPOConfig(h_term_lambda=1.0), 1, torch.device("cpu"))
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 0.0, 50.0]))  # log p(action 0) is about -50
    batch = {
        "obs": torch.zeros(2, 3),
        "actions": torch.tensor([0, 0]),
        "logprobs": torch.zeros(2),
        "values": torch.zeros(2),
        "advantages": torch.zeros(2),
        "returns": torch.zeros(2),
        "h_weight": torch.tensor([1.0, 0.5]),
    }
    assert float(agent.update(batch)["loss/h_term"]) == pytest.approx(-20.0 * 1.5 / 2)
    # returns spread over less than 1: the weights are still min-max normalised over the good ones
    config = PPOConfig(h_term_lambda=1.0, h_term_drop=0.5, num_steps=4, num_minibatches=1, update_epochs=1)
    agent = PPO(obs_space, act_space, config, 1, torch.device("cpu"))
    buffer, seen = agent.make_buffer(), {}
    for reward in [0.0, 0.1, 0.2, 0.3]:
        buffer.add(
            torch.zeros(1, 3), torch.tensor([0]), torch.zeros(1), torch.zeros(1), torch.tensor([reward]), torch.ones(1)
        )
    original = agent.update
    agent.update = lambda batch: seen.update(batch) or original(batch)  # type: ignore[method-assign]
    agent.learn(buffer, torch.zeros(1, 3))
    order = torch.argsort(seen["returns"])
    assert seen["h_weight"][order].tolist() == pytest.approx([0.0, 0.0, 1 / 3, 1.0], abs=1e-5)


def test_ppo_saves_its_modules_under_stable_names():
    agent = _box_agent()
    assert list(agent.modules()) == ["actor", "log_std", "critic", "obs_rms", "reward_scaler"]
    assert list(_sde_agent().modules()) == ["actor", "log_std", "critic", "obs_rms", "reward_scaler", "sde_log_std"]


def test_the_h_term_floor_works_on_rollouts_beyond_torch_quantiles_limit():
    """torch.quantile refuses more than 2**24 values: a 65,536 x 256 rollout with the H-term crashed."""
    from podium.algos.ppo import _quantile

    x = torch.arange(2**24 + 3, dtype=torch.float32)
    assert float(_quantile(x, 0.25)) == pytest.approx(0.25 * (x.numel() - 1), abs=1.0)
    assert float(_quantile(torch.arange(1001.0), 0.25)) == 250.0  # small rollouts: torch.quantile's value
