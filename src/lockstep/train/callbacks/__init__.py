"""Callbacks that log a run's results: JSON, CSV, TensorBoard, MLflow, Weights & Biases.

One protocol serves Train and Tune: pass them to ``RunConfig(callbacks=[...])`` of a trainer
(the run is the experiment's only trial), to a Tuner's ``RunConfig`` (one call per trial), or
to the older ``Trainer.run(callbacks=[...])``. The same names as ``ray.train.callbacks``,
``ray.tune.logger`` and ``ray.air.integrations``. MLflow, W&B and tensorboardX are imported
when a callback is first used.

Example:
    >>> from lockstep.train import RunConfig
    >>> from lockstep.train.callbacks import JsonLoggerCallback, CSVLoggerCallback
    >>> len(RunConfig(callbacks=[JsonLoggerCallback(), CSVLoggerCallback()]).callbacks)
    2

``JsonLoggerCallback`` is Ray Tune's in a Tune trial (``result.json`` lines) and Ray Train
1.x's in a Train run (``results.json``, a JSON list).
"""

from lockstep._core.callback import Callback, Trial
from lockstep._core.mappings import flatten_dict
from lockstep.train.callbacks._files import (
    CSVLoggerCallback,
    JsonLoggerCallback,
    TBXLoggerCallback,
)
from lockstep.train.callbacks._legacy import PrintCallback, TrainingCallback
from lockstep.train.callbacks._logger import LoggerCallback
from lockstep.train.callbacks._mlflow import MLflowLoggerCallback, setup_mlflow
from lockstep.train.callbacks._profile import TorchTensorboardProfilerCallback
from lockstep.train.callbacks._wandb import WandbLoggerCallback, setup_wandb

__all__ = [
    "CSVLoggerCallback",
    "Callback",
    "JsonLoggerCallback",
    "LoggerCallback",
    "MLflowLoggerCallback",
    "PrintCallback",
    "TBXLoggerCallback",
    "TorchTensorboardProfilerCallback",
    "TrainingCallback",
    "Trial",
    "WandbLoggerCallback",
    "flatten_dict",
    "setup_mlflow",
    "setup_wandb",
]
