"""What a deployment command was pointed at, as a policy: a pod's run directory or checkpoint file (one policy),
or a tournament's run directory (its leaderboard's best, or an ensemble of its best ``top_k``)."""

from __future__ import annotations

import warnings
from pathlib import Path

from podium.api import Ensemble, Policy, load, load_ensemble
from podium.rundir import TournamentDir

__all__ = ["load_policy"]


def load_policy(path: str | Path, top_k: int = 1, device: str = "cpu") -> Policy | Ensemble:
    """The policy to deploy from ``path``.

    Args:
        path: a checkpoint file, a pod run directory (its best snapshot), or a tournament run directory.
        top_k: a tournament's best ``top_k`` leaderboard entries as one :class:`~podium.api.Ensemble` (1: its
            champion alone). Fewer entries than ``top_k``: those there are, with a warning.
        device: where the networks run.

    Raises:
        ValueError: ``top_k < 1``; ``top_k > 1`` for a single pod's run; an empty leaderboard.
        CheckpointError: a path that holds no podium checkpoint.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a whole number of at least 1, got {top_k!r}")
    if not TournamentDir(path).holds_tournament():
        if top_k > 1:
            raise ValueError(
                f"top_k={top_k}: {path} holds one pod's policy; an ensemble needs a tournament's run directory "
                "(or podium.load_ensemble([...]) in Python)"
            )
        return load(path, device=device)
    from podium.tournament import leaderboard

    entries = leaderboard(path)
    if not entries:
        raise ValueError(f"the leaderboard of {path} is empty: no pod has entered it yet, so there is no policy")
    if len(entries) < top_k:
        warnings.warn(f"top_k={top_k}, but the leaderboard of {path} holds {len(entries)}: using those", stacklevel=2)
    best = [e.checkpoint for e in entries[:top_k]]
    return load(best[0], device=device) if top_k == 1 else load_ensemble(best, device=device)
