"""The functions a training function calls: report, get_checkpoint, get_context, ..."""

from __future__ import annotations

from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._internal.execution import session as _session


def _require(api: str) -> _session.Session:
    current = _session.current()
    if current is None:
        raise RuntimeError(
            f"lockstep.train.{api} can only be called inside a training function run by a "
            "trainer. HINT: call it from the function you pass as "
            "DataParallelTrainer(train_loop_per_worker=...), then call trainer.fit()"
        )
    return current


def report(metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
    """Report this step's metrics, and optionally a checkpoint, from every worker.

    Every worker must call ``report`` the same number of times. Without a checkpoint it
    returns at once (it is not a barrier). With one, the files are copied into the run
    directory and ``report`` returns once every worker has reported this step and the
    checkpoint is committed; any worker may attach files, and they are merged.

    Args:
        metrics: JSON-serialisable metrics. Rank 0's are recorded.
        checkpoint: Files to keep, e.g. ``Checkpoint.from_directory(tmpdir)``.

    Example:
        >>> def train_func(config):  # doctest: +SKIP
        ...     for epoch in range(config["epochs"]):
        ...         report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
    """
    _require("report()").report(metrics, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The latest committed checkpoint of this run, or the one to resume from, or None.

    Example:
        >>> def train_func():  # doctest: +SKIP
        ...     if (ckpt := get_checkpoint()):
        ...         with ckpt.as_directory() as d:
        ...             ...
    """
    return _require("get_checkpoint()").get_checkpoint()


def get_context() -> TrainContext:
    """This worker's ranks and the run's name.

    Example:
        >>> def train_func():  # doctest: +SKIP
        ...     rank = get_context().get_world_rank()
    """
    return _require("get_context()").context


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    """This worker's part of the dataset given to the trainer as ``datasets[dataset_name]``.

    Example:
        >>> def train_func():  # doctest: +SKIP
        ...     for batch in get_dataset_shard("train").iter_batches(batch_size=32):
        ...         ...
    """
    return _require("get_dataset_shard()").get_dataset_shard(dataset_name)
