"""podium's tensor Ant-v5 and Humanoid-v5 on the MuJoCo C engine against gymnasium's own envs.

The C engine runs the same MuJoCo calls as gymnasium (``mj_step`` x 5, ``mj_rnePostConstraint``) on the
same model, and carries the solver's warm start between steps as gymnasium's ``MjData`` does, so the
comparison is exact: observations equal to the last bit, rewards to float64 rounding (numpy and torch add
the terms in different orders), termination identical, over whole trajectories. Also: spaces and
registry, reset distribution, time limit, seeding, bad input, and short PPO/SAC pods on the tensor Ant and
on gymnasium's HalfCheetah-v5. The MJX engine has its own module (tests/test_locomotion_mjx.py).
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("mujoco", reason='the locomotion envs need the "mujoco" extra: pip install "podium[mujoco]"')
pytest.importorskip("mujoco.batch", reason='the MuJoCo C engine needs mujoco >= 4.0: pip install -U "podium[mujoco]"')

import mujoco

import podium
import podium.envs as envs
from podium.envs.gym_adapter import GymVecEnv, MissingDependencyError
from podium.envs.locomotion import AntVecEnv, HumanoidVecEnv
from podium.envs.locomotion.base import LocomotionVecEnv

CASES = {"Ant-v5": AntVecEnv, "Humanoid-v5": HumanoidVecEnv}
IDS = list(CASES)
REWARD_TOL = 1e-12  # float64: the same terms, summed in another order


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def _actions(space: gym.spaces.Box, rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    """Random actions (``scale`` x the space's range, to exercise MuJoCo's clamping), float32-representable."""
    return rng.uniform(scale * space.low, scale * space.high, (n, *space.shape)).astype(np.float32).astype(np.float64)


def _gym_states(env_id: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` gymnasium states: a reset, then 0-40 random steps (feet on the floor, bodies in contact)."""
    genv = gym.make(env_id).unwrapped
    rng = np.random.default_rng(seed)
    qpos, qvel = [], []
    while len(qpos) < n:
        genv.reset(seed=int(rng.integers(1 << 30)))
        for _ in range(int(rng.integers(0, 41))):
            *_, terminated, _, _ = genv.step(_actions(genv.action_space, rng, 1)[0])
            if terminated:
                break
        qpos.append(genv.data.qpos.copy())
        qvel.append(genv.data.qvel.copy())
    return np.array(qpos), np.array(qvel)


# ------------------------------------------------------------------------------------------ registry, spaces
@pytest.mark.parametrize("env_id", IDS)
def test_registry_spaces_and_limit_match_gymnasium(env_id: str):
    genv = gym.make(env_id)
    env = envs.make(env_id, num_envs=3)
    assert type(env) is CASES[env_id] and env.engine.name == "mujoco" and env.dtype == torch.float64
    assert env.single_observation_space.shape == genv.observation_space.shape
    assert env.single_observation_space.dtype == np.float32
    assert env.single_action_space == genv.action_space
    assert env.max_episode_steps == genv.spec.max_episode_steps == 1000
    assert env.dt == genv.unwrapped.dt
    adapter = envs.make(env_id, num_envs=2, native=False, vectorization="sync")
    assert isinstance(adapter, GymVecEnv) and adapter.single_observation_space == env.single_observation_space


# ------------------------------------------------------------------------------------------ one step, exactly
@pytest.mark.parametrize("env_id", IDS)
def test_reset_observation_matches_gymnasium(env_id: str):
    """The same initial qpos/qvel give gymnasium's first observation, bit for bit (contact and actuator forces
    zero, as ``mj_forward`` leaves them)."""
    n = 8
    genvs = [gym.make(env_id).unwrapped for _ in range(n)]
    gobs = np.stack([g.reset(seed=100 + i)[0] for i, g in enumerate(genvs)])
    env = CASES[env_id](num_envs=n)
    env.reset(seed=0)
    env.set_state(_t(np.stack([g.data.qpos for g in genvs])), _t(np.stack([g.data.qvel for g in genvs])))
    assert torch.equal(env._observe(env.state), _t(gobs))
    assert torch.equal(env.observation(), _t(gobs).float())
    tail = 78  # cfrc_ext of the 13 bodies after the world, the observation's last part in both envs
    assert (env.observation()[:, -tail:] == 0).all()


