"""Batched tensor environments: the ``VecEnv`` contract, podium's tensor-native envs, the gymnasium adapter.

>>> import podium.envs as envs
>>> env = envs.make("CartPole-v1", num_envs=4096, seed=0)
>>> obs, info = env.reset()
"""

from podium.envs.base import TensorVecEnv, VecEnv, resolve_device
from podium.envs.registry import EnvSpec, list_envs, make, register, registry

__all__ = [
    "EnvSpec",
    "GymVecEnv",
    "TensorVecEnv",
    "VecEnv",
    "list_envs",
    "make",
    "register",
    "registry",
    "resolve_device",
]

_CLASSIC = "podium.envs.classic"
register("CartPole-v1", f"{_CLASSIC}.cartpole:CartPoleVecEnv", description="balance a pole on a cart (Discrete(2))")
register("Pendulum-v1", f"{_CLASSIC}.pendulum:PendulumVecEnv", description="swing a pendulum up (Box(1))")
register("Acrobot-v1", f"{_CLASSIC}.acrobot:AcrobotVecEnv", description="swing a two-link arm up (Discrete(3))")
register("MountainCar-v0", f"{_CLASSIC}.mountain_car:MountainCarVecEnv", description="drive up a hill (Discrete(3))")
register(
    "MountainCarContinuous-v0",
    f"{_CLASSIC}.mountain_car:MountainCarContinuousVecEnv",
    description="drive up a hill with a continuous throttle (Box(1))",
)
register(
    "StockTrading-v0",
    "podium.finance.env:StockTradingVecEnv",
    description="trade the 29 Dow stocks, $1M, 0.2% costs (Box(29); shipped data, 2009-2015 by default)",
)


def __getattr__(name: str):  # lazy: the adapter pulls in gymnasium's vector machinery
    if name == "GymVecEnv":
        from podium.envs.gym_adapter import GymVecEnv

        return GymVecEnv
    raise AttributeError(name)
