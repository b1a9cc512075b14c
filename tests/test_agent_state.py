"""Every algorithm's whole state survives a checkpoint; truncation never bootstraps a real termination;
checkpoints keep the hyperparameters they were trained with.

These are the tests for two defects that once passed every test: PPO's learned ``log_std`` was not
saved (resume, tournament children, parameter fusion and stochastic ``act`` after ``podium.load`` all
reset the exploration level), and a step that gymnasium reports as both terminated and truncated was
bootstrapped by PPO as if it had been cut off.
"""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import podium
from podium.algos import algo_names, get_algo
from podium.algos import presets as presets_module
from podium.algos.presets import Preset
from podium.config import PodSpec
from podium.envs import GymVecEnv, make
from podium.pod import Pod, average_agents, build_agent
from podium.pod.worker import Worker
from podium.store import load_checkpoint

CPU = torch.device("cpu")
FAST = {"tensorboard": False, "eval_episodes": 8, "eval_mode": "inline"}
# every registered algorithm, on every kind of action space it supports
CASES = [
    (algo, env_id)
    for algo in algo_names()
    for env_id, discrete in (("Pendulum-v1", False), ("CartPole-v1", True))
    if discrete in get_algo(algo).discrete_actions
]


def _trained_agent(algo: str, env_id: str, seed: int = 0):
    """An agent after a few real learning phases (optimiser moments, normalisers and counters all moved)."""
    torch.manual_seed(seed)
    env = make(env_id, num_envs=4)
    cls = get_algo(algo)
    extra = {"learning_starts": 32, "batch_size": 32, "gradient_steps": 4} if not cls.on_policy else {}
    if algo == "ppo":
        extra = {"num_steps": 16, "normalize_obs": True, "normalize_reward": True}
    agent = cls(env.single_observation_space, env.single_action_space, cls.Config(**extra), 4, CPU)
    agent.generator.manual_seed(seed)
    worker = Worker(env, agent, seed=seed)
    buffer = agent.make_buffer()  # a rollout buffer is emptied by each learning phase, a replay buffer grows
    for _ in range(3):
        worker.collect(buffer, 16)
        agent.learn(buffer, worker.obs)
    return env, agent


def _flatten(state, prefix=""):
    """Every leaf of a nested state dict, keyed by its path."""
    if isinstance(state, dict):
        out = {}
        for key, value in state.items():
            out.update(_flatten(value, f"{prefix}{key}/"))
        return out
    if isinstance(state, list | tuple):
        out = {}
        for i, value in enumerate(state):
            out.update(_flatten(value, f"{prefix}{i}/"))
        return out
    return {prefix.rstrip("/"): state}


def _assert_same_state(a: dict, b: dict) -> None:
    fa, fb = _flatten(a), _flatten(b)
    assert sorted(fa) == sorted(fb)
    for key in fa:
        x, y = fa[key], fb[key]
        if torch.is_tensor(x):
            assert torch.is_tensor(y) and x.dtype == y.dtype and torch.equal(x, y), key
        else:
            assert x == y, key


@pytest.mark.parametrize(("algo", "env_id"), CASES)
def test_every_trained_tensor_is_in_the_saved_state(algo, env_id):
    _env, agent = _trained_agent(algo, env_id)
    assert agent.unsaved_parameters() == []
    saved = {id(p) for m in agent.modules().values() for p in m.parameters()}
    for optimizer in agent.optimizers().values():
        for group in optimizer.param_groups:
            assert all(id(p) in saved for p in group["params"])


