"""podium on a GPU: every path that runs there, checked where it runs (skipped on a machine without CUDA).

CI has no GPU; these run on a lent GPU machine through ``benchmarks/gpu.sh`` (its first step). To check the
tests themselves on a CPU, run them with ``PODIUM_TEST_DEVICE=cpu``: the same code with the device swapped.

* every tensor-native env steps on the GPU as it does on the CPU (same seed and actions: the same
  trajectory to float32 rounding, the same episode ends) and keeps its tensors there;
* every algorithm trains a pod there, saves, loads on the GPU and on the CPU, and acts the same on both;
* a pod's evaluator beside training (thread mode: a fork loses CUDA) and a confirmed target;
* several learners fusing on one GPU; pods of a tournament sharing the GPU (process backend);
* MJX locomotion on the GPU (where mujoco-mjx and a JAX that sees the GPU are installed).
"""

from __future__ import annotations

import os

# the MJX test compiles each env once: XLA's cheaper passes halve that (as in tests/test_locomotion_mjx.py)
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest
import torch

import podium
import podium.envs as envs

DEVICE = os.environ.get("PODIUM_TEST_DEVICE", "cuda")
REQUIRED = os.environ.get("PODIUM_REQUIRE_GPU") == "1"  # benchmarks/gpu.sh: a GPU machine that skips has failed
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    if REQUIRED:
        raise RuntimeError("PODIUM_REQUIRE_GPU=1 but torch sees no CUDA GPU here")
    pytest.skip("no CUDA GPU here (PODIUM_TEST_DEVICE=cpu runs these tests on the CPU)", allow_module_level=True)

FAST = {"tensorboard": False, "eval_episodes": 4, "device": DEVICE}
CLASSIC = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]


def _actions(env: envs.VecEnv, steps: int, seed: int) -> list[torch.Tensor]:
    """``steps`` batches of random actions for ``env``, drawn on the CPU (the same for every device)."""
    rng = np.random.default_rng(seed)
    space = env.action_space
    if env.discrete:
        return [torch.as_tensor(rng.integers(0, int(env.single_action_space.n), env.num_envs)) for _ in range(steps)]
    low, high = space.low, space.high
    return [torch.as_tensor(rng.uniform(low, high).astype(np.float32)) for _ in range(steps)]


@pytest.mark.parametrize("env_id", [*CLASSIC, "StockTrading-v0"])
def test_a_tensor_env_steps_on_the_gpu_as_on_the_cpu(env_id):
    """The GPU's random numbers are not the CPU's (and an accelerator redraws every sub-env's fresh state each
    step, branch-free), so both envs start from the CPU's states and are compared while no episode has ended
    in a sub-env; the GPU env then runs on through every time limit (MountainCarContinuous: 999 steps)."""
    n, steps = 64, 1_000
    cpu = envs.make(env_id, num_envs=n, device="cpu", seed=3)
    gpu = envs.make(env_id, num_envs=n, device=DEVICE, seed=4)
    cpu.reset(seed=3)
    obs_g, _ = gpu.reset(seed=4)  # another stream, as a GPU's would be (on the CPU too, to check this test)
    assert obs_g.device.type == torch.device(DEVICE).type
    gpu.state = tuple(part.to(gpu.device) for part in cpu.state)  # the same starting states
    going = torch.ones(n, dtype=torch.bool)  # sub-envs whose first episode has not ended on either side
    compared = ends = 0
    for t, a in enumerate(_actions(cpu, steps, seed=4)):
        oc, rc, tc, uc, _ = cpu.step(a)
        og, rg, tg, ug, _ = gpu.step(a.to(gpu.device))
        assert og.device == gpu.device and rg.device == gpu.device and tg.device == gpu.device
        if t < 50:  # chaotic dynamics amplify float32 rounding: compare the early steps closely
            torch.testing.assert_close(rg.cpu()[going], rc[going], rtol=1e-3, atol=1e-3)
            assert torch.equal(tg.cpu()[going], tc[going]) and torch.equal(ug.cpu()[going], uc[going])
            going &= ~(tc | uc | tg.cpu() | ug.cpu())
            torch.testing.assert_close(og.cpu()[going], oc[going], rtol=1e-3, atol=1e-3)
            compared += int(going.sum())
        ends += int((tg | ug).sum())
        assert torch.isfinite(og).all() and torch.isfinite(rg).all()
    assert compared > 0  # some sub-envs ran side by side for a while
    assert ends > 0 or env_id == "StockTrading-v0"  # the GPU env's episodes ended and reset themselves
    cpu.close()
    gpu.close()


