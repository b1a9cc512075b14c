"""Off-policy agents: SAC, TD3, DDPG (Box actions) and DQN / D3QN (Discrete actions).

Fast tests check the mechanics (shapes, bounds, log-probabilities, schedules, bootstrapping,
checkpoints, errors) and that short runs learn; ``@pytest.mark.slow`` tests train to the targets.
"""

from __future__ import annotations

import io
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Normal

import podium
from podium.algos import get_algo
from podium.algos.buffers import ReplayBuffer
from podium.algos.ddpg import DDPG
from podium.algos.dqn import D3QN, DQN, DQNConfig, QNetwork
from podium.algos.networks import squashed_gaussian
from podium.algos.sac import SAC, SACConfig
from podium.algos.td3 import TD3, TD3Config
from podium.config import ConfigError
from podium.envs import make
from podium.pod.worker import Worker

CPU = torch.device("cpu")
CONTINUOUS = ["sac", "td3", "ddpg"]
DISCRETE = ["dqn", "d3qn"]
ENV_OF = {
    "sac": "Pendulum-v1",
    "td3": "Pendulum-v1",
    "ddpg": "Pendulum-v1",
    "dqn": "CartPole-v1",
    "d3qn": "CartPole-v1",
}


def _agent(algo: str, num_envs: int = 4, **hparams):
    """A fresh agent for ``algo``'s test env (and that env), generator seeded."""
    env = make(ENV_OF[algo], num_envs=num_envs)
    cls = get_algo(algo)
    agent = cls(env.single_observation_space, env.single_action_space, cls.Config(**hparams), num_envs, CPU)
    agent.generator.manual_seed(0)
    return env, agent


def _fill(env, agent, steps: int):
    """Run the worker for ``steps`` batched steps into a fresh buffer."""
    buffer = agent.make_buffer()
    Worker(env, agent, seed=0).collect(buffer, steps)
    return buffer


# ----------------------------------------------------------------- every algorithm runs in a pod
@pytest.mark.parametrize("algo", CONTINUOUS + DISCRETE)
def test_trains_a_few_iterations_in_a_pod(algo, tmp_path):
    report = podium.train(
        ENV_OF[algo],
        algo,
        steps=400,
        num_envs=4,
        eval_every=200,
        eval_episodes=2,
        tensorboard=False,
        hparams={"learning_starts": 200, "batch_size": 32},
        run_dir=tmp_path,
    )
    assert report.steps == 400 and math.isfinite(report.score_mean)
    metrics = (tmp_path / "metrics.csv").read_text()
    assert "loss/critic" in metrics or "loss/td" in metrics  # learning phases after learning_starts logged losses
    assert (tmp_path / "checkpoints" / "best.pt").is_file()


@pytest.mark.parametrize("algo", CONTINUOUS + DISCRETE)
def test_learn_is_empty_before_learning_starts_then_returns_floats(algo):
    env, agent = _agent(algo, learning_starts=64, batch_size=16, gradient_steps=3)
    buffer = _fill(env, agent, 8)  # 32 transitions < learning_starts
    assert agent.learn(buffer, env.reset()[0]) == {}
    Worker(env, agent, seed=1).collect(buffer, 8)
    stats = agent.learn(buffer, env.reset()[0])
    assert stats and all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
    out = agent.update(buffer.sample(16, agent.generator))
    assert all(torch.is_tensor(v) and v.dim() == 0 and not v.requires_grad for v in out.values())


@pytest.mark.parametrize(
    ("algo", "env_id", "kind"), [("sac", "CartPole-v1", "Discrete"), ("dqn", "Pendulum-v1", "Box")]
)
def test_wrong_action_space_is_a_clear_error(algo, env_id, kind, tmp_path):
    with pytest.raises(ValueError, match=f"{algo} cannot handle {kind}") as err:
        podium.train(env_id, algo, steps=100, tensorboard=False, run_dir=tmp_path)
    fits = str(err.value).split("algorithms that can:")[1]  # it names the algorithms that fit
    assert ("dqn" in fits) == (kind == "Discrete") and ("sac" in fits) == (kind == "Box")