@pytest.mark.parametrize(("algo", "env_id"), CASES)
def test_state_round_trip_restores_every_key_and_the_stochastic_policy(algo, env_id):
    _env, agent = _trained_agent(algo, env_id)
    if algo == "ppo" and not agent.discrete:
        with torch.no_grad():
            agent.log_std.fill_(-1.3)  # far from its initial 0: a lost log_std cannot go unnoticed
    blob = io.BytesIO()
    torch.save(agent.state_dict(), blob)
    blob.seek(0)
    state = torch.load(blob, weights_only=True)
    _, fresh = _trained_agent(algo, env_id, seed=1)  # another seed: every tensor starts different
    fresh.load_state_dict(state)
    _assert_same_state(fresh.state_dict(), agent.state_dict())
    obs = torch.randn(256, agent.obs_dim)
    assert torch.equal(fresh.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    # the stochastic policy is the same distribution: same draws from the same generator state
    agent.generator.manual_seed(7)
    fresh.generator.manual_seed(7)
    torch.manual_seed(7)
    a = agent.act(obs, deterministic=False)
    torch.manual_seed(7)
    b = fresh.act(obs, deterministic=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("hparams", "module"),
    [({"use_sde": False}, "log_std"), ({}, "sde_log_std")],  # the Pendulum preset explores with gSDE
)
def test_ppo_exploration_level_survives_save_load_and_resume(tmp_path, hparams, module):
    report = podium.train("Pendulum-v1", "ppo", steps=4096, run_dir=tmp_path / "run", seed=0, hparams=hparams, **FAST)
    trained = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["agent"][f"module.{module}"]["log_std"]
    assert not torch.equal(trained, torch.zeros_like(trained))  # it learned something
    policy = podium.load(report.run_dir)
    best = load_checkpoint(report.checkpoint)["agent"][f"module.{module}"]["log_std"]
    assert torch.equal(policy.agent.modules()[module]["log_std"].detach(), best)
    resumed = Pod.resume(tmp_path / "run", progress=False)
    assert torch.equal(resumed.agent.modules()[module]["log_std"].detach(), trained)


def test_a_state_the_modules_do_not_hold_is_refused_when_saving():
    env = make("Pendulum-v1", num_envs=2)
    cls = get_algo("ppo")

    class Leaky(cls):  # an agent that trains a tensor outside its modules()
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.stray = nn.Parameter(torch.zeros(3))
            self.optimizer.add_param_group({"params": [self.stray]})

    agent = Leaky(env.single_observation_space, env.single_action_space, cls.Config(), 2, CPU)
    assert agent.unsaved_parameters() == ["optimizer[1][0] (3,)"]
    agent.optimizer.add_param_group({"params": [nn.Parameter(torch.zeros(2, 1))]})
    strays = r": optimizer\[1\]\[0\] \(3,\), optimizer\[2\]\[0\] \(2, 1\); put them in a module listed by modules\(\)$"
    with pytest.raises(RuntimeError, match=strays):
        agent.state_dict()


def test_parameter_fusion_averages_ppos_exploration_level_too():
    env = make("Pendulum-v1", num_envs=2)
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=10)
    agents = [build_agent(spec, env.single_observation_space, env.single_action_space, 2, CPU) for _ in range(2)]
    with torch.no_grad():
        agents[0].log_std.fill_(-1.0)
        agents[1].log_std.fill_(-0.5)
    average_agents(agents)
    for agent in agents:
        torch.testing.assert_close(agent.log_std.detach(), torch.full((1,), -0.75))


def test_a_checkpoint_from_before_log_std_was_saved_still_loads(tmp_path):
    env = make("Pendulum-v1", num_envs=2)
    spec = PodSpec(env="Pendulum-v1", algo="ppo", steps=10)
    agent = build_agent(spec, env.single_observation_space, env.single_action_space, 2, CPU)
    state = agent.state_dict()
    del state["module.log_std"]
    fresh = build_agent(spec, env.single_observation_space, env.single_action_space, 2, CPU)
    with pytest.warns(UserWarning, match="predates"):
        fresh.load_state_dict(state)


