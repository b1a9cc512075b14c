"""Batched tensor environments: the ``VecEnv`` contract, podium's tensor-native envs, the gymnasium adapter.

>>> import podium.envs as envs
>>> env = envs.make("CartPole-v1", num_envs=4096, seed=0)
>>> obs, info = env.reset()
"""

from podium.envs.base import TensorVecEnv, VecEnv, resolve_device
from podium.envs.registry import EnvSpec, list_envs, make, register, registry

__all__ = [
    "AntVecEnv",
    "EnvSpec",
    "GymVecEnv",
    "HumanoidVecEnv",
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
_LOCOMOTION = "podium.envs.locomotion"  # needs the "mujoco" extra (and "mjx" for the GPU engine)
register(
    "Ant-v5",
    f"{_LOCOMOTION}.ant:AntVecEnv",
    description="a four-legged ant runs forward (Box(8)); MuJoCo C on CPU, MJX on GPU (podium[mujoco])",
)
register(
    "Humanoid-v5",
    f"{_LOCOMOTION}.humanoid:HumanoidVecEnv",
    description="a humanoid walks forward (Box(17)); MuJoCo C on CPU, MJX on GPU (podium[mujoco])",
)


def __getattr__(name: str):  # lazy: the adapter pulls in gymnasium's vector machinery
    if name == "GymVecEnv":
        from podium.envs.gym_adapter import GymVecEnv

        return GymVecEnv
    if name in ("AntVecEnv", "HumanoidVecEnv"):  # importing them needs no MuJoCo; building one does
        import podium.envs.locomotion as locomotion

        return getattr(locomotion, name)
    raise AttributeError(name)