@pytest.mark.parametrize(
    ("algo", "field", "value"), [("ddpg", "policy_delay", 0), ("dqn", "tau", 0.0), ("sac", "batch_size", 0)]
)
def test_invalid_hyperparameters_are_refused_by_name(algo, field, value, tmp_path):
    with pytest.raises(ConfigError, match=field):
        podium.train(ENV_OF[algo], algo, steps=100, hparams={field: value}, tensorboard=False, run_dir=tmp_path)


@pytest.mark.parametrize("algo", ["sac", "td3", "dqn"])
def test_a_learning_start_the_buffer_can_never_reach_is_refused(algo, tmp_path):
    """The buffer stops growing at its capacity, so learning_starts above it meant no learning, silently."""
    hparams = {"buffer_size": 500, "learning_starts": 1000}
    with pytest.raises(ConfigError, match=r"learning_starts \(1000\) is larger than buffer_size \(500\)"):
        podium.train(ENV_OF[algo], algo, steps=100, hparams=hparams, tensorboard=False, run_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before the run wrote anything


# ----------------------------------------------------------------- SAC's squashed Gaussian
def test_squashed_log_prob_matches_torch_tanh_transform():
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(512, 3, generator=gen) * 2
    log_std = torch.randn(512, 3, generator=gen).clamp(-2, 1)
    noise = torch.randn(512, 3, generator=gen)
    actions, logp = squashed_gaussian(mean, log_std, noise)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform(cache_size=1)]
    )
    u = mean + log_std.exp() * noise
    expected = dist.base_dist.log_prob(u).sum(-1) - dist.transforms[0].log_abs_det_jacobian(u, actions).sum(-1)
    assert torch.allclose(actions, torch.tanh(u))
    assert torch.allclose(logp, expected, atol=1e-4)
    inside = actions.abs().amax(-1) < 0.999  # where atanh is well conditioned, invert the action too
    assert torch.allclose(logp[inside], dist.log_prob(actions.clone())[inside].sum(-1), atol=1e-2)


def test_squashed_density_integrates_to_one_and_stays_finite_when_saturated():
    mean, log_std = torch.tensor([[0.7]]), torch.tensor([[-0.3]])
    a = torch.linspace(-1, 1, 400_001)[1:-1, None]
    noise = (torch.atanh(a.double()) - mean) / log_std.exp()
    _, logp = squashed_gaussian(mean.double(), log_std.double(), noise)
    assert torch.trapezoid(logp.exp(), a[:, 0].double()).item() == pytest.approx(1.0, abs=1e-3)
    # far in the tails tanh(u) rounds to 1: log(1 - tanh(u)^2) ~ 2 log 2 - 2|u| must stay exact and finite
    u = torch.tensor([[-30.0], [30.0]])
    _, logp = squashed_gaussian(torch.zeros(2, 1), torch.zeros(2, 1), u)
    normal = -0.5 * 30.0**2 - 0.5 * math.log(2 * math.pi)
    assert torch.allclose(logp, torch.full((2,), normal - (2 * math.log(2) - 60.0)))


def test_sac_policy_log_prob_is_that_of_its_actions():
    _env, agent = _agent("sac")
    obs = torch.randn(256, 3)
    agent.generator.manual_seed(3)
    actions, logp = agent._sample(obs)
    mean, log_std = agent.actor(obs).chunk(2, -1)
    std = log_std.clamp(agent.config.log_std_min, agent.config.log_std_max).exp()
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, std), [torch.distributions.TanhTransform()]
    )
    assert torch.allclose(logp, dist.log_prob(actions.clamp(-0.999999, 0.999999)).sum(-1), atol=1e-3)
    assert agent.target_entropy == -1.0  # -|A| for Pendulum


