"""Deployment: a trained policy leaves podium.

* :func:`export_onnx` (:mod:`~podium.deploy.export`) writes a policy (or a top-k ensemble) as one ONNX graph,
  normalisation and action scaling included, and checks it against podium's own policy with onnxruntime;
* :func:`make_app` / :func:`serve_policy` (:mod:`~podium.deploy.serve`) answer ``POST /act`` over HTTP;
* :mod:`~podium.deploy.dashboard` is the live page of a tournament;
* :mod:`~podium.deploy.http` is the HTTP edge they share (loopback by default, a warning otherwise).

Everything here needs the ``deploy`` extra (``pip install 'podium[deploy]'``): onnx, onnxruntime, onnxscript,
FastAPI and uvicorn. The names below are imported on first use, so ``import podium.deploy`` needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podium.deploy.export import ExportError, export_onnx
    from podium.deploy.serve import make_app, serve_policy

__all__ = ["ExportError", "export_onnx", "make_app", "serve_policy"]

_LAZY = {
    "ExportError": "podium.deploy.export",
    "export_onnx": "podium.deploy.export",
    "make_app": "podium.deploy.serve",
    "serve_policy": "podium.deploy.serve",
}

EXTRA_HINT = "pip install 'podium[deploy]'"
"""How to install what this package needs (named by every missing-dependency error here)."""


def require(module: str, what: str) -> Any:
    """Import ``module`` (a dependency of the ``deploy`` extra), or raise an ImportError that says how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{what} needs {module.split('.')[0]}, which is not installed: {EXTRA_HINT}") from exc


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'podium.deploy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
