"""Hyperparameter search over training runs, on Optuna: the API of ``ray.tune``.

``Tuner(trainable, param_space=..., tune_config=TuneConfig(...), run_config=RunConfig(...))``
runs a function or a lockstep trainer once per config and returns a ``ResultGrid``.
"""

from lockstep._core.callback import Callback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.result import Result
from lockstep.train import CheckpointConfig, FailureConfig
from lockstep.tune._result_grid import ResultGrid
from lockstep.tune._run import ExperimentAnalysis, TuneError, run
from lockstep.tune._search_space import (
    choice,
    grid_search,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from lockstep.tune._session import TuneContext, get_checkpoint, get_context, report
from lockstep.tune._stopper import Stopper
from lockstep.tune._trainable import with_parameters, with_resources
from lockstep.tune._tuner import RunConfig, TuneConfig, Tuner

__all__ = [
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "ExperimentAnalysis",
    "FailureConfig",
    "Result",
    "ResultGrid",
    "RunConfig",
    "Stopper",
    "TuneConfig",
    "TuneContext",
    "TuneError",
    "Tuner",
    "choice",
    "get_checkpoint",
    "get_context",
    "grid_search",
    "lograndint",
    "loguniform",
    "qlograndint",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "report",
    "run",
    "sample_from",
    "uniform",
    "with_parameters",
    "with_resources",
]
