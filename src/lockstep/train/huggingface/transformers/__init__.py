"""Run a ``transformers.Trainer`` data-parallel under ``TorchTrainer``, as in Ray's guide.

Inside the training function, build the Trainer as usual, add
:class:`RayTrainReportCallback` (each log and evaluation becomes a report, each save a
checkpoint) and call :func:`prepare_trainer` on it.

Example:
    >>> from lockstep.train.huggingface.transformers import RayTrainReportCallback
    >>> RayTrainReportCallback.CHECKPOINT_NAME
    'checkpoint'
"""

from lockstep.train.huggingface.transformers._callback import (
    RayTrainReportCallback,
    prepare_trainer,
)

__all__ = ["RayTrainReportCallback", "prepare_trainer"]
