"""The functions a training function calls: report, get_checkpoint, get_context, ..."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.reported import (
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    ReportedCheckpoint,
)
from lockstep._core.session import Session
from lockstep._internal.execution.worker import session as _session


def _require(api: str) -> Session:
    current = _session.current()
    if current is None:
        raise RuntimeError(
            f"lockstep.train.{api} can only be called inside a training function run by a "
            "trainer. HINT: call it from the function you pass as "
            "DataParallelTrainer(train_loop_per_worker=...), then call trainer.fit()"
        )
    return current


def report(
    metrics: dict[str, Any] | None = None,
    checkpoint: Checkpoint | None = None,
    checkpoint_dir_name: str | None = None,
    checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
    delete_local_checkpoint_after_upload: bool | None = None,
    checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    **legacy_metrics: Any,
) -> None:
    """Report this step's metrics, and optionally a checkpoint, from every worker.

    ``report`` is a barrier, as in Ray Train: it returns once every worker has reported
    this step, and, when any worker attached a checkpoint, once its files are copied into
    the run directory and committed. Every worker must call ``report`` the same number of
    times; when one returns from its function or dies while another waits in ``report``,
    the run fails at once with an error naming each rank's report count (never a hang).
    Any worker may attach files; they are merged into one checkpoint directory, and where
    two ranks wrote a file of the same name the lower rank's copy is kept (rank 0 wins).

    Args:
        metrics: JSON-serialisable metrics. Rank 0's are recorded. 0-d tensors, numpy
            scalars and 1-element arrays are stored as Python numbers.
        checkpoint: Files to keep, e.g. ``Checkpoint.from_directory(tmpdir)``.
        checkpoint_dir_name: The checkpoint's directory name in the run directory (rank
            0's wins), instead of ``checkpoint_000012``.
        checkpoint_upload_mode: ``SYNC`` (copy before returning), ``ASYNC`` (return once
            every worker reported; the driver uploads the files, retrying with backoff, and
            commits while training goes on) or ``NO_UPLOAD`` (the checkpoint is already in
            the run directory).
        delete_local_checkpoint_after_upload: Delete the local files once handed over;
            by default True for ASYNC and False otherwise, as in Ray.
        checkpoint_upload_fn: ``fn(checkpoint, dir_name) -> Checkpoint`` that puts the
            files in storage itself; the checkpoint it returns is committed.
        **legacy_metrics: Ray 1.x's ``train.report(loss=0.5)``: the metrics as keywords.

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataParallelTrainer, RunConfig
        >>> def train_func():
        ...     for epoch in range(3):
        ...         report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     run = RunConfig(storage_path=storage, verbose=0)
        ...     DataParallelTrainer(train_func, run_config=run).fit().metrics
        {'epoch': 2, 'loss': 0.3333333333333333}
    """
    if legacy_metrics:
        if metrics is not None:
            raise TypeError(
                "report() takes metrics as a dict or as keywords, not both. HINT: "
                "train.report({**metrics, **more})"
            )
        metrics = legacy_metrics
    if delete_local_checkpoint_after_upload is None and isinstance(checkpoint, Checkpoint):
        # Checkpoint.from_dict() made its directory for this report alone (Ray AIR's dict
        # checkpoints lived in memory): nothing else will remove it
        delete_local_checkpoint_after_upload = checkpoint._data is not None or None
    _require("report()").report(
        metrics if metrics is not None else {},
        checkpoint,
        checkpoint_dir_name=checkpoint_dir_name,
        checkpoint_upload_mode=checkpoint_upload_mode,
        delete_local_checkpoint_after_upload=delete_local_checkpoint_after_upload,
        checkpoint_upload_fn=checkpoint_upload_fn,
    )


def heartbeat() -> None:
    """Tell the driver this rank is alive and making progress, inside a long step.

    With ``FailureConfig(hang_timeout_s=...)`` the run counts as hung when no rank has
    reported or sent a heartbeat for that long; call this in a step that can take longer
    (a long evaluation, a slow data pass). Cheap enough for every batch: at most one
    message a second reaches the driver. Without hang detection it does nothing useful
    and costs as little.

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig
        >>> def train_func():
        ...     for batch in range(1000):
        ...         heartbeat()  # a long step: say it is alive
        ...     report({"batches": 1000})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     DataParallelTrainer(train_func, run_config=RunConfig(storage_path=storage,
        ...         verbose=0, failure_config=FailureConfig(hang_timeout_s=600))).fit().metrics
        {'batches': 1000}
    """
    _require("heartbeat()").heartbeat()


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list[ReportedCheckpoint]:
    """Every checkpoint of this run that is kept, with rank 0's metrics, oldest first (or
    by score when ``CheckpointConfig`` sets one).

    Waits first until every checkpoint this worker reported (ASYNC ones too) is
    committed. lockstep has no validation step, so both consistency modes wait for the
    same thing; ``timeout_s`` is accepted for Ray's signature.

    Example:
        >>> import tempfile
        >>> from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig
        >>> def train_func():
        ...     for epoch in range(2):
        ...         with tempfile.TemporaryDirectory() as d:
        ...             report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))
        ...     return [c.metrics["epoch"] for c in get_all_reported_checkpoints()]
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     run = RunConfig(storage_path=storage, verbose=0)
        ...     DataParallelTrainer(train_func, run_config=run).fit().return_value
        [0, 1]
    """
    del consistency_mode, timeout_s  # no validation: committed is final
    return _require("get_all_reported_checkpoints()").get_all_reported_checkpoints()


def get_checkpoint() -> Checkpoint | None:
    """The latest committed checkpoint of this run, or the one to resume from, or None.

    Example:
        >>> import os, tempfile
        >>> from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig
        >>> def train_func():
        ...     start = 0
        ...     if checkpoint := get_checkpoint():
        ...         with checkpoint.as_directory() as d:
        ...             start = int(open(os.path.join(d, "epoch")).read()) + 1
        ...     for epoch in range(start, 3):
        ...         with tempfile.TemporaryDirectory() as d:
        ...             open(os.path.join(d, "epoch"), "w").write(str(epoch))
        ...             report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))
        ...     return start
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     run = RunConfig(name="exp", storage_path=storage, verbose=0)
        ...     first = DataParallelTrainer(train_func, run_config=run).fit()
        ...     again = DataParallelTrainer(train_func, run_config=run).fit()  # same name
        >>> first.return_value, again.return_value
        (0, 3)
    """
    return _require("get_checkpoint()").get_checkpoint()


def get_preemption_info() -> PreemptionInfo | None:
    """What stops the run, and by when; None while nothing does.

    The driver got SIGTERM (a scheduler, a spot instance reclaimed) or Ctrl-C, or on a
    Ray cluster a node hosting workers is draining. Every worker sees it from the same
    ``report()`` on; the next report may carry one more checkpoint, committed if it
    comes before ``deadline_ms`` (``FailureConfig.preemption_deadline_s`` after the
    signal). The run then stops (SIGTERM, Ctrl-C: it can be continued with
    ``Trainer.restore`` or by running the same script again) or restarts from that
    checkpoint (a drained node). Ray's name and fields, plus ``reason``.

    Example:
        >>> import tempfile
        >>> from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig
        >>> def train_func():
        ...     saved = False
        ...     for step in range(3):
        ...         checkpoint = None
        ...         if get_preemption_info() is not None and not saved:
        ...             saved = True  # the run stops after this report: save now
        ...             checkpoint = Checkpoint.from_directory(tempfile.mkdtemp())
        ...         report({"step": step}, checkpoint=checkpoint)
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     DataParallelTrainer(train_func,
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().metrics
        {'step': 2}
    """
    return _require("get_preemption_info()").get_preemption_info()


def get_context() -> TrainContext:
    """This worker's ranks and the run's name.

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
        >>> def train_func():
        ...     ctx = get_context()
        ...     report({"rank": ctx.get_world_rank(), "size": ctx.get_world_size()})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().metrics
        {'rank': 0, 'size': 2}
    """
    return _require("get_context()").context


def get_dataset_shard(dataset_name: str | None = None) -> Any:
    """This worker's part of the dataset given to the trainer as ``datasets[dataset_name]``.

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataConfig, DataParallelTrainer, RunConfig
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     DataParallelTrainer(lambda: get_dataset_shard("labels"),
        ...         datasets={"labels": ["cat", "dog"]},
        ...         dataset_config=DataConfig(datasets_to_split=[]),  # every worker gets all
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().return_value
        ['cat', 'dog']
    """
    return _require("get_dataset_shard()").get_dataset_shard(dataset_name)