# ----------------------------------------------------------------- actions in bounds
@pytest.mark.parametrize("algo", CONTINUOUS)
def test_actions_stay_inside_asymmetric_env_bounds(algo):
    obs_space = gym.spaces.Box(-10, 10, (5,), np.float32)
    low, high = np.array([-1.0, 0.0, 10.0], np.float32), np.array([3.0, 0.5, 10.001], np.float32)
    act_space = gym.spaces.Box(low, high, dtype=np.float32)
    cls = get_algo(algo)
    hparams = {"learning_starts": 64} | ({} if algo == "sac" else {"exploration_noise": 5.0})
    agent = cls(obs_space, act_space, cls.Config(**hparams), 32, CPU)
    obs = torch.randn(32, 5) * 100  # large inputs push the pre-tanh outputs into saturation
    lo, hi = torch.as_tensor(low), torch.as_tensor(high)
    batches = [agent.explore(obs)[0] for _ in range(4)]  # 128 env steps: random, then the policy
    batches += [agent.act(obs, deterministic=True), agent.act(obs, deterministic=False)]
    for actions in batches:
        assert actions.shape == (32, 3)
        assert bool(((actions >= lo) & (actions <= hi)).all())
    spread = torch.cat(batches[:2]).std(0)  # the random phase covers the box
    assert bool((spread > 0.2 * (hi - lo)).all())


# ----------------------------------------------------------------- replay bootstrapping
@pytest.mark.parametrize("algo", ["sac", "td3", "dqn"])
def test_record_bootstraps_truncated_not_terminated(algo):
    _env, agent = _agent(algo, num_envs=3)
    buffer = agent.make_buffer()
    obs = torch.randn(3, agent.obs_dim)
    actions, extras = agent.explore(obs)
    next_obs, final_obs = torch.zeros(3, agent.obs_dim), torch.ones(3, agent.obs_dim)
    terminated = torch.tensor([True, False, False])
    truncated = torch.tensor([False, True, False])
    agent.record(buffer, obs, actions, extras, torch.ones(3), next_obs, terminated, truncated, final_obs)
    assert buffer.size == 3
    assert torch.equal(buffer.next_obs[:3], torch.stack([final_obs[0], final_obs[1], next_obs[2]]))
    assert buffer.terminated[:3].tolist() == [1.0, 0.0, 0.0]
    assert torch.equal(buffer.obs[:3], obs)


def test_time_limit_is_stored_as_truncation_with_the_final_observation():
    env = make("Pendulum-v1", num_envs=2, max_episode_steps=5)
    agent = SAC(env.single_observation_space, env.single_action_space, SACConfig(), 2, CPU)
    buffer = _fill(env, agent, 12)  # two time limits per sub-env, no termination
    assert buffer.size == 24 and float(buffer.terminated[:24].sum()) == 0.0
    obs, next_obs = buffer.obs[:24].view(12, 2, 3), buffer.next_obs[:24].view(12, 2, 3)
    # inside an episode next_obs is the following obs; at the limit it is the last obs, not the reset one
    assert torch.equal(next_obs[:4], obs[1:5]) and not torch.equal(next_obs[4], obs[5])
    turn = torch.atan2(next_obs[4, :, 1], next_obs[4, :, 0]) - torch.atan2(obs[4, :, 1], obs[4, :, 0])
    turn = torch.remainder(turn + math.pi, 2 * math.pi) - math.pi
    assert bool(turn.abs().le(0.05 * 8.0 + 1e-4).all())  # one step of physics: |dtheta| <= dt * max_speed


def test_cartpole_falls_are_stored_as_terminations():
    env, agent = _agent("dqn", num_envs=4)
    buffer = _fill(env, agent, 60)  # random actions: every episode ends by falling within ~60 steps
    assert float(buffer.terminated[: buffer.size].sum()) >= 4
    done_rows = buffer.terminated[: buffer.size].bool()
    assert bool((buffer.next_obs[: buffer.size][done_rows].abs().amax(-1) > 0.2).all())  # fallen, not reset


