"""The one small interface between a locomotion env and a physics engine.

An :class:`Engine` simulates ``num_worlds`` copies of one MJCF model. It is *functional*: every call
takes the physical state of the worlds as torch tensors and returns the new state and the derived
quantities the env asked for, as new tensors on the env's device; it keeps nothing the env has to
know about between calls. The env's reward, observation, termination and reset formulas are written
once, in torch, on top of it (``podium/envs/locomotion/ant.py``, ``humanoid.py``).

Two calls make the whole interface:

* :meth:`Engine.forward` — ``mj_forward`` at given positions and velocities (controls and solver
  warm-start zero), as gymnasium's ``reset`` does after ``mj_resetData``; ``cfrc_ext`` stays zero
  there, as in gymnasium's first observation.
* :meth:`Engine.step` — ``frame_skip`` calls of ``mj_step`` with constant controls, then
  ``mj_rnePostConstraint`` (which fills ``cfrc_ext``), as gymnasium's ``do_simulation``. As with
  ``mj_step``, the derived fields describe the last evaluation of the integrator (one substep behind
  the returned ``qpos``/``qvel``) — gymnasium's observations and rewards read exactly these.

Both return a dict of ``[k, ...]`` tensors keyed by MjData field name: ``qpos``, ``qvel``,
``qacc_warmstart`` (the solver's warm start, part of the state between steps: carrying it makes the
C engine bit-identical to gymnasium's single env) and each of :attr:`Engine.fields`.

Engines (:data:`ENGINES`): ``"mujoco"`` (:class:`~podium.envs.locomotion.mujoco_engine.MujocoEngine`,
MuJoCo C through ``mujoco.batch`` on a CPU thread pool, float64, exactly gymnasium's numbers) and
``"mjx"`` (:class:`~podium.envs.locomotion.mjx_engine.MjxEngine`, MuJoCo XLA on a GPU — or the CPU, for
tests — float32, tensors exchanged with torch through DLPack without copies). MuJoCo Warp would be a
third class with the same two methods.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    import mujoco

__all__ = ["ENGINES", "FIELDS", "Engine", "load_model", "make_engine", "require"]

FIELDS = ("xpos", "xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")
"""Derived MjData fields an engine can return (besides the state ``qpos``, ``qvel``, ``qacc_warmstart``)."""

ENGINES = {
    "mujoco": "podium.envs.locomotion.mujoco_engine:MujocoEngine",
    "mjx": "podium.envs.locomotion.mjx_engine:MjxEngine",
}
"""Engine name -> ``module:Class``, imported only when that engine is used."""

_EXTRAS = {  # module -> (what it is, the extra that installs it)
    "mujoco": ("MuJoCo", "mujoco"),
    "mujoco.batch": ("MuJoCo >= 4.0 (its mujoco.batch module)", "mujoco"),
    "jax": ("JAX", "mjx"),
    "mujoco.mjx": ("MuJoCo XLA (mujoco-mjx)", "mjx"),
}


def require(module: str, who: str) -> Any:
    """Import ``module`` or raise a :class:`~podium.envs.gym_adapter.MissingDependencyError` whose one-line
    message names ``who`` needs it and the ``pip install "podium[EXTRA]"`` that provides it."""
    from podium.envs.gym_adapter import MissingDependencyError

    what, extra = _EXTRAS.get(module, (module, "mujoco"))
    top = module.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        upgrade = "-U " if top != module and importlib.util.find_spec(top) is not None else ""
        fix = f'pip install {upgrade}"podium[{extra}]"'
        raise MissingDependencyError(f"{who} needs {what}, which is not installed: {fix}")
    return importlib.import_module(module)


def asset_path(xml_file: str | os.PathLike[str]) -> Path:
    """gymnasium's resolution of ``xml_file``: a path that starts with ``/``, ``.`` (``./``, ``../``) or ``~``
    as given (from the working directory), any other name in gymnasium's MuJoCo assets."""
    text = str(xml_file)
    if text.startswith(("/", ".", "~")):
        path = Path(text).expanduser().absolute()
        if not path.exists():
            raise ValueError(f"MJCF file {text!r} does not exist (from {Path.cwd()})")
        return path
    spec = importlib.util.find_spec("gymnasium")
    assert spec is not None and spec.submodule_search_locations  # gymnasium is a dependency of podium
    full = Path(spec.submodule_search_locations[0]) / "envs" / "mujoco" / "assets" / text
    if not full.exists():
        raise ValueError(
            f"no MJCF file {text!r} among gymnasium's MuJoCo assets ({full.parent}); a file of your own: "
            f"give its path, e.g. './{text}'"
        )
    return full


