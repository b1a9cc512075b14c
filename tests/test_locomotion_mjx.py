"""The MJX engine (JAX) on the CPU: the GPU engine's code path, at small sizes.

MJX is a float32 re-implementation of MuJoCo, so it is compared with the MuJoCo C engine — which
tests/test_locomotion.py proves identical to gymnasium — within stated tolerances:

* DLPack: the tensors crossing between torch and JAX are views of the same memory (same data pointer);
* Humanoid: trajectories from the same states under the same actions (40 steps, until most have fallen)
  stay within 1e-3 in reward per step (measured 1.9e-4) and within 0.5% of each observation part's scale
  (measured <= 1e-3), and terminate at the same step (MJX runs Newton where gymnasium's XML asks for PGS,
  in float32);
* Ant: one step from contact-free states matches to float32 precision; with contacts trajectories cannot
  match, because MJX orients the capsule-plane friction pyramid differently from MuJoCo C (see
  docs/locomotion.md), so the random-policy reward per step and episode ends are compared as statistics.

Each env compiles once per module (20-60 s on a CPU; the XLA flags below halve it, at the cost of slower
code, which these few hundred steps do not feel). Skipped when JAX or mujoco-mjx is not installed.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # what the engine sets, before JAX starts

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco.batch", reason='the locomotion envs need the "mujoco" extra: pip install "podium[mujoco]"')
jax = pytest.importorskip("jax", reason='the MJX engine needs the "mjx" extra: pip install "podium[mjx]"')
pytest.importorskip("mujoco.mjx", reason='the MJX engine needs the "mjx" extra: pip install "podium[mjx]"')

from podium.envs.locomotion import (  # noqa: E402
    AntVecEnv,
    HumanoidVecEnv,
    mjx_engine,
)
from podium.envs.locomotion.mjx_engine import jax_device, to_jax, to_torch  # noqa: E402

N = 16


def _pair(cls: type, n: int, seed: int, **kwargs) -> tuple:
    """A C-engine env and an MJX env of ``cls`` put in the same initial states."""
    c = cls(num_envs=n, **kwargs)
    c.reset(seed=seed)
    j = cls(num_envs=n, engine="mjx", **kwargs)
    j.reset(seed=seed)
    qpos, qvel = c.state[0].T.clone(), c.state[1].T.clone()
    c.set_state(qpos, qvel)
    j.set_state(qpos, qvel)
    return c, j


# ------------------------------------------------------------------------------------------ DLPack, devices
def test_dlpack_views_share_memory_both_ways():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    a = to_jax(t)
    assert a.unsafe_buffer_pointer() == t.data_ptr() and np.array_equal(np.asarray(a), t.numpy())
    b = jax.numpy.ones((3, 4), dtype=jax.numpy.float32) * 2
    tb = to_torch(b)
    assert tb.data_ptr() == b.unsafe_buffer_pointer() and tb.dtype == torch.float32 and bool((tb == 2).all())


def test_jax_device_errors_name_the_fix():
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    if not gpus:
        with pytest.raises(ValueError, match=r"JAX cannot see a GPU.*jax\[cuda12\]"):
            jax_device(torch.device("cuda", 0))
    with pytest.raises(ValueError, match=r"JAX sees|JAX cannot see"):
        jax_device(torch.device("cuda", len(gpus)))
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        jax_device(torch.device("meta"))
    assert jax_device(torch.device("cpu")).platform == "cpu"


def test_too_many_sub_envs_are_refused_before_compiling():
    with pytest.raises(ValueError, match="at most about"):
        AntVecEnv(num_envs=10**9, engine="mjx")


# ------------------------------------------------------------------------------------------ Humanoid: trajectories
PARTS = {  # Humanoid's observation: qpos[2:], qvel, cinert, cvel, qfrc_actuator, cfrc_ext
    "qpos": slice(0, 22),
    "qvel": slice(22, 45),
    "cinert": slice(45, 175),
    "cvel": slice(175, 253),
    "qfrc_actuator": slice(253, 270),
    "cfrc_ext": slice(270, 348),
}


def test_humanoid_trajectories_track_mujoco_c(monkeypatch: pytest.MonkeyPatch):
    views: list[tuple[int, int]] = []

    def recording_to_torch(a):  # every engine output: a torch view of JAX's buffer
        t = to_torch(a)
        views.append((t.data_ptr(), a.unsafe_buffer_pointer()))
        return t

    monkeypatch.setattr(mjx_engine, "to_torch", recording_to_torch)
    n = 8
    c, j = _pair(HumanoidVecEnv, n, seed=0)
    assert j.engine.model.opt.solver != c.model.opt.solver and j.dtype == torch.float32  # Newton vs PGS
    torch.testing.assert_close(j.observation(), c.observation(), rtol=1e-5, atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    alive = torch.ones(n, dtype=torch.bool)
    worst_reward = 0.0
    worst = dict.fromkeys(PARTS, 0.0)
    for _ in range(40):
        actions = (torch.rand(n, 17, generator=gen) * 2 - 1) * 0.4
        state_c, reward_c, term_c = c._dynamics(c.state, c._check_actions(actions))
        state_j, reward_j, term_j = j._dynamics(j.state, j._check_actions(actions))
        assert torch.equal(term_c[alive], term_j[alive])
        worst_reward = max(worst_reward, float((reward_c - reward_j.double())[alive].abs().max()))
        obs_c, obs_j = c._observe(state_c)[alive], j._observe(state_j).double()[alive]
        for part, cols in PARTS.items():  # worst error relative to the part's scale
            err = (obs_j[:, cols] - obs_c[:, cols]).abs().max() / obs_c[:, cols].abs().max().clamp(min=1.0)
            worst[part] = max(worst[part], float(err))
        alive &= ~term_c
        c.state, j.state = state_c, state_j
        if not alive.any():
            break
    # measured: reward 1.9e-4; qpos 1.3e-4, qvel 9.5e-4, cinert 1.4e-5, cvel 6e-4, qfrc_actuator 5e-8, cfrc_ext 2.6e-4
    assert worst_reward < 1e-3 and all(err < 5e-3 for err in worst.values()), (worst_reward, worst)
    assert not alive.all()  # some fell, at the same step on both engines
    assert views and all(p == q for p, q in views)


# ------------------------------------------------------------------------------------------ Ant
@pytest.fixture(scope="module")
def ants() -> tuple[AntVecEnv, AntVecEnv]:
    return _pair(AntVecEnv, N, seed=1)


def test_only_the_mjx_engine_is_unsafe_to_fork(ants):
    c, j = ants  # a pod keeps its evaluator in-process for j and starts its other processes with spawn
    assert c.fork_safe and not j.fork_safe


def test_ant_contact_free_step_matches_mujoco_c(ants):
    """Lifted 15 cm, no foot touches the floor during the step: the physics has no friction, and MJX gives
    MuJoCo C's observation and reward to float32 precision (the formulas, bodies and fields are the same)."""
    c, j = ants
    c.reset(seed=2)
    qpos, qvel = c.state[0].T.clone(), c.state[1].T.clone()
    qpos[:, 2] += 0.15
    c.set_state(qpos, qvel)
    j.set_state(qpos, qvel)
    actions = torch.rand(N, 8, generator=torch.Generator().manual_seed(3)) * 2 - 1
    state_c, reward_c, term_c = c._dynamics(c.state, c._check_actions(actions))
    state_j, reward_j, term_j = j._dynamics(j.state, j._check_actions(actions))
    assert (c._observe(state_c)[:, 27:] == 0).all()  # no contact force anywhere
    torch.testing.assert_close(j._observe(state_j).double(), c._observe(state_c), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(reward_j.double(), reward_c, rtol=1e-4, atol=1e-4)
    assert torch.equal(term_j, term_c)


def test_ant_random_policy_statistics_match_mujoco_c(ants):
    """Same starts, same actions, 100 steps with auto-reset. Envs 0-7 get calm random torques U(-0.4, 0.4)
    (they stay up: the reward per step is compared), envs 8-15 wild ones U(-1, 1) (they jump out of the
    healthy range: the step of the first termination is compared, censored at 100).

    Tolerances: reward per step 0.15 (measured gap 0.04; the paired standard error of 8 envs is ~0.025, so
    0.15 is > 4 SE beyond the gap; a dropped or mis-scaled term — healthy 1.0, control 0.21, contact — moves
    it by more); first termination 35 steps (measured gap ~15, SE ~12 at 8 envs; a broken termination gives
    1 or 100). The run is seeded and both engines are deterministic on a CPU, so the test cannot flake; a new
    library version re-draws the sample, and then a false failure needs a > 4 SE excursion."""
    c, j = ants
    c.reset(seed=4)
    qpos, qvel = c.state[0].T.clone(), c.state[1].T.clone()
    c.set_state(qpos, qvel)
    j.set_state(qpos, qvel)
    c.episode_length.zero_(), j.episode_length.zero_()
    c.episode_return.zero_(), j.episode_return.zero_()
    gen = torch.Generator().manual_seed(5)
    scale = torch.cat((torch.full((N // 2, 1), 0.4), torch.ones(N // 2, 1)))
    rewards: dict[str, list[torch.Tensor]] = {"c": [], "j": []}
    first = {"c": torch.full((N,), 100), "j": torch.full((N,), 100)}
    for t in range(1, 101):
        actions = (torch.rand(N, 8, generator=gen) * 2 - 1) * scale
        for key, env in (("c", c), ("j", j)):
            _, reward, terminated, _, _ = env.step(actions)
            rewards[key].append(reward.double())
            first[key] = torch.where(terminated & (first[key] == 100), t, first[key])
    mean = {k: torch.stack(v)[:, : N // 2].mean() for k, v in rewards.items()}
    assert 0.5 < float(mean["c"]) < 1.0  # healthy 1.0, minus ~0.21 of control cost, plus forward progress ~0
    assert abs(float(mean["c"] - mean["j"])) < 0.15, mean
    wild = {k: v[N // 2 :].double().mean() for k, v in first.items()}
    assert (first["c"][N // 2 :] < 100).sum() >= 4 and (first["j"][N // 2 :] < 100).sum() >= 4
    assert abs(float(wild["c"] - wild["j"])) < 35, wild
