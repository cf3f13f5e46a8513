"""Distributed training: trainers, configs, and the functions a training function calls.

The same names as ``ray.train``: migrating is a change of imports.
"""

from lockstep._core.callback import RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)
from lockstep._core.context import TrainContext
from lockstep._core.errors import (
    ControllerError,
    TrainingFailedError,
    WorkerFailure,
    WorkerGroupError,
)
from lockstep._core.reported import (
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    ReportedCheckpoint,
    ReportedCheckpointStatus,
)
from lockstep._core.result import Result
from lockstep._internal.backends.base import Backend, BackendConfig
from lockstep.train import collective, integrations
from lockstep.train._legacy import Trainer
from lockstep.train._predictor import BatchPredictor, Predictor
from lockstep.train._session import (
    get_all_reported_checkpoints,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    report,
)
from lockstep.train._trainer import DataParallelTrainer

TRAIN_DATASET_KEY = "train"

__all__ = [
    "TRAIN_DATASET_KEY",
    "Backend",
    "BackendConfig",
    "BatchPredictor",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "CheckpointUploadMode",
    "ControllerError",
    "DataConfig",
    "DataParallelTrainer",
    "FailureConfig",
    "Predictor",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "Result",
    "RunConfig",
    "RunContext",
    "ScalingConfig",
    "TrainContext",
    "Trainer",
    "TrainingFailedError",
    "UserCallback",
    "WorkerFailure",
    "WorkerGroupError",
    "collective",
    "get_all_reported_checkpoints",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "integrations",
    "report",
]