def load_model(xml_file: str | os.PathLike[str], who: str) -> mujoco.MjModel:
    """The ``MjModel`` gymnasium's MuJoCo envs build from ``xml_file`` (a name in gymnasium's assets or a path)."""
    mujoco = require("mujoco", who)
    return mujoco.MjModel.from_xml_path(str(asset_path(xml_file)))


class Engine(ABC):
    """``num_worlds`` copies of one MuJoCo model, stepped together (see the module docstring).

    Args:
        model: the MuJoCo model (an ``MjModel``; the engine keeps its own copy).
        num_worlds: number of worlds N.
        device: torch device of the tensors the engine takes and returns.
        frame_skip: ``mj_step`` substeps per :meth:`step`.
        fields: derived fields to return, a subset of :data:`FIELDS`.
    """

    name: ClassVar[str]
    dtype: torch.dtype
    """Floating dtype of every tensor the engine takes and returns."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        device: torch.device,
        frame_skip: int,
        fields: Iterable[str],
    ) -> None:
        self.fields = tuple(fields)
        unknown = sorted(set(self.fields) - set(FIELDS))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown field(s) {unknown}; choose from {FIELDS}")
        if frame_skip <= 0:
            raise ValueError(f"frame_skip must be positive, got {frame_skip}")
        self.num_worlds = int(num_worlds)
        self.device = torch.device(device)
        self.frame_skip = int(frame_skip)
        self.nq, self.nv, self.nu, self.nbody = model.nq, model.nv, model.nu, model.nbody

    closed: bool = False
    """Whether :meth:`close` was called (it cannot step then)."""

    def close(self) -> None:
        """Release what the engine holds beyond tensors (thread pools); it cannot step afterwards."""
        self.closed = True

    @abstractmethod
    def forward(self, qpos: torch.Tensor, qvel: torch.Tensor) -> dict[str, torch.Tensor]:
        """``mj_forward`` of ``k <= num_worlds`` states ``qpos [k, nq]``, ``qvel [k, nv]`` with zero controls and
        warm start; returns ``[k, ...]`` tensors (``cfrc_ext``, not computed by ``mj_forward``, is zero)."""

    @abstractmethod
    def step(
        self, qpos: torch.Tensor, qvel: torch.Tensor, qacc_warmstart: torch.Tensor, ctrl: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Advance all N worlds by ``frame_skip`` substeps with controls ``ctrl [N, nu]``, then run
        ``mj_rnePostConstraint``; returns the new state and the derived fields, ``[N, ...]`` each."""

    def _check_rows(self, **tensors: torch.Tensor) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__}: the env was closed; make a new one")
        width = {"qpos": self.nq, "qvel": self.nv, "qacc_warmstart": self.nv, "ctrl": self.nu}
        rows = {t.shape[0] for t in tensors.values()}
        for key, t in tensors.items():
            if t.ndim != 2 or t.shape[1] != width[key] or len(rows) != 1 or t.shape[0] > self.num_worlds:
                raise ValueError(
                    f"{type(self).__name__}: {key} must be [k, {width[key]}] with k <= {self.num_worlds}, "
                    f"the same k for every input; got {tuple(t.shape)}"
                )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_worlds={self.num_worlds}, device={self.device}, fields={self.fields})"


def check_memory(num_worlds: int, bytes_per_world: float, available: float, where: str, fix: str) -> None:
    """Raise a ValueError naming the largest count that fits when ``num_worlds`` worlds cannot fit in
    ``available`` bytes (with 10% headroom)."""
    need = num_worlds * bytes_per_world
    if need > 0.9 * available:
        most = max(int(0.9 * available // bytes_per_world), 0)
        raise ValueError(
            f"{num_worlds} sub-envs need about {need / 2**30:.1f} GiB of {where}, but only "
            f"{available / 2**30:.1f} GiB are free: use at most about {most} sub-envs (num_envs={most}){fix}"
        )


def make_engine(
    name: str,
    model: mujoco.MjModel,
    num_worlds: int,
    device: torch.device,
    frame_skip: int,
    fields: Iterable[str],
    **options: Any,
) -> Engine:
    """Build engine ``name`` (a key of :data:`ENGINES`) for ``model``; ``options`` go to its constructor.

    Raises:
        ValueError: unknown engine name (or a bad option, device or size, from the engine).
        MissingDependencyError: the engine's extra is not installed (the message names it).
    """
    if name not in ENGINES:
        raise ValueError(f"unknown physics engine {name!r}: choose from {', '.join(ENGINES)} (or 'auto')")
    module, _, cls = ENGINES[name].partition(":")
    engine_cls = getattr(importlib.import_module(module), cls)
    return engine_cls(model, num_worlds, device, frame_skip, fields, **options)
