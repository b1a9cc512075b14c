"""MuJoCo XLA (MJX) on a GPU — or on the CPU at small sizes, for tests — behind the engine interface.

Each call is one ``jax.jit(jax.vmap(...))`` over the worlds. Tensors cross between torch and JAX through
DLPack without copies: ``jax.dlpack.from_dlpack(tensor)`` views torch's memory as a JAX array (JAX
reads it, never writes it, and nothing is donated) and ``torch.from_dlpack(array)`` views JAX's
result as a tensor; on a GPU each side makes its stream wait for the other's writes, so no step waits
for the host.

Fidelity choices (MJX is a float32 re-implementation of MuJoCo; see docs/locomotion.md):

* solver: MJX has no PGS, the solver of gymnasium's ``humanoid.xml``; Newton is used instead (on
  MuJoCo C the two agree to 5e-6 in reward over 40 steps: both solve the same problem);
* solver iterations are capped (``iterations``, ``ls_iterations``; the XML's 50/50 or 100/50) because
  under ``vmap`` the solver loop runs until the slowest world converges: MuJoCo C needs 1-2 Newton
  iterations on these models, at most 6, so a cap of 8 costs no accuracy and bounds the worst case;
* JAX is told not to pre-allocate 75% of the GPU (``XLA_PYTHON_CLIENT_PREALLOCATE=false``, set before
  JAX starts) so that torch's networks and buffers share the device with it;
* compiled steps are kept in JAX's persistent cache (``~/.cache/podium/jax`` unless JAX already has a cache
  directory): every sub-env count compiles once (training, evaluation and confirmation envs differ), and a
  tournament's pods, each its own process, would otherwise compile the same programs again.
"""

from __future__ import annotations

import copy
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from podium.envs.locomotion.engine import Engine, check_memory, require

if TYPE_CHECKING:
    import mujoco

__all__ = ["MjxEngine", "to_jax", "to_torch"]

_STATE = ("qpos", "qvel", "qacc_warmstart")


def _backends_started() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # another JAX version: assume the worst
        return True


def _start_jax() -> Any:
    """Import JAX with GPU pre-allocation off (unless the user chose otherwise); the variable is read when JAX
    starts its backends, so a JAX that started them earlier without it gets a warning."""
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE") is None and _backends_started():
        warnings.warn(
            "JAX started before podium's MJX engine without XLA_PYTHON_CLIENT_PREALLOCATE=false: on a GPU it may "
            "hold 75% of the memory torch needs; set that variable before JAX's first use",
            stacklevel=3,
        )
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = require("jax", "the MJX engine")
    if jax.config.jax_compilation_cache_dir is None:  # the user's setting (or JAX_COMPILATION_CACHE_DIR) wins
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "podium" / "jax"
        jax.config.update("jax_compilation_cache_dir", str(cache))
    return jax


def _field(d: Any, key: str) -> Any:
    """``d.key`` for an ``mjx.Data``: newer MJX keeps some fields (``cinert``, ``cfrc_ext``) in ``d._impl``."""
    impl = getattr(d, "_impl", None)
    if impl is not None and key in getattr(type(impl), "__dataclass_fields__", {}):
        return getattr(impl, key)
    return getattr(d, key)


