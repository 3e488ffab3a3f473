"""The numpy twins of the device's learners, bit for bit: the TinyOL head with its replay buffer
(`learner`, twin of mcu/src/tol_learner.c) and the adaptive stage (`stage`, twin of tol_stage.c).
Layer 2: imports only the base modules.
"""
from .._lazy import exports

_WHERE = {
    "Config": "learner",
    "Layer": "stage",
    "Learner": "learner",
    "LearnerError": "learner",
    "MODES": "learner",
    "OnlineConfig": "learner",
    "OnlineLearner": "learner",
    "Result": "learner",
    "Settings": "learner",
    "Stage": "stage",
    "StageConfig": "stage",
    "dequantize": "learner",
    "head_bytes": "learner",
    "learner_bytes": "learner",
    "replay_bytes": "learner",
    "stage_bytes": "stage",
    "stage_hash": "stage",
    "stage_memory": "stage",
    "trained_part": "stage",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
