"""XGBoost on lockstep: XGBoostTrainer, its report callback and predictor.

The same names as ``ray.train.xgboost``.
"""

from lockstep._internal.backends.xgboost import XGBoostConfig
from lockstep.train.xgboost._callback import RayTrainReportCallback
from lockstep.train.xgboost._checkpoint import XGBoostCheckpoint
from lockstep.train.xgboost._predictor import XGBoostPredictor
from lockstep.train.xgboost._trainer import XGBoostTrainer

ReportCallback = RayTrainReportCallback

__all__ = [
    "RayTrainReportCallback",
    "ReportCallback",
    "XGBoostCheckpoint",
    "XGBoostConfig",
    "XGBoostPredictor",
    "XGBoostTrainer",
]