@pytest.mark.parametrize("algo", ["sac", "td3", "ddpg"])
def test_bellman_targets_bootstrap_all_but_terminated_rows(algo):
    _env, agent = _agent(algo, gamma=0.5, **({"init_alpha": 1e-8} if algo == "sac" else {}))
    with torch.no_grad():
        for p in agent.critic_target.parameters():
            p.zero_()
        agent.critic_target.layers[-1].bias.fill_(4.0)  # every target Q-value is 4
    batch = {"rewards": torch.ones(3), "next_obs": torch.randn(3, 3), "terminated": torch.tensor([1.0, 0.0, 0.0])}
    assert torch.allclose(agent.td_target(batch), torch.tensor([1.0, 3.0, 3.0]), atol=1e-5)


# ----------------------------------------------------------------- DQN options
def test_epsilon_schedule_is_linear_in_env_steps():
    _env, agent = _agent("dqn", learning_starts=100, exploration_steps=1_000, initial_eps=1.0, final_eps=0.1)
    schedule = {}
    for steps in (0, 99, 100, 500, 1_000, 5_000):
        agent.env_steps = steps
        schedule[steps] = agent.epsilon()
    assert schedule == pytest.approx({0: 1.0, 99: 1.0, 100: 0.91, 500: 0.55, 1_000: 0.1, 5_000: 0.1})
    agent.config.exploration_fraction, agent.budget_steps = 0.5, 4_000
    agent.env_steps = 1_000
    assert agent.epsilon() == pytest.approx(0.55)  # decays over half of a 4,000-step budget


def test_epsilon_greedy_explores_at_the_scheduled_rate():
    _env, agent = _agent("dqn", learning_starts=0, exploration_steps=1, final_eps=0.3)
    agent.env_steps = 10
    obs = torch.randn(20_000, 4)
    greedy = agent.act(obs, deterministic=True)
    actions, _ = agent.explore(obs)
    changed = (actions != greedy).float().mean().item()
    assert changed == pytest.approx(0.3 * 0.5, abs=0.015)  # 2 actions: half the random ones differ


class _FixedQ(nn.Module):
    def __init__(self, values: list[list[float]]) -> None:
        super().__init__()
        self.values = torch.tensor(values)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.values


@pytest.mark.parametrize("double", [False, True])
def test_double_target_lets_the_online_network_choose(double):
    _env, agent = _agent("dqn", double=double, gamma=0.5)
    agent.q_net = _FixedQ([[0.0, 1.0], [3.0, 0.0]])  # online argmax: action 1, then action 0
    agent.q_target = _FixedQ([[5.0, 2.0], [7.0, 9.0]])
    batch = {"rewards": torch.ones(2), "next_obs": torch.zeros(2, 4), "terminated": torch.tensor([0.0, 1.0])}
    target = agent.td_target(batch)
    assert target.tolist() == ([1 + 0.5 * 2.0, 1.0] if double else [1 + 0.5 * 5.0, 1.0])


def test_dueling_head_splits_value_and_centred_advantages():
    net = QNetwork(4, (16,), 3, "relu", dueling=True)
    assert net.net[-1].out_features == 4  # V plus 3 advantages
    obs = torch.randn(8, 4)
    out, q = net.net(obs), net(obs)
    assert torch.allclose(q.mean(-1), out[:, 0], atol=1e-6)  # mean Q is V
    assert torch.allclose(q - q.mean(-1, keepdim=True), out[:, 1:] - out[:, 1:].mean(-1, keepdim=True), atol=1e-6)
    assert QNetwork(4, (16,), 3, "relu", dueling=False).net[-1].out_features == 3


