"""Ray AIR's names (Ray 2.0 to 2.6), which older material imports: ``from ray.air import
ScalingConfig, session``. Each is the same object as its ``lockstep.train`` counterpart.

Example:
    >>> from lockstep import air, train
    >>> air.ScalingConfig is train.ScalingConfig and air.config.RunConfig is train.RunConfig
    True
"""

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    SyncConfig,
)
from lockstep._core.result import Result
from lockstep.air import config, session

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "DataConfig",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "config",
    "session",
]
