"""Learner: updates the agent's networks from collected data; several learners fuse by averaging.

The paper's learner runs the algorithm's learning phase (``agent.learn``). With several learners
(each trained on its own share of the data), their *parameters* are fused at the end of an epoch by
element-wise averaging — networks, normaliser statistics and optimiser moments — not by
all-reducing gradients at every step. :func:`average_agents` is that fusion; the in-process
:class:`Learner` with ``agents=[...]`` applies it, and the distributed backends reuse it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from podium.algos.base import Agent

__all__ = ["Learner", "average_agents"]


@torch.no_grad()
def average_agents(agents: Sequence[Agent]) -> None:
    """Replace every agent's floating-point parameters, buffers and optimiser moments by their mean.

    Integer state (step counters) is taken from the first agent. All agents must be of one algorithm
    and architecture.
    """
    if len(agents) < 2:
        return
    for name, module in agents[0].modules().items():
        others = [a.modules()[name].state_dict() for a in agents[1:]]
        for key, value in module.state_dict().items():
            if value.is_floating_point():
                mean = torch.stack([value, *(o[key].to(value.device) for o in others)]).mean(0)
                for a in agents:
                    a.modules()[name].state_dict()[key].copy_(mean)
    for name in agents[0].optimizers():
        peers = [a.optimizers()[name] for a in agents]
        for group_params in zip(*(p.param_groups for p in peers), strict=True):
            for params in zip(*(g["params"] for g in group_params), strict=True):
                states = [peer.state.get(p) for peer, p in zip(peers, params, strict=True)]
                if any(s is None for s in states):
                    continue
                for key, value in states[0].items():
                    if torch.is_tensor(value) and value.is_floating_point() and value.dim() > 0:
                        mean = torch.stack([s[key] for s in states]).mean(0)
                        for s in states:
                            s[key].copy_(mean)


class Learner:
    """Runs ``agent.learn(buffer, next_obs)`` and returns the mean losses of the phase."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.updates = 0

    def learn(self, buffer: object, next_obs: torch.Tensor) -> dict[str, float]:
        stats = self.agent.learn(buffer, next_obs)
        self.updates += 1
        return stats