def test_d3qn_is_dqn_with_double_and_dueling_on():
    _env, d3qn = _agent("d3qn")
    assert isinstance(d3qn, D3QN) and isinstance(d3qn, DQN)
    assert d3qn.config.double and d3qn.config.dueling and d3qn.q_net.dueling
    assert not DQNConfig().double and not DQNConfig().dueling


def test_dqn_target_network_follows_every_interval():
    env, agent = _agent("dqn", learning_starts=16, batch_size=16, target_update_interval=3)
    buffer = _fill(env, agent, 8)
    for step in range(1, 7):
        agent.update(buffer.sample(16, agent.generator))
        same = all(
            torch.equal(a, b) for a, b in zip(agent.q_net.parameters(), agent.q_target.parameters(), strict=True)
        )
        assert same == (step % 3 == 0)


# ----------------------------------------------------------------- TD3 / DDPG structure
def test_td3_delays_the_actor_and_ddpg_does_not():
    env, td3 = _agent("td3", learning_starts=16, batch_size=16, policy_delay=3)
    buffer = _fill(env, td3, 8)
    moved = []
    for _ in range(6):
        before = [p.clone() for p in td3.actor.parameters()]
        td3.update(buffer.sample(16, td3.generator))
        moved.append(not all(torch.equal(a, b) for a, b in zip(before, td3.actor.parameters(), strict=True)))
    assert moved == [False, False, True, False, False, True]
    env, ddpg = _agent("ddpg", learning_starts=16, batch_size=16)
    assert isinstance(ddpg, DDPG) and isinstance(ddpg, TD3)
    assert ddpg.critic.ensemble == 1 and td3.critic.ensemble == 2
    assert ddpg.config.policy_delay == 1 and ddpg.config.target_noise == 0.0
    assert TD3Config().target_noise > 0


# ----------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("algo", CONTINUOUS + DISCRETE)
def test_state_dict_round_trip_gives_identical_actions(algo):
    env, agent = _agent(algo, learning_starts=32, batch_size=32, gradient_steps=4)
    buffer = _fill(env, agent, 16)
    agent.learn(buffer, env.reset()[0])
    blob = io.BytesIO()
    torch.save(agent.state_dict(), blob)
    blob.seek(0)
    state = torch.load(blob, weights_only=True)
    _, fresh = _agent(algo, learning_starts=32, batch_size=32, gradient_steps=4)
    obs = torch.randn(64, agent.obs_dim)
    assert not torch.equal(fresh.act(obs), agent.act(obs)) or agent.discrete
    fresh.load_state_dict(state)
    assert torch.equal(fresh.act(obs), agent.act(obs))
    agent.generator.manual_seed(5)
    fresh.generator.manual_seed(5)
    assert torch.equal(fresh.explore(obs)[0], agent.explore(obs)[0])
    # the learner state came along too: one more identical update gives identical networks
    batch = buffer.sample(32, torch.Generator().manual_seed(1))
    agent.generator.manual_seed(2)
    fresh.generator.manual_seed(2)
    agent.update(batch)
    fresh.update(batch)
    for name, module in agent.modules().items():
        for a, b in zip(module.state_dict().values(), fresh.modules()[name].state_dict().values(), strict=True):
            assert torch.allclose(a, b), name


def test_checkpoint_of_another_algorithm_is_refused():
    _, sac = _agent("sac")
    _, td3 = _agent("td3")
    with pytest.raises(ValueError, match="sac"):
        sac.load_state_dict(td3.state_dict())


def test_replay_buffer_holds_long_actions_for_dqn():
    _, agent = _agent("dqn")
    buffer = agent.make_buffer()
    assert isinstance(buffer, ReplayBuffer) and buffer.actions.dtype == torch.long and buffer.actions.dim() == 1


# ----------------------------------------------------------------- learning
@pytest.fixture
def one_thread():
    """Small networks on a shared CPU: one torch thread (what the pod's torch_threads=1 sets), restored after."""
    threads = torch.get_num_threads()
    yield 1
    torch.set_num_threads(threads)


