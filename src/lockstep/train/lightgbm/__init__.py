"""LightGBM on lockstep: LightGBMTrainer, its report callback, network params, predictor.

The same names as ``ray.train.lightgbm``.
"""

from lockstep._internal.backends.lightgbm import LightGBMConfig
from lockstep.train.lightgbm._callback import RayTrainReportCallback
from lockstep.train.lightgbm._checkpoint import LightGBMCheckpoint
from lockstep.train.lightgbm._network import get_network_params
from lockstep.train.lightgbm._pandas import normalize_pandas_for_lightgbm
from lockstep.train.lightgbm._predictor import LightGBMPredictor
from lockstep.train.lightgbm._trainer import LightGBMTrainer

ReportCallback = RayTrainReportCallback

__all__ = [
    "LightGBMCheckpoint",
    "LightGBMConfig",
    "LightGBMPredictor",
    "LightGBMTrainer",
    "RayTrainReportCallback",
    "ReportCallback",
    "get_network_params",
    "normalize_pandas_for_lightgbm",
]
