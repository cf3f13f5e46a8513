"""Framework-free collectives across a run's workers, relayed through the driver."""

from __future__ import annotations

from typing import Any, TypeVar

from lockstep.train._session import _require

T = TypeVar("T")


def barrier() -> None:
    """Wait until every worker has called ``barrier()``.

    Example:
        >>> import tempfile, time
        >>> from lockstep import train
        >>> from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
        >>> def train_func():
        ...     time.sleep(0.1 * train.get_context().get_world_rank())
        ...     barrier()  # rank 0 waits here for rank 1
        ...     return time.time()
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().return_value > 0
        True
    """
    _require("collective.barrier()").barrier()


def broadcast_from_rank_zero(data: T) -> T:
    """Return rank 0's ``data`` on every worker (small, picklable data). Also a barrier.

    Example:
        >>> import os, tempfile
        >>> from lockstep import train
        >>> from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
        >>> def train_func():
        ...     mine = os.getpid()
        ...     rank0 = broadcast_from_rank_zero(mine)
        ...     train.report({"same_as_rank0": rank0 == mine})
        >>> class Everyone(train.UserCallback):
        ...     def after_report(self, run_context, metrics, checkpoint):
        ...         print([m["same_as_rank0"] for m in metrics])
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     _ = DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0,
        ...                              callbacks=[Everyone()])).fit()
        [True, False]
    """
    value: Any = _require("collective.broadcast_from_rank_zero()").broadcast_from_rank_zero(data)
    return value  # type: ignore[no-any-return]