# thresholds checked on seeds 0-4: random play scores about -1,200 (Pendulum) and 22 (CartPole); after these
# budgets the best evaluations were >= -435 (sac), >= -190 (td3, ddpg), >= 140 (dqn, d3qn)
SHORT_RUNS = [
    ("sac", "Pendulum-v1", 10_000, -600.0),
    ("td3", "Pendulum-v1", 10_000, -450.0),
    ("ddpg", "Pendulum-v1", 10_000, -450.0),
    ("dqn", "CartPole-v1", 16_000, 75.0),
    ("d3qn", "CartPole-v1", 16_000, 75.0),
]


@pytest.mark.parametrize(("algo", "env_id", "steps", "threshold"), SHORT_RUNS)
def test_short_run_improves_clearly(algo, env_id, steps, threshold, tmp_path, one_thread):
    report = podium.train(
        env_id,
        algo,
        steps=steps,
        eval_every=steps // 4,
        eval_episodes=16,
        seed=0,
        torch_threads=one_thread,
        tensorboard=False,
        run_dir=tmp_path,
    )
    assert report.score_mean >= threshold, report.curve


FULL_RUNS = [
    ("sac", "Pendulum-v1", -200.0, 60_000),
    ("td3", "Pendulum-v1", -200.0, 60_000),
    ("ddpg", "Pendulum-v1", -200.0, 60_000),
    ("dqn", "CartPole-v1", 475.0, 200_000),
    ("d3qn", "CartPole-v1", 475.0, 200_000),
]


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "env_id", "target", "steps"), FULL_RUNS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reaches_the_target_with_default_hyperparameters(algo, env_id, target, steps, seed, tmp_path, one_thread):
    report = podium.train(
        env_id,
        algo,
        target=target,
        steps=steps,
        eval_every=1_000,
        seed=seed,
        torch_threads=one_thread,
        tensorboard=False,
        run_dir=tmp_path,
    )
    assert report.reached_target, (report.score_mean, report.curve[-5:])


def test_replay_buffer_state_round_trips_oldest_first_and_keeps_the_newest_when_smaller():
    buffer = ReplayBuffer(5, 2, (1,), torch.float32, CPU)
    for step in range(7):  # wraps: holds steps 2..6, oldest at pos
        value = torch.full((1,), float(step))
        done = torch.zeros(1, dtype=torch.bool)
        buffer.add(value.expand(1, 2), value[:, None], value, value.expand(1, 2) + 0.5, done)
    state = buffer.state_dict()
    assert state["rewards"].tolist() == [2, 3, 4, 5, 6]
    copy = ReplayBuffer(5, 2, (1,), torch.float32, CPU)
    copy.load_state_dict(state)
    assert copy.size == 5 and copy.state_dict()["rewards"].tolist() == [2, 3, 4, 5, 6]
    assert torch.equal(copy.state_dict()["next_obs"], state["next_obs"])
    small = ReplayBuffer(3, 2, (1,), torch.float32, CPU)
    small.load_state_dict(state)
    assert small.size == 3 and small.state_dict()["rewards"].tolist() == [4, 5, 6]
    with pytest.raises(ValueError, match="shapes"):
        ReplayBuffer(5, 3, (1,), torch.float32, CPU).load_state_dict(state)