def jax_device(device: torch.device) -> Any:
    """The JAX device that holds torch ``device``'s memory.

    Raises:
        ValueError: JAX cannot see that device (no GPU backend, or fewer GPUs); the message names the fix.
    """
    jax = _start_jax()
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type != "cuda":
        raise ValueError(f"the MJX engine runs on 'cpu' or 'cuda' devices, not {str(device)!r}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    index = device.index or 0
    if not gpus:
        raise ValueError(
            f"JAX cannot see a GPU for device {str(device)!r} (it has only {jax.devices()}): install JAX with "
            'CUDA support (pip install -U "jax[cuda12]", or jax[cuda13] for a CUDA 13 driver) or use device="cpu"'
        )
    if index >= len(gpus):
        raise ValueError(
            f"JAX sees {len(gpus)} GPU(s) {gpus}, not {str(device)!r}: check CUDA_VISIBLE_DEVICES (JAX and torch "
            "number the same visible devices)"
        )
    return gpus[index]


def to_jax(t: torch.Tensor) -> Any:
    """A JAX view of the (contiguous) tensor ``t``: no copy."""
    import jax.dlpack

    return jax.dlpack.from_dlpack(t.detach().contiguous())


def to_torch(a: Any) -> torch.Tensor:
    """A torch view of the JAX array ``a``: no copy."""
    return torch.from_dlpack(a)


class MjxEngine(Engine):
    """``num_worlds`` worlds of MJX (float32) on a GPU or the CPU.

    Args:
        iterations: cap on the constraint solver's iterations (default 8; see the module docstring).
        ls_iterations: cap on its line-search iterations (default 8).
        Other arguments: see :class:`~podium.envs.locomotion.engine.Engine`.

    The first :meth:`step` compiles (a few seconds on a GPU; 20-60 s on a CPU); later calls reuse it.

    Raises:
        MissingDependencyError: JAX or mujoco-mjx is not installed: ``pip install "podium[mjx]"``.
        ValueError: JAX cannot see ``device``, or ``num_worlds`` worlds do not fit in its free memory
            (the message gives a count that does).
    """

    name: ClassVar[str] = "mjx"
    dtype = torch.float32

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        device: torch.device,
        frame_skip: int,
        fields: Iterable[str],
        iterations: int = 8,
        ls_iterations: int = 8,
    ) -> None:
        super().__init__(model, num_worlds, device, frame_skip, fields)
        if iterations <= 0 or ls_iterations <= 0:
            raise ValueError(f"iterations and ls_iterations must be positive, got {iterations}, {ls_iterations}")
        jax = _start_jax()
        self._jax_device = jax_device(self.device)
        mjx = require("mujoco.mjx", "the MJX engine")
        mujoco_ = require("mujoco", "the MJX engine")
        m = copy.copy(model)
        if m.opt.solver == mujoco_.mjtSolver.mjSOL_PGS:
            m.opt.solver = mujoco_.mjtSolver.mjSOL_NEWTON  # MJX has no PGS
        m.opt.iterations = min(int(m.opt.iterations), int(iterations))
        m.opt.ls_iterations = min(int(m.opt.ls_iterations), int(ls_iterations))
        self.model = m
        self.iterations, self.ls_iterations = int(m.opt.iterations), int(m.opt.ls_iterations)
        mx = mjx.put_model(m, device=self._jax_device)
        d0 = mjx.make_data(mx, device=self._jax_device)
        # per world: one Data, ~4 more alive through an RK4 step, plus the solver's temporaries
        per_world = 8 * sum(x.nbytes for x in jax.tree_util.tree_leaves(d0) if hasattr(x, "nbytes"))
        check_memory(self.num_worlds, per_world, self._free_bytes(), f"{self.device} memory", "")
        fields_ = self.fields
        skip = self.frame_skip

        def one_step(mx: Any, d0: Any, qpos: Any, qvel: Any, warm: Any, ctrl: Any) -> tuple[Any, ...]:
            d = d0.replace(qpos=qpos, qvel=qvel, qacc_warmstart=warm, ctrl=ctrl)
            d = jax.lax.fori_loop(0, skip, lambda _, d: mjx.step(mx, d), d)
            d = mjx.rne_postconstraint(mx, d)
            return tuple(_field(d, k) for k in (*_STATE, *fields_))

        def one_forward(mx: Any, d0: Any, qpos: Any, qvel: Any) -> tuple[Any, ...]:
            d = mjx.forward(mx, d0.replace(qpos=qpos, qvel=qvel))
            return tuple(_field(d, k) for k in fields_ if k != "cfrc_ext")

        # the model and the template data are arguments shared by all worlds (not baked-in constants)
        step_fn = jax.jit(jax.vmap(one_step, in_axes=(None, None, 0, 0, 0, 0)))
        forward_fn = jax.jit(jax.vmap(one_forward, in_axes=(None, None, 0, 0)))
        self._step_fn: Callable[..., tuple[Any, ...]] = lambda *args: step_fn(mx, d0, *args)
        self._forward_fn: Callable[..., tuple[Any, ...]] = lambda *args: forward_fn(mx, d0, *args)
        self._qpos0 = torch.as_tensor(m.qpos0, dtype=torch.float32, device=self.device)

    def _free_bytes(self) -> float:
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return float(free)
        from podium.envs.locomotion.mujoco_engine import _free_ram

        return _free_ram()

    def _run(self, fn: Callable[..., tuple[Any, ...]], *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = [to_jax(t.to(self.device, torch.float32)) for t in tensors]
        try:
            outs = fn(*args)
        except Exception as exc:  # XlaRuntimeError has no stable import path
            if "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower():
                raise ValueError(
                    f"{self.num_worlds} sub-envs do not fit in {self.device}'s memory next to what torch holds: "
                    "use fewer sub-envs (num_envs)"
                ) from exc
            raise
        return tuple(to_torch(o) for o in outs)

    def forward(self, qpos: torch.Tensor, qvel: torch.Tensor) -> dict[str, torch.Tensor]:
        self._check_rows(qpos=qpos, qvel=qvel)
        k = qpos.shape[0]
        if k < self.num_worlds:  # one compiled size: pad with the model's reference pose
            qpos = torch.cat((qpos.to(self._qpos0), self._qpos0.expand(self.num_worlds - k, -1)))
            qvel = torch.cat((qvel.to(self._qpos0), qvel.new_zeros(self.num_worlds - k, self.nv).to(self._qpos0)))
        outs = self._run(self._forward_fn, qpos, qvel)
        result = {"qpos": qpos[:k].to(self._qpos0), "qvel": qvel[:k].to(self._qpos0)}
        result["qacc_warmstart"] = torch.zeros(k, self.nv, dtype=torch.float32, device=self.device)
        derived = iter(outs)
        for key in self.fields:
            if key == "cfrc_ext":
                result[key] = torch.zeros(k, self.nbody, 6, dtype=torch.float32, device=self.device)
            else:
                result[key] = next(derived)[:k]
        return result

    def step(
        self, qpos: torch.Tensor, qvel: torch.Tensor, qacc_warmstart: torch.Tensor, ctrl: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        self._check_rows(qpos=qpos, qvel=qvel, qacc_warmstart=qacc_warmstart, ctrl=ctrl)
        if qpos.shape[0] != self.num_worlds:
            raise ValueError(f"{type(self).__name__}.step takes all {self.num_worlds} worlds, got {qpos.shape[0]}")
        outs = self._run(self._step_fn, qpos, qvel, qacc_warmstart, ctrl)
        return dict(zip((*_STATE, *self.fields), outs, strict=True))
