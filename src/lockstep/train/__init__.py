"""Distributed training: trainers, configs, and the functions a training function calls.

The same names as ``ray.train``: migrating is a change of imports.
"""

import importlib
from types import ModuleType

from lockstep._core.callback import RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    SyncConfig,
)
from lockstep._core.context import TrainContext
from lockstep._core.errors import (
    ControllerError,
    TrainingFailedError,
    WorkerFailure,
    WorkerGroupError,
)
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.reported import (
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    ReportedCheckpoint,
    ReportedCheckpointStatus,
)
from lockstep._core.result import Result
from lockstep._core.time_ledger import CheckpointAdvice, RankTime, TimeLedger
from lockstep._internal.backends.base import Backend, BackendConfig
from lockstep.train import collective, integrations
from lockstep.train._legacy import Trainer, TrainingIterator
from lockstep.train._legacy_session import (
    load_checkpoint,
    local_rank,
    save_checkpoint,
    world_rank,
    world_size,
)
from lockstep.train._model import Model
from lockstep.train._predictor import BatchPredictor, Predictor
from lockstep.train._rng import load_rng_state, save_rng_state
from lockstep.train._session import (
    get_all_reported_checkpoints,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    get_preemption_info,
    heartbeat,
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
    "CheckpointAdvice",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "CheckpointUploadMode",
    "ControllerError",
    "DataConfig",
    "DataParallelTrainer",
    "FailureConfig",
    "Model",
    "Predictor",
    "PreemptionInfo",
    "RankTime",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "Result",
    "RunConfig",
    "RunContext",
    "ScalingConfig",
    "SyncConfig",
    "TimeLedger",
    "TrainContext",
    "Trainer",
    "TrainingFailedError",
    "TrainingIterator",
    "UserCallback",
    "WorkerFailure",
    "WorkerGroupError",
    "collective",
    "get_all_reported_checkpoints",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "get_preemption_info",
    "heartbeat",
    "integrations",
    "load_checkpoint",
    "load_rng_state",
    "local_rank",
    "report",
    "save_checkpoint",
    "save_rng_state",
    "world_rank",
    "world_size",
]

# Ray 1.x material reaches frameworks as attributes: ``import ray.train as train`` then
# ``train.torch.prepare_model(...)``; they load on first access, keeping the import light.
_FRAMEWORKS = frozenset({"torch", "xgboost", "lightgbm", "sklearn"})


def __getattr__(name: str) -> ModuleType:
    if name in _FRAMEWORKS:
        return importlib.import_module(f"lockstep.train.{name}")
    raise AttributeError(f"module 'lockstep.train' has no attribute {name!r}")