@pytest.mark.parametrize("env_id", IDS)
def test_one_step_from_the_same_state_matches_gymnasium(env_id: str):
    """64 states with bodies in contact (and some about to fall), one random action each: gymnasium's
    observation exactly, its reward to float64 rounding, its termination exactly; the input state untouched."""
    n = 64
    qpos, qvel = _gym_states(env_id, n, seed=1)
    rng = np.random.default_rng(2)
    genv = gym.make(env_id).unwrapped
    actions = _actions(genv.action_space, rng, n, scale=1.5)
    ref_obs, ref_reward, ref_term = [], [], []
    for i in range(n):
        genv.reset(seed=0)  # mj_resetData: zero warm start and controls, as set_state() below
        genv.set_state(qpos[i], qvel[i])
        obs, reward, terminated, _, _ = genv.step(actions[i])
        ref_obs.append(obs)
        ref_reward.append(reward)
        ref_term.append(terminated)
    env = CASES[env_id](num_envs=n)
    env.reset(seed=0)
    env.set_state(_t(qpos), _t(qvel))
    before = tuple(s.clone() for s in env.state)
    state, reward, terminated = env._dynamics(env.state, env._check_actions(_t(actions)))
    assert all(torch.equal(a, b) for a, b in zip(before, env.state, strict=True))
    assert torch.equal(env._observe(state), _t(np.array(ref_obs)))
    torch.testing.assert_close(reward, _t(np.array(ref_reward)), rtol=0, atol=REWARD_TOL)
    assert torch.equal(terminated, _t(np.array(ref_term)))
    assert 0 < sum(ref_term) < n or env_id == "Ant-v5"  # Humanoid: both sides of the height bounds
    assert (env._observe(state)[:, -78:] != 0).any(dim=1).sum() >= 10  # many states are in contact with the floor


# ------------------------------------------------------------------------------------------ whole trajectories
@pytest.mark.parametrize("env_id", IDS)
def test_trajectories_match_gymnasium_exactly_through_the_public_step(env_id: str):
    """Eight gymnasium episodes under random actions, side by side with the tensor env's public ``step``:
    every observation, the float64 state and the termination step are identical; ``final_obs`` is gymnasium's
    last observation; each sub-env's first episode return matches gymnasium's."""
    n, horizon = 8, 150
    genvs = [gym.make(env_id) for _ in range(n)]
    gobs = np.stack([g.reset(seed=i)[0] for i, g in enumerate(genvs)])
    env = CASES[env_id](num_envs=n)
    env.reset(seed=0)
    qpos, qvel = (np.stack([getattr(g.unwrapped.data, k) for g in genvs]) for k in ("qpos", "qvel"))
    env.set_state(_t(qpos), _t(qvel))
    assert torch.equal(env.observation(), _t(gobs).float())
    rng = np.random.default_rng(3)
    alive = np.ones(n, dtype=bool)
    g_return, g_length = np.zeros(n), np.zeros(n, dtype=np.int64)
    ended = 0
    for _ in range(horizon):
        actions = _actions(genvs[0].action_space, rng, n)
        obs, reward, terminated, truncated, info = env.step(_t(actions))
        for i in np.flatnonzero(alive):
            o, r, term, trunc, _ = genvs[i].step(actions[i])
            g_return[i] += r
            g_length[i] += not term
            assert not trunc and bool(truncated[i]) is False
            assert bool(terminated[i]) == term
            if term:
                assert torch.equal(info["final_obs"][i], _t(o).float())
                assert int(info["episode_length"][i]) == g_length[i] + 1
                torch.testing.assert_close(float(info["episode_return"][i]), g_return[i], rtol=1e-6, atol=1e-4)
                alive[i] = False
                ended += 1
            else:
                assert torch.equal(obs[i], _t(o).float())
                assert torch.equal(env.state[0][:, i], _t(genvs[i].unwrapped.data.qpos))
                assert torch.equal(env.state[2][:, i], _t(genvs[i].unwrapped.data.qacc_warmstart))
                torch.testing.assert_close(float(reward[i]), float(np.float32(r)), rtol=1e-6, atol=1e-6)
        if not alive.any():
            break
    assert ended >= 2  # episodes end (random torques topple the humanoid and make the ant jump) ...
    assert alive.any() or env_id == "Humanoid-v5"  # ... and for Ant some are still going


