"""DDPG: deep deterministic policy gradient — TD3 with one critic, no target smoothing and no delay.

Box actions only. A deterministic actor ``mu(s) = tanh(net(s))`` in ``[-1, 1]`` with Gaussian
exploration noise, one Q-network, and Polyak-averaged target copies of both (Lillicrap et al. 2016,
with Gaussian instead of Ornstein-Uhlenbeck noise, as is now usual). The learning step is
:meth:`podium.algos.td3.TD3.update`: with one critic its "smallest target Q" is that critic's, and
with ``target_noise = 0`` and ``policy_delay = 1`` it is DDPG's update. Those two fields stay
settable, so that DDPG and TD3 differ by configuration only.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from podium.algos.base import AgentConfig, register_algo
from podium.algos.td3 import TD3, TD3Config

__all__ = ["DDPG", "DDPGConfig"]


class DDPGConfig(TD3Config):
    """DDPG hyperparameters: :class:`~podium.algos.td3.TD3Config` without smoothing and delay."""

    policy_delay: int = Field(default=1, gt=0)
    """Critic steps per actor (and target) step (DDPG: every step)."""
    target_noise: float = 0.0
    """Std of the target policy smoothing noise (DDPG: none)."""


@register_algo
class DDPG(TD3):
    """Deep deterministic policy gradient (Lillicrap et al. 2016) for Box action spaces."""

    name: ClassVar[str] = "ddpg"
    Config: ClassVar[type[AgentConfig]] = DDPGConfig
    n_critics: ClassVar[int] = 1
    config: DDPGConfig