# ----------------------------------------------------------------- Ornstein-Uhlenbeck exploration
@pytest.mark.parametrize("algo", ["td3", "ddpg"])
def test_ou_noise_is_correlated_in_time_has_its_stationary_spread_and_restarts_with_each_episode(algo):
    _env, agent = _agent(algo, num_envs=256, noise_type="ou", exploration_noise=0.1, ou_theta=0.15, ou_dt=0.5)
    with torch.no_grad():  # a zero actor: the action is the noise
        for p in agent.actor.parameters():
            p.zero_()
    obs = torch.zeros(256, agent.obs_dim)
    noise = torch.stack([agent.exploration_actions(obs) for _ in range(200)])  # [T, N, A], past burn-in
    stationary = 0.1 / math.sqrt(2 * 0.15 - 0.15**2 * 0.5)  # discrete OU: var = sigma^2 / (2 theta - theta^2 dt)
    assert noise[100:].std().item() == pytest.approx(stationary, rel=0.1)  # (0.19: far from the [-1, 1] clamp)
    lag1 = torch.corrcoef(torch.stack([noise[100:-1].flatten(), noise[101:].flatten()]))[0, 1]
    assert lag1 > 0.9  # 1 - theta * dt = 0.925: it keeps its direction
    done = torch.zeros(256, dtype=torch.bool)
    done[:128] = True
    agent.episodes_ended(done)
    assert bool((agent.ou_noise[:128] == 0).all()) and bool((agent.ou_noise[128:] != 0).all())
    # Gaussian noise (the default) is independent from step to step
    _env, gauss = _agent(algo, num_envs=256)
    with torch.no_grad():
        for p in gauss.actor.parameters():
            p.zero_()
    g = torch.stack([gauss.exploration_actions(obs) for _ in range(50)])
    assert abs(torch.corrcoef(torch.stack([g[:-1].flatten(), g[1:].flatten()]))[0, 1]) < 0.05


def test_recording_a_finished_episode_restarts_its_ou_noise():
    _env, agent = _agent("td3", num_envs=2, noise_type="ou", exploration_noise=0.5, learning_starts=0)
    buffer = agent.make_buffer()
    obs = torch.randn(2, agent.obs_dim)
    actions, extras = agent.explore(obs)
    assert bool((agent.ou_noise != 0).all())
    terminated, truncated = torch.tensor([False, False]), torch.tensor([True, False])
    agent.record(buffer, obs, actions, extras, torch.zeros(2), obs, terminated, truncated, obs)
    assert bool((agent.ou_noise[0] == 0).all()) and bool((agent.ou_noise[1] != 0).all())


def _sde_sac(num_envs: int = 4, **hp) -> SAC:
    obs_space, act_space = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-2.0, 2.0, (2,))
    config = SACConfig(use_sde=True, hidden_sizes=(8, 5), learning_starts=0, **hp)
    torch.manual_seed(0)  # the weights too: with another draw every ReLU of the latent layer may be dead on a batch
    agent = SAC(obs_space, act_space, config, num_envs, torch.device("cpu"))
    agent.generator.manual_seed(0)
    with torch.no_grad():
        agent.sde_module["log_std"].copy_(torch.linspace(-1.0, 0.5, 10).reshape(5, 2))
    return agent


def test_sac_gsde_explores_with_a_matrix_per_sub_env_until_its_episode_ends():
    agent = _sde_sac()
    obs = torch.rand(4, 3) * 2 - 1
    actions, extras = agent.explore(obs)
    matrices = agent.noise_matrices.clone()
    with torch.no_grad():
        latent = agent.actor[:-1](obs)
        mean = agent.actor[-1](latent)
    unit = torch.tanh(mean + torch.einsum("bl,bla->ba", latent, matrices))
    torch.testing.assert_close(extras["policy_actions"], unit)
    torch.testing.assert_close(actions, unit * 2.0)  # the env's bounds are [-2, 2]
    agent.explore(obs)
    assert torch.equal(agent.noise_matrices, matrices)  # held while the episodes go on
    agent.episodes_ended(torch.tensor([False, True, False, False]))
    assert torch.equal(agent.noise_matrices[[0, 2, 3]], matrices[[0, 2, 3]])
    assert not torch.equal(agent.noise_matrices[1], matrices[1])  # a new episode, a new matrix