# ------------------------------------------------------------------------------------------ resets, limits, seeds
@pytest.mark.parametrize("env_id", IDS)
def test_reset_draws_gymnasium_initial_distribution(env_id: str):
    n = 512
    env = CASES[env_id](num_envs=n)
    obs, _ = env.reset(seed=4)
    s = env.reset_noise_scale
    qpos, qvel = env.state[0].T, env.state[1].T
    dq = qpos - torch.as_tensor(env.model.qpos0)
    assert dq.abs().max() <= s and dq.abs().max() > 0.98 * s and abs(float(dq.std()) * 12**0.5 / (2 * s) - 1) < 0.05
    if env_id == "Ant-v5":  # gymnasium's Ant: Gaussian velocities; Humanoid: uniform
        assert abs(float(qvel.std()) / s - 1) < 0.05 and qvel.abs().max() > 2.5 * s
    else:
        assert qvel.abs().max() <= s and abs(float(qvel.std()) * 12**0.5 / (2 * s) - 1) < 0.05
    assert abs(float(qvel.mean())) < 0.05 * s and obs.dtype == torch.float32 and torch.isfinite(obs).all()
    assert torch.equal(obs, env.observation())


def test_time_limit_truncates_then_a_fresh_episode_starts():
    n = 4
    env = AntVecEnv(num_envs=n, max_episode_steps=20)
    obs, _ = env.reset(seed=5)
    zero = torch.zeros(n, 8)
    for t in range(1, 21):  # with zero torques the ant stands: healthy, never terminated
        obs, _, terminated, truncated, info = env.step(zero)
        assert not terminated.any()
        assert bool(truncated.all()) == (t == 20)
    assert info["_final_obs"].all() and torch.equal(info["episode_length"], torch.full((n,), 20))
    assert not torch.equal(obs, info["final_obs"]) and (obs[:, -78:] == 0).all()  # a reset observation
    obs, *_, info = env.step(zero)
    assert not info["_final_obs"].any() and env.episode_length.eq(1).all()


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_trajectory_and_different_seed_differs(env_id: str):
    def rollout(seed: int) -> list[torch.Tensor]:
        env = envs.make(env_id, num_envs=4, seed=seed)
        out = [env.reset()[0]]
        gen = torch.Generator().manual_seed(0)
        high = torch.as_tensor(env.single_action_space.high)
        for _ in range(30):
            actions = (torch.rand(4, len(high), generator=gen) * 2 - 1) * high
            obs, reward, terminated, _, info = env.step(actions)
            out += [obs, reward, terminated, info["final_obs"]]
        return out

    first, again, other = rollout(7), rollout(7), rollout(8)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


# ------------------------------------------------------------------------------------------ bad input
def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mujoco" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r'pip install "podium\[mujoco\]"'):
        envs.make("Ant-v5", num_envs=2)
    for name in ("jax", "mujoco.mjx"):
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda n, *a, missing=name: None if n == missing else real(n, *a)
        )
        with pytest.raises(MissingDependencyError, match=r'pip install (-U )?"podium\[mjx\]"'):
            envs.make("Humanoid-v5", num_envs=2, engine="mjx")


