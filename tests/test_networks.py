"""The shared networks: the MLP's layout and initialisation, the batched ensemble against separate MLPs, Adam's
construction and its step (which leaves ``torch._dynamo`` unimported), the Polyak step and activation names."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from podium.algos import networks
from podium.algos.networks import EnsembleMLP, activation, adam, mlp, orthogonal_init, polyak_update


def test_mlp_stacks_linear_layers_with_the_activation_between_and_none_after_the_head():
    net = mlp(3, (8, 5), 2, "silu")
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.SiLU, nn.Linear, nn.SiLU, nn.Linear]
    assert [(m.in_features, m.out_features) for m in net if isinstance(m, nn.Linear)] == [(3, 8), (8, 5), (5, 2)]
    assert [type(m) for m in mlp(3, (), 2)] == [nn.Linear]  # no hidden layer: the head alone
    assert isinstance(mlp(3, (4,), 2)[1], nn.Tanh)  # tanh by default


def test_orthogonal_init_scales_orthonormal_rows_by_the_gain_and_zeroes_the_bias():
    net = mlp(6, (4,), 3, out_gain=0.5)
    hidden, head = net[0], net[-1]
    torch.testing.assert_close(hidden.weight @ hidden.weight.T, 2.0 * torch.eye(4), atol=1e-5, rtol=0)  # gain sqrt 2
    torch.testing.assert_close(head.weight @ head.weight.T, 0.25 * torch.eye(3), atol=1e-5, rtol=0)
    assert not hidden.bias.any() and not head.bias.any()
    unit = mlp(6, (4,), 3)[-1]  # the head's gain defaults to 1
    torch.testing.assert_close(unit.weight @ unit.weight.T, torch.eye(3), atol=1e-5, rtol=0)
    layer = orthogonal_init(nn.Linear(5, 2))
    torch.testing.assert_close(layer.weight @ layer.weight.T, 2.0 * torch.eye(2), atol=1e-5, rtol=0)


def test_mlp_keeps_pytorchs_default_init_when_not_orthogonal():
    torch.manual_seed(0)
    net = mlp(6, (4,), 3, out_gain=0.5, orthogonal=False)
    for layer in (net[0], net[-1]):
        bound = 1 / math.sqrt(layer.in_features)
        assert bool(layer.bias.abs().gt(0).all()) and float(layer.weight.detach().abs().max()) <= bound
    head = net[-1]
    assert not torch.allclose(head.weight @ head.weight.T, 0.25 * torch.eye(3), atol=1e-2)


def test_the_ensemble_equals_separate_mlps_with_the_same_weights_on_shared_or_separate_inputs():
    torch.manual_seed(0)
    ensemble = EnsembleMLP(3, 4, (8, 6), 2, "elu")
    assert ensemble.ensemble == 3 and isinstance(ensemble.act, nn.ELU)
    assert [tuple(layer.weight.shape) for layer in ensemble.layers] == [(3, 4, 8), (3, 8, 6), (3, 6, 2)]
    x = torch.randn(5, 4)
    separate = torch.randn(3, 5, 4)

    def member(i: int, inputs: torch.Tensor) -> torch.Tensor:
        h = inputs
        for j, layer in enumerate(ensemble.layers):
            h = h @ layer.weight[i] + layer.bias[i]
            if j < len(ensemble.layers) - 1:
                h = nn.functional.elu(h)
        return h

    torch.testing.assert_close(ensemble(x), torch.stack([member(i, x) for i in range(3)]))
    torch.testing.assert_close(ensemble(separate), torch.stack([member(i, separate[i]) for i in range(3)]))
    for layer in ensemble.layers:  # PyTorch's nn.Linear range, different per member
        bound = 1 / math.sqrt(layer.weight.shape[1])
        assert float(layer.weight.detach().abs().max()) <= bound and float(layer.bias.detach().abs().max()) <= bound
        assert float(layer.weight.detach().abs().max()) > 0.8 * bound and not torch.equal(
            layer.weight[0], layer.weight[1]
        )
    assert [tuple(layer.bias.shape) for layer in ensemble.layers] == [(3, 1, 8), (3, 1, 6), (3, 1, 2)]
    assert isinstance(EnsembleMLP(2, 4, (8,), 1).act, nn.ReLU)  # ReLU by default


def test_adam_uses_the_fused_kernel_on_cpu_and_the_given_rate_and_epsilon():
    params = [nn.Parameter(torch.zeros(3))]
    opt = adam(params, 3e-4, torch.device("cpu"), eps=1e-5)
    group = opt.param_groups[0]
    assert group["lr"] == 3e-4 and group["eps"] == 1e-5 and group["fused"] is True
    assert adam(params, 1e-3, torch.device("cpu")).param_groups[0]["eps"] == 1e-8
    assert not adam(params, 1e-3, torch.device("meta")).param_groups[0]["fused"]


def test_polyak_moves_every_target_parameter_a_fraction_tau_towards_the_online_one():
    torch.manual_seed(0)
    online, target = mlp(3, (4,), 2), mlp(3, (4,), 2)
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, online, 0.25)
    for t, b, o in zip(target.parameters(), before, online.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * o)
    polyak_update(target, online, 1.0)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters(), strict=True))


def test_activations_by_name_and_a_clear_error_for_an_unknown_one():
    assert [activation(n) for n in ("tanh", "relu", "elu", "silu")] == [nn.Tanh, nn.ReLU, nn.ELU, nn.SiLU]
    with pytest.raises(ValueError, match=r"unknown activation 'gelu'; choose one of tanh, relu, elu, silu"):
        activation("gelu")


def _adam_trajectory(make, steps: int = 6, **kwargs) -> tuple[list[torch.Tensor], int]:
    """The parameters after ``steps`` steps of ``make(params, **kwargs)`` on fixed gradients, and how many times
    a step pre-hook ran."""
    gen = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(4, 3, generator=gen)), nn.Parameter(torch.randn(3, generator=gen))]
    opt = make(params, **kwargs)
    calls = []
    opt.register_step_pre_hook(lambda *_: calls.append(1))
    for _ in range(steps):
        opt.zero_grad()
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    state = opt.state_dict()
    opt.load_state_dict(state)
    return [p.detach().clone() for p in params], len(calls)


@pytest.mark.parametrize("fused", [True, False])
def test_podiums_adam_steps_exactly_as_torchs_and_runs_its_hooks_once(fused):
    ours, ours_calls = _adam_trajectory(networks.Adam, lr=1e-2, eps=1e-5, fused=fused)
    theirs, their_calls = _adam_trajectory(torch.optim.Adam, lr=1e-2, eps=1e-5, fused=fused)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    assert ours_calls == their_calls == 6


def test_once_torch_dynamo_is_imported_adam_steps_through_pytorchs_own_wrapper(monkeypatch):
    """PyTorch's step wrapper puts a graph break on each side of the step, for ``torch.compile``: with
    ``torch._dynamo`` loaded, podium's step must go through it (before, it must not need it)."""
    import torch._dynamo

    breaks = []
    monkeypatch.setattr(torch._dynamo, "graph_break", lambda: breaks.append(1))
    ours, _ = _adam_trajectory(networks.Adam, steps=3, lr=1e-2)
    theirs, _ = _adam_trajectory(torch.optim.Adam, steps=3, lr=1e-2)
    assert len(breaks) == 2 * 3 * 2  # two per step, ours and theirs alike
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_a_pod_trains_checkpoints_and_resumes_without_importing_torch_dynamo(tmp_path):
    """``torch._dynamo`` costs about a second per fresh process (every pod process, every CLI command); the
    optimiser imported it on its construction and on every step."""
    code = f"""
import sys, podium
podium.train("CartPole-v1", "ppo", steps=1024, run_dir={str(tmp_path / "ppo")!r}, progress=False)
podium.train(resume={str(tmp_path / "ppo")!r}, steps=2048, progress=False)
podium.train("Pendulum-v1", "sac", steps=1500, run_dir={str(tmp_path / "sac")!r}, progress=False)
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout
