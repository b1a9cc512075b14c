"""ONNX export: a trained policy as one graph that runs without podium, torch or Python.

``export_onnx("runs/pendulum")`` writes ``runs/pendulum/checkpoints/best.onnx``: the deterministic policy of
the run's best snapshot, with everything between an observation and an action inside the graph (the
observation normaliser's statistics, the networks, the squashing and the scaling to the env's action bounds,
or the argmax for discrete actions). Any ONNX runtime runs it: onnxruntime in Python, C++, C# or JavaScript,
TensorRT, a phone.

The graph has one input and one output:

* ``obs``: float32 ``[batch, obs_dim]``, the observations as the env gives them (a Discrete observation space:
  its one-hot vectors ``[batch, n]``); ``batch`` is dynamic (1 and up).
* ``action``: float32 ``[batch, act_dim]`` in the env's units (a Box action space), or int64 ``[batch]`` (Discrete).

Before returning, the file is run by onnxruntime on observations drawn from the observation space and its
actions are compared with podium's own (:class:`~podium.api.Policy`); a graph that disagrees is not kept.
The model's metadata (``onnx.load(path).metadata_props``) names the env, the algorithm, the checkpoint and the
podium version.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

import podium
from podium.api import Ensemble, Policy
from podium.deploy import require
from podium.deploy.source import load_policy
from podium.rundir import PodDir, TournamentDir
from podium.store import partial_file

__all__ = ["ExportError", "export_onnx"]

CHECK_OBSERVATIONS = 256
"""Observations the exported graph is checked on against podium's own policy."""
ATOL = 1e-4
"""Largest difference allowed between onnxruntime's and torch's continuous actions, per unit of action scale."""


class ExportError(RuntimeError):
    """The policy could not be exported, or the exported graph does not act as the policy does."""


