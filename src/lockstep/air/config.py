"""``ray.air.config``: the run configuration classes, the same as ``lockstep.train``'s."""

from lockstep._core.config import (
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    SyncConfig,
)

__all__ = [
    "CheckpointConfig",
    "DataConfig",
    "FailureConfig",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
]
