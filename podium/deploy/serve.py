"""A trained policy over HTTP: ``podium serve RUN`` answers ``POST /act`` with the policy's actions.

Endpoints (JSON):

* ``POST /act`` ``{"obs": [...], "deterministic": true}`` -> ``{"action": [...]}``. ``obs`` is one observation
  (``[obs_dim]``) or a batch (``[B, obs_dim]``), as :meth:`podium.Policy.act` takes; for a Discrete observation
  space, one int, a batch of ``[B]`` ints, or one-hot vectors ``[B, n]`` (a single one-hot vector as a batch of
  one: a flat list of ints is a batch of states). ``action`` has the same batch form: a list of floats per
  observation (Box actions, in the env's units) or an int (Discrete). A bad observation is answered 422 with
  what is wrong; a body of more than ``max_batch`` observations 413 (by default 65,536 observations, fewer
  for an observation of more than 64 numbers: a request carries at most ``MAX_NUMBERS``, about 130 MB of JSON).
* ``GET /info``: the env, the algorithm, the checkpoint's file name, the observation and action spaces, and
  ``max_batch``.
* ``GET /health``: ``{"status": "ok"}`` once the policy is loaded (for a load balancer or a Kubernetes probe).

The server binds 127.0.0.1 unless told otherwise. It has no authentication: bind another address only on a
network where everyone who can reach the port may use the policy, or put it behind a proxy that checks.
Requests are answered one at a time (a policy's forward pass takes microseconds to a millisecond on the
CPU); batch observations in one request for throughput.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, StrictBool

import podium
from podium.api import Ensemble, Policy
from podium.deploy import http, require
from podium.deploy.source import load_policy

__all__ = ["MAX_BATCH", "MAX_NUMBERS", "ActRequest", "batch_limit", "make_app", "serve_policy"]

MAX_BATCH = 65536
"""The most observations one ``POST /act`` may carry by default (a larger body is refused with 413)."""
MAX_NUMBERS = 2**22
"""The most numbers one ``POST /act`` may carry by default: its JSON body is at most about 130 MB, and the
Python lists it is parsed into a few times that."""


def batch_limit(obs_dim: int, max_batch: int | None = None) -> int:
    """The most observations of ``obs_dim`` numbers one request may carry: ``max_batch`` if given, else
    ``MAX_BATCH`` cut so that a request holds at most ``MAX_NUMBERS`` numbers (Humanoid's 348: 12,052)."""
    if max_batch is not None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        return max_batch
    return max(1, min(MAX_BATCH, MAX_NUMBERS // max(obs_dim, 1)))


def _as_observations(obs: Any) -> np.ndarray:
    """The JSON ``obs`` as a numeric array (integers stay integers: a Discrete space's states); ValueError for
    anything else, naming what is wrong."""
    numbers = "obs must be numbers: one observation or a list of them"
    if isinstance(obs, bool | str | dict) or obs is None:
        raise ValueError(f"{numbers}, got {str(obs)[:80]!r}")
    try:
        arr = np.asarray(obs)
    except (ValueError, TypeError, OverflowError):
        arr = np.asarray(None, dtype=object)
    if arr.dtype == object or arr.dtype.kind not in "iufb":  # ragged, strings or objects inside, huge integers
        try:
            arr = np.asarray(obs, dtype=np.float64)
        except (ValueError, TypeError, OverflowError) as exc:
            if "inhomogeneous" in str(exc):
                raise ValueError("obs: every observation of a batch must have the same length") from None
            raise ValueError(f"{numbers} (integers or floats, lists of equal length), got {str(obs)[:80]}") from None
    if arr.dtype.kind == "b" or arr.size == 0:
        raise ValueError(f"{numbers}, got {str(obs)[:80]}")
    with np.errstate(over="ignore"):  # a number past float32's range is refused below, not warned about per request
        as_float32 = arr.astype(np.float32)
    if not np.isfinite(as_float32).all():  # float32: what the networks compute in
        raise ValueError(
            "obs holds NaN, infinity, or a number beyond float32's range (3.4e38); a policy needs finite observations"
        )
    return arr


class ActRequest(BaseModel):
    """The body of ``POST /act``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    obs: Any
    """One observation or a batch of them (numbers, nested lists)."""
    deterministic: StrictBool = True
    """The policy's best action (true) or a sample of its exploring distribution (false)."""


def _to_json(action: Any) -> Any:
    return action.tolist() if isinstance(action, np.ndarray) else action


class _BodyLimit:
    """ASGI middleware: a request body of more than ``max_body`` bytes is answered 413 and never held in full.
    A declared ``Content-Length`` is judged before anything is read; a body sent without one (chunked) is
    counted as it arrives, and refused at the first chunk past the limit."""

    def __init__(self, app: Any, max_body: int, max_batch: int, fastapi: Any) -> None:
        self.app, self.max_body, self.max_batch, self.fastapi = app, max_body, max_batch, fastapi

    def _detail(self, size: int, declared: bool) -> str:
        size_is = f"{size:,} bytes" if declared else f"at least {size:,} bytes (sent without its length)"
        return f"a request body of {size_is}; at most {self.max_body:,} ({self.max_batch} observations)"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            detail = self._detail(int(length), declared=True)
            reply = self.fastapi.responses.JSONResponse(status_code=413, content={"detail": detail})
            await reply(scope, receive, send)
            return
        received = 0

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:  # FastAPI passes an HTTPException raised while it reads the body
                    raise self.fastapi.HTTPException(status_code=413, detail=self._detail(received, declared=False))
            return message

        await self.app(scope, counted, send)


def make_app(
    policy: Policy | Ensemble | str | Path, device: str = "cpu", max_batch: int | None = None, top_k: int = 1
) -> Any:
    """A FastAPI application that serves ``policy`` (see the module's docstring for its endpoints).

    Args:
        policy: a :class:`~podium.api.Policy` or :class:`~podium.api.Ensemble`, or a path: a checkpoint file,
            a pod run directory (its best snapshot) or a tournament run directory (its champion, or its top
            ``top_k`` as an ensemble), loaded on ``device``.
        device: where a policy given by path runs (``"cpu"``, ``"cuda"``).
        max_batch: the most observations a request may carry; None: :func:`batch_limit`'s default for the
            policy's observation size.
        top_k: with a tournament's run directory: how many of its best entries act as one.

    Raises:
        CheckpointError: a path that holds no podium checkpoint (before any server starts).
        ValueError: a bad ``top_k``, an empty leaderboard.
        ImportError: the ``deploy`` extra is missing.
    """
    fastapi = require("fastapi", "podium serve")
    require("fastapi.responses", "podium serve")  # the 413 of _BodyLimit
    if isinstance(policy, str | Path):
        policy = load_policy(policy, top_k, device=device)
    elif top_k != 1:
        raise ValueError("top_k: only a tournament's run directory is cut to its top k; pass an Ensemble instead")
    if not isinstance(policy, Policy | Ensemble):
        raise TypeError(f"make_app takes a Policy, an Ensemble or a path, got {type(policy).__name__}")
    members = policy.members if isinstance(policy, Ensemble) else [policy]
    first = members[0]
    agent = first.agent
    discrete_observations = first.discrete_observations
    max_batch = batch_limit(agent.obs_dim, max_batch)
    max_numbers = max_batch * max(agent.obs_dim, 1)
    max_body = 4096 + 32 * max_numbers  # bytes: a number takes fewer than 32 characters in JSON
    lock = threading.Lock()  # one forward pass at a time: the agent's random generator is not thread-safe

    app = fastapi.FastAPI(
        title=f"podium policy: {policy.algo} on {first.spec.env}",
        version=podium.__version__,
        description=__doc__,
    )
    info = {
        "env": first.spec.env,
        "algo": policy.algo,  # a mixed ensemble's: "sac+td3"
        # a pod's directory and file (p0003/best.pt): a tournament's ensemble members all hold a best.pt
        "checkpoints": [f"{p.path.parent.parent.name}/{p.path.name}" for p in members],
        "observation_space": repr(agent.observation_space),
        "obs_dim": agent.obs_dim,
        "action_space": repr(agent.action_space),
        "discrete_actions": agent.discrete,
        "max_batch": max_batch,
        "podium_version": podium.__version__,
    }

    app.add_middleware(_BodyLimit, max_body=max_body, max_batch=max_batch, fastapi=fastapi)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info")
    def get_info() -> dict[str, Any]:
        return info

    @app.post("/act")
    def act(request: ActRequest) -> dict[str, Any]:
        try:
            obs = _as_observations(request.obs)
        except ValueError as exc:
            raise fastapi.HTTPException(status_code=422, detail=str(exc)) from None
        batch = obs.ndim == 2 or (obs.ndim == 1 and discrete_observations)  # [B] ints: a Discrete space's states
        if obs.size > max_numbers or (batch and obs.shape[0] > max_batch):
            raise fastapi.HTTPException(
                status_code=413,
                detail=f"obs: {obs.shape[0] if batch else 1} observation(s) of {obs.size} numbers in one request, "
                f"at most {max_batch} of {agent.obs_dim}",
            )
        try:
            with lock, torch.inference_mode():
                action = policy.act(obs, deterministic=request.deterministic)
        except ValueError as exc:  # Policy.act names the shape or the value that is wrong
            raise fastapi.HTTPException(status_code=422, detail=str(exc)) from None
        if not agent.discrete and not np.isfinite(action).all():
            raise fastapi.HTTPException(
                status_code=422, detail="the policy's action is not finite for this observation (values too large?)"
            )
        return {"action": _to_json(action)}

    return app


def serve_policy(
    policy: Policy | Ensemble | str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "cpu",
    log_level: str = "warning",
    top_k: int = 1,
) -> None:
    """Serve ``policy`` over HTTP until Ctrl-C (blocking). Prints its address (``port`` 0: any free one) and a
    warning when ``host`` is not loopback. See :func:`make_app` for the other arguments.

    Raises:
        OSError: the port is taken or the address is not this machine's.
        CheckpointError, ValueError: as :func:`make_app` (before anything listens).
    """
    app = make_app(policy, device=device, top_k=top_k)
    http.run(app, host, port, what=f"serving {app.title} (docs: /docs)", log_level=log_level)
