"""MuJoCo locomotion as batched tensor envs: ``Ant-v5`` and ``Humanoid-v5`` with gymnasium's definitions.

The reward, observation, termination and reset formulas are torch code (``ant.py``, ``humanoid.py``) over
one small physics-engine interface (``engine.py``): MuJoCo C on the CPU (``"mujoco"``, bit-identical to
gymnasium's envs) or MuJoCo XLA on a GPU (``"mjx"``, thousands of sub-envs, tensors shared with torch
through DLPack). Needs the ``mujoco`` extra (``pip install "podium[mujoco]"``; ``podium[mjx]`` for the GPU
engine). See docs/locomotion.md.

>>> import podium.envs as envs
>>> env = envs.make("Ant-v5", num_envs=16, seed=0)  # doctest: +SKIP
"""

from podium.envs.locomotion.ant import AntVecEnv
from podium.envs.locomotion.base import LocomotionVecEnv
from podium.envs.locomotion.engine import ENGINES, FIELDS, Engine, make_engine
from podium.envs.locomotion.humanoid import HumanoidVecEnv

__all__ = ["ENGINES", "FIELDS", "AntVecEnv", "Engine", "HumanoidVecEnv", "LocomotionVecEnv", "make_engine"]