# ----------------------------------------------------------------- truncation means "not terminated"
class _EndsAtTheLimit(gym.Env):
    """Terminates on its 3rd step, which is also where the TimeLimit wrapper cuts it off."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(2, self.t, np.float32), 1.0, self.t >= 3, False, {}


def test_a_terminal_step_at_the_time_limit_is_terminated_not_truncated():
    def factory():
        return gym.wrappers.TimeLimit(_EndsAtTheLimit(), max_episode_steps=3)

    raw = factory()
    raw.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, _ = raw.step(0)
    assert terminated and truncated  # gymnasium reports both: this is the case podium must handle
    env = GymVecEnv(factory, num_envs=2, vectorization="sync")
    env.reset(seed=0)
    flags = [env.step(torch.zeros(2, dtype=torch.long))[2:4] for _ in range(3)]
    terminated, truncated = flags[-1]
    assert terminated.all() and not truncated.any()
    assert not any(t.any() for _, t in flags)


def test_ppo_bootstraps_a_cut_off_step_and_not_one_that_also_terminated():
    env = make("Pendulum-v1", num_envs=4)
    agent = get_algo("ppo")(env.single_observation_space, env.single_action_space, get_algo("ppo").Config(), 4, CPU)
    buffer = agent.make_buffer()
    obs = torch.randn(4, 3)
    actions, extras = agent.explore(obs)
    final_obs = torch.randn(4, 3)
    terminated = torch.tensor([False, True, False, True])
    truncated = torch.tensor([False, False, True, True])
    agent.record(buffer, obs, actions, extras, torch.ones(4), obs, terminated, truncated, final_obs)
    bootstrap = agent.config.gamma * agent.critic(final_obs).squeeze(-1).detach()
    expected = torch.tensor([1.0, 1.0, 1.0 + float(bootstrap[2]), 1.0])
    torch.testing.assert_close(buffer.rewards[0], expected)
    assert buffer.dones[0].tolist() == [0.0, 1.0, 1.0, 1.0]


# ----------------------------------------------------------------- the hyperparameters it was trained with
def test_a_checkpoint_loads_and_resumes_with_the_hyperparameters_it_was_trained_with(tmp_path, monkeypatch):
    run = tmp_path / "run"
    podium.train("CartPole-v1", "ppo", steps=2048, run_dir=run, **FAST)  # with today's CartPole preset
    saved = load_checkpoint(run / "checkpoints" / "last.pt")
    trained_with = saved["agent_config"]
    assert trained_with["learning_rate"] == presets_module.PRESETS[("ppo", "CartPole-v1")].hparams["learning_rate"]
    # a later podium changes the preset (other widths, another step size, other sub-env count)
    monkeypatch.setitem(
        presets_module.PRESETS,
        ("ppo", "CartPole-v1"),
        Preset(num_envs=8, hparams={"hidden_sizes": (16,), "learning_rate": 1e-5}),
    )
    policy = podium.load(run)
    assert policy.agent.config.model_dump(mode="json") == trained_with
    assert policy.agent.actor[0].out_features == 64
    pod = Pod.resume(run, progress=False, steps=4096)
    assert pod.agent.config.model_dump(mode="json") == trained_with and pod.env.num_envs == saved["num_envs"]
    report = pod.run()
    assert report.steps == 4096


# ----------------------------------------------------------------- what a tournament may perturb
@pytest.mark.parametrize("algo", algo_names())
def test_each_algorithm_declares_its_mutable_hyperparameters_with_valid_ranges(algo):
    config = get_algo(algo).Config
    assert config.mutable, f"{algo} declares nothing a tournament may perturb"
    defaults = config()
    for name, (low, high) in config.mutable.items():
        assert name in config.model_fields, name
        assert isinstance(getattr(defaults, name), int | float) and not isinstance(getattr(defaults, name), bool)
        assert low < high and low <= getattr(defaults, name) <= high, name
        config(**{name: low})  # both ends are values the config accepts
        config(**{name: high})


@pytest.mark.parametrize(("algo", "env"), sorted(presets_module.PRESETS))
def test_every_preset_is_a_valid_configuration_of_its_algorithm(algo, env):
    from podium.algos.base import get_algo

    preset = presets_module.PRESETS[(algo, env)]
    config = get_algo(algo).Config(**preset.hparams)  # an unknown or out-of-range value raises here
    assert all(getattr(config, k) == (tuple(v) if isinstance(v, list) else v) for k, v in preset.hparams.items())
    assert preset.num_envs is None or preset.num_envs > 0


def test_a_users_num_steps_is_not_overridden_by_the_presets_rollout_size():
    """Pendulum's PPO preset sets rollout_size (2,048), which wins over num_steps: a user's num_steps=256 was
    silently trained as 32 steps per sub-env, though a user's hparams always win over a preset."""
    from podium.config import PodSpec
    from podium.pod.pod import resolve_config

    config = resolve_config(PodSpec(env="Pendulum-v1", algo="ppo", steps=4096, hparams={"num_steps": 256}))
    assert config.num_steps == 256 and config.rollout_size is None
    assert config.learning_rate == presets_module.PRESETS[("ppo", "Pendulum-v1")].hparams["learning_rate"]
    config = resolve_config(PodSpec(env="Pendulum-v1", algo="ppo", steps=4096, hparams={"rollout_size": 512}))
    assert config.rollout_size == 512
    for algo in ("ppo", "sac", "td3", "ddpg", "dqn"):  # a group names fields of its own algorithm
        fields = get_algo(algo).Config.model_fields
        assert all(name in fields for group in get_algo(algo).Config.alternatives for name in group)
