"""Keras callbacks for training functions: the same names as ``ray.train.tensorflow.keras``."""

from lockstep.train.tensorflow.keras._callback import (
    KerasCallback,
    RayReportCallback,
    ReportCheckpointCallback,
)

__all__ = ["KerasCallback", "RayReportCallback", "ReportCheckpointCallback"]
