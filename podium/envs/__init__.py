"""Batched tensor environments: the ``VecEnv`` contract, podium's tensor-native envs, the gymnasium adapter.

>>> import podium.envs as envs
>>> env = envs.make("CartPole-v1", num_envs=4096, seed=0)
>>> obs, info = env.reset()
"""

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


def __getattr__(name: str):  # lazy: torch and gymnasium's vector machinery load only when used
    if name in ("TensorVecEnv", "VecEnv", "resolve_device"):
        import podium.envs.base as base

        return getattr(base, name)
    if name == "GymVecEnv":
        from podium.envs.gym_adapter import GymVecEnv

        return GymVecEnv
    if name in ("AntVecEnv", "HumanoidVecEnv"):  # importing them needs no MuJoCo; building one does
        import podium.envs.locomotion as locomotion

        return getattr(locomotion, name)
    raise AttributeError(name)
