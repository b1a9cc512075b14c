"""Networks shared by the algorithms: MLPs, a batched ensemble MLP (twin critics in one matmul), heads."""

from __future__ import annotations

import functools
import itertools
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["Adam", "EnsembleMLP", "activation", "adam", "mlp", "orthogonal_init", "polyak_update", "squashed_gaussian"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


def activation(name: str) -> type[nn.Module]:
    """The activation class for ``name`` (tanh, relu, elu, silu)."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(_ACTIVATIONS)}") from None


def orthogonal_init(layer: nn.Linear, gain: float = math.sqrt(2)) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (the usual choice for policy-gradient nets)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    act: str = "tanh",
    out_gain: float | None = None,
    orthogonal: bool = True,
) -> nn.Sequential:
    """A multilayer perceptron ``in_dim -> hidden... -> out_dim`` (no activation on the output).

    Args:
        act: hidden activation name.
        out_gain: orthogonal gain of the output layer (e.g. 0.01 for policy logits, 1 for values).
        orthogonal: orthogonal init (True) or PyTorch's default init (False).
    """
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for a, b in itertools.pairwise(dims):
        linear = nn.Linear(a, b)
        layers += [orthogonal_init(linear) if orthogonal else linear, activation(act)()]
    head = nn.Linear(dims[-1], out_dim)
    if orthogonal:
        orthogonal_init(head, 1.0 if out_gain is None else out_gain)
    layers.append(head)
    return nn.Sequential(*layers)


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied with one batched matmul: ``[E, B, in] -> [E, B, out]``."""

    def __init__(self, ensemble: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)  # PyTorch's nn.Linear default range
        self.weight = nn.Parameter(torch.empty(ensemble, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """``E`` MLPs with identical shapes evaluated together (e.g. SAC/TD3's twin Q-networks).

    ``forward(x)`` takes ``[B, in]`` (shared input) or ``[E, B, in]`` and returns ``[E, B, out]``.
    """

    def __init__(self, ensemble: int, in_dim: int, hidden: Sequence[int], out_dim: int, act: str = "relu") -> None:
        super().__init__()
        self.ensemble = ensemble
        dims = [in_dim, *hidden, out_dim]
        self.layers = nn.ModuleList(EnsembleLinear(ensemble, a, b) for a, b in itertools.pairwise(dims))
        self.act = activation(act)()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.ensemble, *x.shape)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = self.act(x)
        return x


def adam(
    params: Iterable[nn.Parameter] | list[dict[str, Any]], lr: float, device: torch.device, eps: float = 1e-8
) -> torch.optim.Adam:
    """Adam with the fused kernel where PyTorch has one (CPU, CUDA): a third of the per-step cost of the
    default loop for the small networks of off-policy agents, which take one optimiser step per env step."""
    _defer_dynamo_import()
    return Adam(params, lr=lr, eps=eps, fused=device.type in ("cpu", "cuda"))


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` whose ``step`` does not import ``torch._dynamo`` (see ``_defer_dynamo_import``).

    PyTorch's ``Adam.step`` runs inside a wrapper that imports ``torch._dynamo`` on every call, to put a graph
    break around the step for ``torch.compile``, and turns gradients off. While ``torch._dynamo`` is not
    imported nothing is compiled, so this step turns gradients off and calls the step itself; once it is
    imported, it calls PyTorch's wrapper as ``torch.optim.Adam`` would. The arithmetic is PyTorch's."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if _PLAIN_STEP is None or "torch._dynamo" in sys.modules or self.defaults["differentiable"]:
            return _ADAM_STEP(self, closure)
        with torch.no_grad():
            return _PLAIN_STEP(self, closure)


def _grad_wrapped_step() -> Callable[..., Any]:
    """PyTorch's ``Adam.step`` as its gradient-mode wrapper (``__wrapped__``: the step itself), without the
    profiling hooks that the first ``Adam`` built adds to the class (``Adam`` here gets its own)."""
    step = torch.optim.Adam.__dict__["step"]
    return step.__wrapped__ if getattr(step, "hooked", False) else step


_ADAM_STEP = _grad_wrapped_step()
_PLAIN_STEP: Callable[..., Any] | None = getattr(_ADAM_STEP, "__wrapped__", None)  # None: another PyTorch's layout


@functools.cache
def _defer_dynamo_import() -> None:
    """Keep the optimiser from importing ``torch._dynamo`` (about a second of every fresh process here) until
    something else does.

    PyTorch wraps ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` in
    ``torch._disable_dynamo``, whose wrapper imports ``torch._dynamo`` on its first call to build the
    disabled function, which it caches on the wrapped function (``__dynamo_disable``). Nothing can be traced
    while ``torch._dynamo`` is not imported, so until then that disabled function behaves as the function
    itself: this pre-fills the cache with a stand-in that calls the function directly while the module is
    absent, and once it is loaded (``torch.compile``, the ONNX exporter) drops itself on its next call so
    that PyTorch's wrapper builds its real disabled function. Where PyTorch's wrapper is not the one this
    expects (another version), nothing changes."""
    disable = getattr(torch, "_disable_dynamo", None)
    if "torch._dynamo" in sys.modules or disable is None:
        return
    probe = disable(lambda: None)
    for wrapper in vars(torch.optim.Optimizer).values():
        fn = getattr(wrapper, "__wrapped__", None)
        if getattr(wrapper, "__code__", None) is not probe.__code__ or fn is None:
            continue
        if getattr(fn, "__dynamo_disable", None) is None:
            setattr(fn, "__dynamo_disable", _until_dynamo(fn, wrapper))


def _until_dynamo(fn: Callable[..., Any], wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` itself while ``torch._dynamo`` is not imported; after that, ``wrapper`` (PyTorch's own)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        fn.__dict__.pop("__dynamo_disable", None)  # PyTorch's wrapper builds its disabled function now
        return wrapper(*args, **kwargs)

    return call


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Move ``target``'s parameters towards ``online``'s: ``target <- (1 - tau) target + tau online``
    (``tau = 1`` copies). One fused call over all parameters."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


def squashed_gaussian(
    mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised sample ``a = tanh(mean + std * noise)`` and its log-density ``log p(a)``.

    With ``u = mean + std * noise`` (``noise ~ N(0, I)``), ``log p(a) = log N(u) - sum log(1 - tanh(u)^2)``;
    the Jacobian term is computed as ``2 (log 2 - u - softplus(-2u))``, which stays finite where
    ``tanh(u)`` rounds to +-1.

    Args:
        mean, log_std, noise: ``[B, A]``.

    Returns:
        ``(actions [B, A] in (-1, 1), log_prob [B])``; gradients flow into ``mean`` and ``log_std``.
    """
    u = mean + log_std.exp() * noise
    log_prob = -0.5 * noise.square() - log_std - _LOG_SQRT_2PI
    log_det = 2.0 * (_LOG_2 - u - nn.functional.softplus(-2.0 * u))
    return torch.tanh(u), (log_prob - log_det).sum(-1)