def test_bad_arguments_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="at most about"):
        AntVecEnv(num_envs=10**9)  # checked before anything is allocated
    with pytest.raises(ValueError, match="unknown physics engine 'warp'"):
        AntVecEnv(num_envs=2, engine="warp")
    with pytest.raises(ValueError, match="float64"):
        AntVecEnv(num_envs=2, dtype=torch.float32)
    with pytest.raises(ValueError, match="main_body"):
        AntVecEnv(num_envs=2, main_body="tail")
    with pytest.raises(ValueError, match="no MJCF file"):
        HumanoidVecEnv(num_envs=2, xml_file="humanoid_v9.xml")
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        AntVecEnv(num_envs=0)
    env = AntVecEnv(num_envs=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected actions of shape \(2, 8\)"):
        env.step(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.full((2, 8), float("nan")))
    with pytest.raises(ValueError, match="set_state expects"):
        env.set_state(torch.zeros(2, 15), torch.zeros(2, 15))


def test_gymnasium_keyword_arguments_change_the_formulas_as_in_gymnasium():
    kwargs = {"ctrl_cost_weight": 0.1, "healthy_reward": 2.0, "include_cfrc_ext_in_observation": False}
    genv = gym.make("Ant-v5", **kwargs).unwrapped
    gobs, _ = genv.reset(seed=3)
    env = envs.make("Ant-v5", num_envs=1, **kwargs)
    env.reset(seed=0)
    env.set_state(_t(genv.data.qpos[None]), _t(genv.data.qvel[None]))
    assert env.single_observation_space.shape == genv.observation_space.shape == (27,)
    action = np.full(8, 0.5)
    gobs, greward, *_ = genv.step(action)
    state, reward, _ = env._dynamics(env.state, env._check_actions(_t(action[None])))
    assert torch.equal(env._observe(state)[0], _t(gobs))
    assert abs(float(reward[0]) - greward) < REWARD_TOL


def test_humanoid_charges_the_contact_costs_floor_even_with_a_weight_of_zero():
    """contact_cost_weight=0 without the contact forces observed skipped the contact term; gymnasium clamps
    the zero cost into contact_cost_range, so a floor above 0 is charged every step."""
    kwargs = {"contact_cost_weight": 0.0, "contact_cost_range": (1.0, 10.0), "include_cfrc_ext_in_observation": False}
    genv = gym.make("Humanoid-v5", **kwargs).unwrapped
    genv.reset(seed=1)
    env = envs.make("Humanoid-v5", num_envs=1, **kwargs)
    env.reset(seed=0)
    env.set_state(_t(genv.data.qpos[None].copy()), _t(genv.data.qvel[None].copy()))
    _, greward, *_ = genv.step(np.zeros(17))
    _, reward, *_ = env.step(torch.zeros(1, 17, dtype=torch.float64))
    assert float(reward[0]) == pytest.approx(greward, rel=1e-6)  # the reward comes out in float32


def test_an_mjcf_file_of_ones_own_resolves_as_in_gymnasium(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """xml_file="./my_ant.xml" works in gymnasium (a path starting with "." or "~" is a path) and was looked
    up among gymnasium's bundled assets."""
    from podium.envs.locomotion.engine import asset_path

    bundled = asset_path("ant.xml")
    (tmp_path / "my_ant.xml").write_text(bundled.read_text())
    monkeypatch.chdir(tmp_path)
    assert asset_path("./my_ant.xml") == tmp_path / "my_ant.xml"
    assert AntVecEnv(num_envs=1, xml_file="./my_ant.xml").single_observation_space.shape == (105,)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert asset_path("~/my_ant.xml") == tmp_path / "my_ant.xml"
    with pytest.raises(ValueError, match=r"among gymnasium's MuJoCo assets .*give its path, e.g. './my_ant.xml'"):
        asset_path("my_ant.xml")
    with pytest.raises(ValueError, match=r"'\./missing\.xml' does not exist"):
        asset_path("./missing.xml")


# ------------------------------------------------------------------------------------------ pods
SAC_FAST = {"learning_starts": 64, "batch_size": 64, "buffer_size": 4096}  # the preset's buffer holds 1M
FAST = {"tensorboard": False, "eval_episodes": 2, "eval_mode": "inline", "confirm_episodes": 0, "seed": 0}


@pytest.mark.parametrize(
    ("env_id", "algo", "fields"),
    [
        ("Ant-v5", "ppo", {"num_envs": 4, "hparams": {"rollout_size": 256, "update_epochs": 1}}),
        ("Ant-v5", "sac", {"num_envs": 4, "hparams": SAC_FAST}),
        ("HalfCheetah-v5", "ppo", {"num_envs": 2, "hparams": {"rollout_size": 256, "update_epochs": 1}}),
        ("HalfCheetah-v5", "sac", {"num_envs": 2, "hparams": SAC_FAST}),
    ],
    ids=["ppo-ant", "sac-ant", "ppo-halfcheetah-gym", "sac-halfcheetah-gym"],
)
def test_pods_train_a_few_iterations(tmp_path, env_id: str, algo: str, fields: dict):
    if env_id == "HalfCheetah-v5":  # gymnasium's own env through GymVecEnv, in this process
        fields = {**fields, "env_kwargs": {"vectorization": "sync"}, "eval_env_kwargs": {"max_episode_steps": 50}}
    else:
        fields = {**fields, "eval_env_kwargs": {"max_episode_steps": 50}}
    report = podium.train(env_id, algo, steps=512, eval_every=512, run_dir=tmp_path / "run", **FAST, **fields)
    assert report.steps >= 512 and np.isfinite(report.score_mean)
    policy = podium.load(tmp_path / "run")
    genv = gym.make(env_id)
    obs, _ = genv.reset(seed=0)
    action = policy.act(obs[None])[0]
    assert genv.action_space.contains(action.astype(np.float32))


@pytest.mark.slow
def test_sac_reaches_halfcheetah_1500_with_the_defaults(tmp_path):
    """What a user runs — ``podium.train("HalfCheetah-v5", "sac", target=1500)`` with podium's defaults (the
    rl-zoo preset, the evaluator service, confirmation on 100 fresh episodes) — reaches the score, and the saved
    policy scores it on gymnasium's own env with seeds training never used. 5-10 minutes on 2 cores."""
    report = podium.train(
        "HalfCheetah-v5",
        "sac",
        target=1500,
        seed=0,
        seconds=1800,
        run_dir=tmp_path / "run",
        tensorboard=False,
        env_kwargs={"vectorization": "sync"},  # in-process: the 2-core CI machine has no core to spare
    )
    assert report.reached_target, f"best {report.score_mean:.0f} after {report.steps} steps"
    # 100 more episodes (seeds nothing used), HalfCheetah's are all 1000 steps: 4 batches of 25 sub-envs. A
    # policy confirmed at 1500 on 100 episodes may score a little under it on another 100 (HalfCheetah policies
    # sometimes flip over: single episodes range from about -100 to 2500), so the bar is 3 standard errors lower
    policy = podium.load(tmp_path / "run")
    genv = gym.make_vec("HalfCheetah-v5", num_envs=25, vectorization_mode="sync")
    returns = []
    for batch in range(4):
        obs, _ = genv.reset(seed=20_000 + 25 * batch)
        total = np.zeros(25)
        for _ in range(1000):
            obs, reward, terminated, truncated, _ = genv.step(policy.act(obs))
            total += reward
        assert truncated.all() and not terminated.any()
        returns += list(total)
    mean, stderr = np.mean(returns), np.std(returns) / np.sqrt(len(returns))
    assert mean >= 1500 - 3 * stderr, (mean, stderr)


def test_base_class_is_the_one_interface_of_both_envs():
    assert issubclass(AntVecEnv, LocomotionVecEnv) and issubclass(HumanoidVecEnv, LocomotionVecEnv)
    env = HumanoidVecEnv(num_envs=2, engine_options={"threads": 1})
    assert env.engine.threads == 1 and repr(env) == "HumanoidVecEnv(num_envs=2, device=cpu, engine='mujoco')"
    assert env.model.opt.solver == mujoco.mjtSolver.mjSOL_PGS  # gymnasium's solver, kept on the C engine


@pytest.mark.parametrize("name", ["ant", "humanoid", "halfcheetah", "hopper"])
def test_example_configs_pass_the_tournament_preflight(name: str):
    """examples/*.yaml for these envs are valid tournaments (checked on the CPU, as ``podium tournament`` does
    before any pod starts; the GPU ones build their env on the MuJoCo C engine there)."""
    from pathlib import Path

    from podium.tournament import load_tournament_config
    from podium.tournament.orchestrator import preflight

    config = load_tournament_config(Path(__file__).resolve().parent.parent / "examples" / f"{name}.yaml")
    preflight(config)
    if name in ("ant", "humanoid"):
        assert config.pod["device"] == "cuda" and config.pod["preset"] is False and config.pool.gpus_per_pod > 0


_FORK_AFTER_GARBAGE = """
import gc, multiprocessing, sys, torch
from podium.envs import make
import podium.machine  # what every pod imports: its fork hook freezes what a child inherits
def child(close_first):
    if close_first:
        gc.unfreeze()  # closed, the env holds no pool: even a child that collects it is safe
    gc.collect()
close_first = sys.argv[1] == "close"
env = make("Ant-v5", num_envs=4)
env.reset(seed=0)
env.step(torch.zeros(4, 8))
if close_first:
    env.close()
env.me = env  # garbage in a cycle, as a finished test or run leaves it
del env
p = multiprocessing.get_context("fork").Process(target=child, args=(close_first,))
p.start()
p.join(30)
print("hung" if p.is_alive() else f"exit {p.exitcode}")
if p.is_alive():
    p.kill()
"""


@pytest.mark.parametrize("how", ["close", "freeze"])
def test_a_forked_child_never_destroys_the_parents_mujoco_thread_pools(how, tmp_path):
    """A pod's forked child (its evaluator) that garbage-collected a MuJoCo env left over in the parent hung
    for ever in the thread pool's destructor: the pool's threads are not in the child. A closed env has
    released its pools; a pod's children never collect what they inherited."""
    import subprocess
    import sys

    script = tmp_path / "fork.py"
    script.write_text(_FORK_AFTER_GARBAGE)
    out = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "exit 0", out.stdout + out.stderr[-2000:]