class _Deterministic(torch.nn.Module):
    """One policy's deterministic action as a module. Its agent's networks are registered as submodules, so
    the exporter sees their weights as parameters (the agent itself is not a module)."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.agent = policy.agent
        for name, value in vars(policy.agent).items():
            if isinstance(value, torch.nn.Module):
                self.add_module(name, value)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.agent.act(obs, deterministic=True)


class _EnsembleModule(torch.nn.Module):
    """An :class:`~podium.api.Ensemble`'s rule in torch: the mean of the members' continuous actions, or the
    discrete action most members pick (a tie goes to the first member)."""

    def __init__(self, ensemble: Ensemble) -> None:
        super().__init__()
        self.members = torch.nn.ModuleList(_Deterministic(m) for m in ensemble.members)
        first = ensemble.members[0].agent
        self.discrete, self.n = first.discrete, first.action_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        actions = torch.stack([m(obs) for m in self.members])  # [K, B] or [K, B, A]
        if not self.discrete:
            return actions.mean(0)
        one_hot = torch.nn.functional.one_hot(actions, self.n).float()  # [K, B, n]
        return (one_hot.sum(0) + 0.5 * one_hot[0]).argmax(-1)


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[logging.handlers.BufferingHandler]:
    """The exporter's notes on optional torchvision operators and deprecations are not the user's business,
    nor are the opset converter's (onnxscript's) warnings and tracebacks: those are kept, for the error that
    explains a failed conversion."""
    torch_logger, converter = logging.getLogger("torch"), logging.getLogger("onnxscript")
    kept = logging.handlers.BufferingHandler(capacity=10_000)  # its .buffer holds the records, unprinted
    level, propagate = torch_logger.level, converter.propagate
    torch_logger.setLevel(logging.ERROR)
    converter.addHandler(kept)
    converter.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield kept
    finally:
        torch_logger.setLevel(level)
        converter.removeHandler(kept)
        converter.propagate = propagate


def _lowest_opset(kept: logging.handlers.BufferingHandler) -> tuple[int | None, str]:
    """From the converter's kept records: the lowest opset it could reach and why it stopped, or
    ``(None, "")``. onnx's converter steps down one version at a time and stops at the first operator it cannot
    carry further: "No Adapter From Version $13 for Gemm" (13), or "No Previous Version of CastLike exists"
    (the opset that introduced CastLike, 15)."""
    import onnx

    for record in kept.buffer:
        if record.exc_info and record.exc_info[1] is not None:
            reason = str(record.exc_info[1]).rsplit(":", 1)[-1].strip().replace("$", "")
            if found := re.search(r"From Version (\d+)", reason):
                return int(found.group(1)), reason
            if found := re.search(r"No Previous Version of (\w+)", reason):
                since = [
                    schema.since_version
                    for schema in onnx.defs.get_all_schemas_with_history()
                    if schema.name == found.group(1) and schema.domain == ""
                ]
                return (min(since) if since else None), reason
            return None, reason
    return None, ""


def _sample_observations(policy: Policy, count: int, seed: int) -> np.ndarray:
    """``count`` observations ``[count, obs_dim]`` float32 drawn from the agent's observation space
    (unbounded dimensions: standard normal; bounded ones: uniform inside the bounds)."""
    space = policy.agent.observation_space
    space.seed(seed)
    return np.stack([space.sample() for _ in range(count)]).astype(np.float32)


def _check(path: Path, policy: Policy | Ensemble, first: Policy, scale: float) -> None:
    """Run ``path`` with onnxruntime and compare its actions with podium's own (``policy.act``, numpy in and
    out, as a user calls it); raise ExportError."""
    ort = require("onnxruntime", "checking an ONNX export")
    discrete = first.agent.discrete
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for count in (CHECK_OBSERVATIONS, 1):  # a batch, and the single row a controller sends
        obs = _sample_observations(first, count, seed=count)
        (got,) = session.run(["action"], {"obs": obs})
        want = np.asarray(policy.act(obs))
        if got.shape != want.shape:
            raise ExportError(f"the ONNX graph returned actions of shape {got.shape}, podium {want.shape}")
        if discrete:
            wrong = int((got != want).sum())
            if wrong:
                raise ExportError(f"the ONNX graph picked another action than podium on {wrong} of {count} inputs")
        else:
            worst = float(np.abs(got - want).max())
            if not worst <= ATOL * scale:
                raise ExportError(
                    f"the ONNX graph's actions differ from podium's by up to {worst:.3g} (allowed {ATOL * scale:.3g})"
                )


def export_onnx(
    policy: Policy | Ensemble | str | Path,
    path: str | Path | None = None,
    *,
    top_k: int = 1,
    opset: int | None = None,
) -> Path:
    """Write ``policy``'s deterministic action as an ONNX model and check it with onnxruntime.

    Args:
        policy: a :class:`~podium.api.Policy` or :class:`~podium.api.Ensemble`, or a path: a checkpoint file, a
            pod run directory (its best snapshot) or a tournament run directory (its champion, or its top
            ``top_k`` as an ensemble), loaded on the CPU.
        path: the ``.onnx`` file to write. Default: beside the checkpoint, with its name
            (``RUN/checkpoints/best.onnx``); for a tournament, ``TOURNAMENT/champion.onnx`` or
            ``TOURNAMENT/top3.onnx``. An Ensemble object needs one.
        top_k: with a tournament's run directory: how many of its best entries act as one.
        opset: the ONNX opset version; default: the exporter's.

    Returns:
        The path written.

    Raises:
        ExportError: the exporter failed, or the graph's actions differ from podium's (nothing is kept).
        CheckpointError: ``policy`` names a missing, corrupt or foreign checkpoint.
        ValueError: a bad ``path`` or ``top_k`` (see :func:`~podium.deploy.source.load_policy`).
        ImportError: the ``deploy`` extra is missing (``pip install 'podium[deploy]'``).
    """
    onnx = require("onnx", "export_onnx")
    require("onnxscript", "export_onnx")
    require("onnxruntime", "export_onnx")  # the check, before the work
    default = None
    if isinstance(policy, str | Path):
        source = policy
        policy = load_policy(source, top_k)
        if TournamentDir(source).holds_tournament():  # named by what it holds (fewer than asked, maybe)
            default = TournamentDir(source).exported(len(policy) if isinstance(policy, Ensemble) else 1)
    elif top_k != 1:
        raise ValueError("top_k: only a tournament's run directory is cut to its top k; pass an Ensemble instead")
    if isinstance(policy, Ensemble):
        if path is None and default is None:
            raise ValueError("path: give the .onnx file to write an ensemble to")
        module: torch.nn.Module = _EnsembleModule(policy)
        first, sources = policy.members[0], [str(m.path) for m in policy.members]
    elif isinstance(policy, Policy):
        module, first, sources = _Deterministic(policy), policy, [str(policy.path)]
    else:
        raise TypeError(f"export_onnx takes a Policy, an Ensemble or a path, got {type(policy).__name__}")
    agent = first.agent
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and not 1 <= opset <= newest:
        raise ValueError(f"opset: ONNX opsets run from 1 to {newest} (this onnx), got {opset}")
    out = Path(path) if path is not None else default or PodDir.exported(first.path)
    if out.suffix != ".onnx":
        raise ValueError(f"path: an ONNX model's file name ends in .onnx, got {str(out)!r}")
    if out.is_dir():
        raise ValueError(f"path: {out} is a directory; give the file to write, e.g. {out / 'policy.onnx'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = partial_file(out)
    except OSError as exc:
        raise ValueError(f"path: cannot write {out}: {exc.strerror or exc}") from None
    training = {m: m.training for m in module.modules()}  # the caller's networks stay as they were
    module.eval()
    example = torch.as_tensor(_sample_observations(first, 2, seed=0), device=agent.device)
    try:
        with _quiet_exporter() as kept:
            torch.onnx.export(
                module,
                (example,),
                str(partial),
                input_names=["obs"],
                output_names=["action"],
                dynamic_shapes=({0: torch.export.Dim("batch", min=1)},),
                opset_version=opset,
                dynamo=True,
                external_data=False,  # one self-contained file (a policy's weights are small)
                verbose=False,
            )
        model = onnx.load(str(partial))
        written = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if opset is not None and written != opset:  # the exporter keeps its own when it cannot convert
            lowest, reason = _lowest_opset(kept)
            because = f" (onnx's converter: {reason})" if reason else ""
            fix = f"--opset {lowest} or more" if lowest is not None and lowest > opset else "a higher --opset"
            raise ExportError(
                f"opset {opset} was asked for, but the exporter writes opset {written} for {first.path} and could "
                f"not convert it down to {opset}{because}; give {fix} (or leave it out: {written})"
            )
        meta = {
            "podium_version": podium.__version__,
            "env": first.spec.env,
            "algo": policy.algo,  # a mixed ensemble's: "sac+td3"
            "checkpoints": "\n".join(sources),
            "observation": f"float32 [batch, {agent.obs_dim}]",
            "action": "int64 [batch]" if agent.discrete else f"float32 [batch, {agent.action_dim}]",
        }
        onnx.helper.set_model_props(model, meta)
        model.doc_string = f"podium {policy.algo} policy for {first.spec.env} (deterministic)"
        onnx.save(model, str(partial))
        scale = 1.0 if agent.discrete else 1.0 + float(agent.action_scale.abs().max())
        _check(partial, policy, first, scale)
        partial.replace(out)
    except ExportError:
        raise
    except Exception as exc:  # the exporter's own errors are many and deep: name the policy and the cause
        raise ExportError(f"exporting {first.path} to ONNX failed: {type(exc).__name__}: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
        for m, mode in training.items():
            m.training = mode
    return out