@pytest.mark.parametrize(
    ("algo", "env_id"),
    [("ppo", "Pendulum-v1"), ("ppo", "CartPole-v1"), ("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"),
     ("ddpg", "Pendulum-v1"), ("dqn", "CartPole-v1")],
)  # fmt: skip
def test_every_algorithm_trains_saves_and_loads_on_the_gpu(tmp_path, algo, env_id):
    report = podium.train(env_id, algo, steps=2_048, run_dir=tmp_path / "run", seed=0, eval_every=1_024, **FAST)
    assert report.steps >= 2_048 and np.isfinite(report.score_mean)
    on_gpu = podium.load(tmp_path / "run", device=DEVICE)
    on_cpu = podium.load(tmp_path / "run", device="cpu")
    obs = envs.make(env_id, num_envs=32, seed=1).reset(seed=1)[0]
    a_gpu = on_gpu.act(obs.to(DEVICE))
    assert a_gpu.device.type == torch.device(DEVICE).type
    torch.testing.assert_close(a_gpu.cpu(), on_cpu.act(obs), rtol=1e-4, atol=1e-4)
    # a stochastic action of a Gaussian policy keeps the learned exploration on either device
    if algo == "ppo" and env_id == "Pendulum-v1":
        spread = on_gpu.act(obs.to(DEVICE).repeat(64, 1), deterministic=False).std().item()
        assert spread > 0.0


def test_ppo_learns_cartpole_on_the_gpu_and_confirms_it(tmp_path):
    report = podium.train("CartPole-v1", "ppo", target=195, seconds=80, run_dir=tmp_path / "run", seed=0, **FAST)
    assert report.reached_target and report.stop_reason == "target"
    assert report.confirmed_mean is not None and report.confirmed_mean >= 195


def test_two_learners_fuse_on_one_gpu(tmp_path):
    report = podium.train("Pendulum-v1", "ppo", steps=8_192, learners=2, run_dir=tmp_path / "run", seed=0, **FAST)
    assert report.steps >= 8_192 and np.isfinite(report.score_mean)


def test_pods_of_a_tournament_share_the_gpu(tmp_path):
    from podium.tournament import tournament

    gpus = {"gpus_per_pod": 0.5} if DEVICE.startswith("cuda") else {}
    report = tournament(
        run_dir=tmp_path / "run",
        progress=False,
        env="Pendulum-v1",
        algos={"ppo": 1, "sac": 1},
        pod={"steps": 2_048, "eval_episodes": 4, "tensorboard": False, "device": DEVICE},
        backend="process",
        steps=4 * 2_048,
        pool={"max": 2, "min": 2, "cpus_per_pod": 1, **gpus},
    )
    assert report.pods_failed == 0 and report.pods_started >= 2, report.message
    assert report.total_steps >= 4 * 2_048 and report.champion is not None
    assert {e.algo for e in report.entries} == {"ppo", "sac"}


@pytest.mark.parametrize("env_id", ["Ant-v5", "Humanoid-v5"])
def test_mjx_locomotion_steps_on_the_gpu(env_id):
    if REQUIRED:  # on the GPU machine an MJX that does not import is a failure, not a skip
        import jax
        import mujoco.mjx  # noqa: F401
    else:
        pytest.importorskip("mujoco.mjx", reason='the MJX engine needs the "mjx" extra')
        jax = pytest.importorskip("jax")
    if DEVICE.startswith("cuda") and not any(d.platform == "gpu" for d in jax.devices()):
        pytest.fail("torch sees a GPU but JAX does not: install jax with its CUDA plugin")
    env = envs.make(env_id, num_envs=256, device=DEVICE, seed=0, engine="mjx")
    obs, _ = env.reset(seed=0)
    assert obs.device.type == torch.device(DEVICE).type
    fell = 0
    for a in _actions(env, 40, seed=1):
        obs, reward, terminated, _, _ = env.step(a.to(env.device))
        assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
        fell += int(terminated.sum())
    assert fell > 0 or env_id == "Ant-v5"  # random Humanoids fall within 40 steps (and are reset there)
    env.close()