def test_sac_gsde_log_density_is_the_squashed_gaussian_over_the_matrix_and_sigma_learns():
    agent = _sde_sac(sde_sample_freq=3)
    obs = torch.rand(4, 3)
    for step in range(4):
        before = agent.noise_matrices.clone()
        agent.explore(obs)
        assert torch.equal(agent.noise_matrices, before) == (step in (1, 2))  # draws at steps 0 and 3
    actions, logp = agent._sample(obs, agent.noise_matrices)
    with torch.no_grad():
        latent = agent.actor[:-1](obs)
        mean = agent.actor[-1](latent)
        std = (latent.square() @ (2 * agent.sde_module["log_std"]).exp() + 1e-6).sqrt()
        u = torch.atanh(actions.clamp(-1 + 1e-6, 1 - 1e-6))
        expected = (Normal(mean, std).log_prob(u) - torch.log(1 - actions.square() + 1e-6)).sum(-1)
    torch.testing.assert_close(logp.detach(), expected, rtol=1e-3, atol=1e-3)
    batch = {
        "obs": obs,
        "actions": actions.detach(),
        "rewards": torch.ones(4),
        "next_obs": obs,
        "terminated": torch.zeros(4),
    }
    sigma = agent.sde_module["log_std"].detach().clone()
    agent.update(batch)
    assert not torch.equal(agent.sde_module["log_std"], sigma)  # the actor's loss reached sigma
    assert agent.unsaved_parameters() == [] and "module.sde_log_std" in agent.state_dict()


# ----------------------------------------------------------------- found by mutation testing
def test_off_policy_agents_save_their_modules_and_optimisers_under_stable_names():
    names = {
        "sac": (["actor", "critic", "critic_target", "log_alpha"], ["actor", "critic"]),
        "td3": (["actor", "critic", "actor_target", "critic_target"], ["actor", "critic"]),
        "dqn": (["q_net", "q_target"], ["optimizer"]),
    }
    for algo, (modules, optimizers) in names.items():
        _env, agent = _agent(algo)
        assert list(agent.modules()) == modules and list(agent.optimizers()) == optimizers


def test_counters_start_at_zero_count_every_sub_env_and_default_to_zero_for_an_older_checkpoint():
    _env, sac = _agent("sac", num_envs=4, learning_starts=100)
    assert sac.env_steps == 0
    sac.explore(torch.zeros(4, 3))
    sac.explore(torch.zeros(4, 3))
    assert sac.env_steps == 8  # sub-envs, not observation features (Pendulum has 3)
    for algo, counter in (("td3", "critic_updates"), ("dqn", "updates")):
        _env, agent = _agent(algo)
        agent.env_steps, agent.__dict__[counter] = 7, 5
        agent.load_extra_state({})
        assert agent.env_steps == 0 and getattr(agent, counter) == 0
        agent.load_extra_state({"env_steps": 3, counter: 2})
        assert agent.env_steps == 3 and getattr(agent, counter) == 2


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_dqn_regresses_onto_its_target_with_the_chosen_loss(loss):
    _env, agent = _agent("dqn", loss=loss, gamma=0.9)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "obs": torch.randn(6, 4, generator=gen),
        "actions": torch.tensor([0, 1, 1, 0, 1, 0]),
        "rewards": 3.0 * torch.randn(6, generator=gen),  # errors beyond Huber's delta of 1
        "next_obs": torch.randn(6, 4, generator=gen),
        "terminated": torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
    }
    with torch.no_grad():
        q = agent.q_net(batch["obs"]).gather(-1, batch["actions"][:, None]).squeeze(-1)
        target = batch["rewards"] + 0.9 * (1 - batch["terminated"]) * agent.q_target(batch["next_obs"]).amax(-1)
    error = q - target
    expected = (
        torch.where(error.abs() < 1, 0.5 * error.square(), error.abs() - 0.5) if loss == "huber" else error.square()
    )
    stats = agent.update(batch)
    torch.testing.assert_close(stats["loss/td"], expected.mean())
    torch.testing.assert_close(stats["q"], q.mean())
