"""Where a PPO learning phase's time goes: podium's gradient step against SB3's, same task, same run.

On Pendulum-v1, each side with its own settings for the task (podium: its preset, gSDE, rollouts of 2,048
transitions in 8 minibatches of 256, 10 epochs; SB3: rl-baselines3-zoo's, gSDE, 4 x 1,024 transitions in
minibatches of 64, 10 epochs), one rollout is collected and its learning phase timed (``--repeats`` times on a
copy of the same rollout; the median), then divided by its gradient steps. SB3 runs a second time with
podium's minibatch of 256, so that the cost of one gradient step compares like for like. Last, podium's phase
is profiled (``torch.profiler``) and its self CPU time summed by kind of op: what a step is made of.

    python benchmarks/update_cost.py                 # one torch thread (a pod's default on a shared machine)
    python benchmarks/update_cost.py --threads 2

Needs the "bench" extra (Stable-Baselines3): ``pip install -e ".[bench]"``.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # vs_sb3 beside this file

KINDS = {  # kind of op -> substrings of the profiler's op names (first match wins)
    "matmul (forward and backward)": ("addmm", "aten::mm", "bmm", "matmul"),
    "tanh and its backward": ("tanh",),
    "Adam step": ("adam", "Optimizer.step"),
    "gradient-norm clip": ("norm", "foreach", "clamp_max"),
    "autograd engine": ("autograd::engine", "Backward"),
    # a Python number in an op (0.5 * x, x + 1e-8, Adam's step counts + 1) becomes a tensor and is cast
    "casts and copies (of numbers made tensors)": ("aten::to", "_to_copy", "copy_", "empty_strided"),
}


def podium_phase(seed: int, repeats: int) -> tuple[float, int, tuple[Any, Any, torch.Tensor]]:
    """(median seconds of one learning phase, its gradient steps, (the agent, its filled rollout buffer, the
    observation after it)) for podium's Pendulum PPO preset."""
    from podium.api import make_spec
    from podium.pod import Pod
    from podium.pod.worker import Worker

    with tempfile.TemporaryDirectory() as tmp:
        spec = make_spec(None, env="Pendulum-v1", algo="ppo", seed=seed, steps=100_000, tensorboard=False)
        pod = Pod(spec, tmp, progress=False)
        agent = pod.agent
        worker = Worker(pod.env, agent, seed=seed)
        buffer = agent.make_buffer()
        worker.collect(buffer)
        c = agent.config
        if c.target_kl is not None:
            raise SystemExit("error: the preset sets target_kl: a phase that stops early has no fixed step count")
        steps = c.update_epochs * c.num_minibatches
        agent.learn(copy.deepcopy(buffer), worker.obs)  # warm-up: first-call costs
        times = []
        for _ in range(repeats):
            b = copy.deepcopy(buffer)
            start = time.perf_counter()
            agent.learn(b, worker.obs)
            times.append(time.perf_counter() - start)
        return statistics.median(times), steps, (agent, buffer, worker.obs)


def sb3_phase(seed: int, repeats: int, batch_size: int) -> tuple[float, int]:
    """(median seconds of SB3's ``train()`` on one rollout, its gradient steps) with rl-zoo's Pendulum PPO."""
    from stable_baselines3.common.utils import configure_logger
    from vs_sb3 import sb3_model

    model, _ = sb3_model("ppo-pendulum", seed)  # rl-zoo's settings, as vs_sb3.py times them
    model.batch_size = batch_size  # what train() splits each epoch into
    env = model.env
    model._setup_learn(total_timesteps=10**6)
    model.set_logger(configure_logger(verbose=0))
    model.collect_rollouts(model.env, _NoCallback(), model.rollout_buffer, n_rollout_steps=model.n_steps)
    state = copy.deepcopy(model.policy.state_dict()), copy.deepcopy(model.policy.optimizer.state_dict())
    steps = model.n_epochs * (model.n_steps * model.n_envs // batch_size)
    model.train()  # warm-up
    times = []
    for _ in range(repeats):
        model.policy.load_state_dict(state[0])
        model.policy.optimizer.load_state_dict(state[1])
        start = time.perf_counter()
        model.train()
        times.append(time.perf_counter() - start)
    env.close()
    return statistics.median(times), steps


class _NoCallback:
    """The callback protocol ``collect_rollouts`` calls, doing nothing."""

    def on_rollout_start(self) -> None: ...
    def on_rollout_end(self) -> None: ...
    def update_locals(self, *_: object) -> None: ...
    def on_step(self) -> bool:
        return True


def breakdown(agent: Any, buffer: Any, next_obs: torch.Tensor) -> dict[str, float]:
    """Self CPU seconds of one podium learning phase by kind of op (``KINDS``; the rest as "other ops")."""
    from torch.profiler import profile

    b = copy.deepcopy(buffer)
    with profile() as prof:
        agent.learn(b, next_obs)
    out: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        name = event.key
        kind = next((k for k, keys in KINDS.items() if any(s.lower() in name.lower() for s in keys)), "other ops")
        out[kind] += event.self_cpu_time_total / 1e6
    return dict(out)


def _cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), if it names one."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def main() -> None:
    if importlib.util.find_spec("stable_baselines3") is None:
        raise SystemExit('error: this benchmark needs Stable-Baselines3, the "bench" extra: pip install -e ".[bench]"')
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both sides")
    parser.add_argument("--repeats", type=int, default=5, help="timed learning phases per contestant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cpu = _cpu_model() or platform.machine()
    print(f"machine: {cpu}, torch {torch.__version__}, {args.threads} torch thread(s), {args.repeats} repeats")

    p_time, p_steps, (agent, buffer, next_obs) = podium_phase(args.seed, args.repeats)
    rows = [("podium (preset: minibatch 256)", p_time, p_steps, 256)]
    for batch in (64, 256):
        s_time, s_steps = sb3_phase(args.seed, args.repeats, batch)
        label = "SB3 (rl-zoo: minibatch 64)" if batch == 64 else "SB3 with minibatch 256"
        rows.append((label, s_time, s_steps, batch))
    podium_step = p_time / p_steps
    header = f"{'contestant':34s} {'phase s':>8s} {'steps':>6s} {'ms/step':>8s} {'us/sample':>10s}"
    print(f"\n{header} {'step vs podium':>15s}")
    for label, seconds, steps, batch in rows:
        step = seconds / steps
        print(
            f"{label:34s} {seconds:8.3f} {steps:6d} {step * 1e3:8.3f} {step / batch * 1e6:10.2f} "
            f"{step / podium_step:14.2f}x"
        )
    parts = breakdown(agent, buffer, next_obs)
    total = sum(parts.values())
    print(f"\npodium's phase by kind of op (self CPU time, profiled: {total:.3f} s in all, {p_steps} steps)")
    for kind, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:44s} {seconds * 1e3 / p_steps:7.3f} ms/step  {100 * seconds / total:5.1f}%")


if __name__ == "__main__":
    main()
