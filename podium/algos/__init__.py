"""Algorithms: one family per file (ppo, sac, td3, ddpg, dqn), plus shared networks and buffers."""

from podium.algos.base import Agent, AgentConfig, algo_names, get_algo, register_algo

__all__ = ["Agent", "AgentConfig", "algo_names", "get_algo", "register_algo"]
