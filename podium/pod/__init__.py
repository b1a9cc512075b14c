"""One agent's training run: worker, learner, evaluator, and the pod that runs them."""

from podium.pod.evaluator import (
    EvalResult,
    EvaluationCutWarning,
    EvaluationError,
    Evaluator,
    EvaluatorService,
    Scored,
    Snapshot,
)
from podium.pod.learner import Learner, average_agents
from podium.pod.pod import (
    Pod,
    PodInterrupted,
    PodReport,
    TrainingDivergedError,
    build_agent,
    draw_curve,
    resolve_config,
)
from podium.pod.worker import RolloutStats, Worker

__all__ = [
    "EvalResult",
    "EvaluationCutWarning",
    "EvaluationError",
    "Evaluator",
    "EvaluatorService",
    "Learner",
    "Pod",
    "PodInterrupted",
    "PodReport",
    "RolloutStats",
    "Scored",
    "Snapshot",
    "TrainingDivergedError",
    "Worker",
    "average_agents",
    "build_agent",
    "draw_curve",
    "resolve_config",
]
