"""One agent's training run: worker, learner, evaluator, and the pod that runs them."""

from podium.pod.evaluator import EvalResult, Evaluator
from podium.pod.learner import Learner, average_agents
from podium.pod.pod import Pod, PodReport, TrainingDivergedError, build_agent
from podium.pod.worker import RolloutStats, Worker

__all__ = [
    "EvalResult",
    "Evaluator",
    "Learner",
    "Pod",
    "PodReport",
    "RolloutStats",
    "TrainingDivergedError",
    "Worker",
    "average_agents",
    "build_agent",
]
