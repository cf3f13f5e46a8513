"""Ray AIR's session functions: ``session.report(metrics, checkpoint=...)`` and getters that
read ``train.get_context()``."""

from __future__ import annotations

from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep.train import _session


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """``lockstep.train.report``, as Ray AIR's session spelled it.

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
        >>> def train_func():
        ...     report({"rank": get_world_rank(), "size": get_world_size()})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().metrics
        {'rank': 0, 'size': 2}
    """
    _session.report(metrics, checkpoint=checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from, or None."""
    return _session.get_checkpoint()


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    """This worker's part of ``datasets[dataset_name]``."""
    return _session.get_dataset_shard(dataset_name)


def get_world_rank() -> int:
    """This worker's rank among all workers."""
    return _session.get_context().get_world_rank()


def get_world_size() -> int:
    """The number of workers."""
    return _session.get_context().get_world_size()


def get_local_rank() -> int:
    """This worker's rank on its node."""
    return _session.get_context().get_local_rank()


def get_local_world_size() -> int:
    """The number of workers on this worker's node."""
    return _session.get_context().get_local_world_size()


def get_node_rank() -> int:
    """The rank of this worker's node."""
    return _session.get_context().get_node_rank()


def get_experiment_name() -> str:
    """The run's name."""
    return _session.get_context().get_experiment_name()


def get_trial_dir() -> str:
    """The run directory."""
    return _session.get_context().get_trial_dir()
