"""podium: massively parallel deep RL in PyTorch — pods race in a tournament, a leaderboard keeps the best.

Quick start::

    import podium
    report = podium.train("CartPole-v1", "ppo", target=475, seconds=120)
    policy = podium.load(report.run_dir)
    action = policy.act(obs)            # numpy in, numpy out: works on a gymnasium env
"""

from podium.api import Policy, load, make_spec, train

__version__ = "0.1.0"
__all__ = ["Policy", "__version__", "load", "make_spec", "train"]
