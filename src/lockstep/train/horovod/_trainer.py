"""HorovodTrainer: DataParallelTrainer with Horovod's gloo rendezvous set up for the workers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import DataConfig, RunConfig, ScalingConfig
from lockstep._internal.backends.horovod import HorovodConfig
from lockstep.train._trainer import DataParallelTrainer


class HorovodTrainer(DataParallelTrainer):
    """Runs a Horovod training function (PyTorch or Keras) on N workers.

    The workers are started as ``horovodrun --gloo -np N`` starts its processes: in the
    function, ``hvd.init()`` joins them, and ``hvd.DistributedOptimizer``,
    ``hvd.broadcast_parameters`` and the rest work as under ``horovodrun``. Arguments are
    those of :class:`~lockstep.train.DataParallelTrainer`, with ``horovod_config``.

    Example:
        >>> import tempfile
        >>> from lockstep import train
        >>> from lockstep.train import RunConfig, ScalingConfig
        >>> def train_func():
        ...     import horovod.torch as hvd
        ...     hvd.init()
        ...     train.report({"size": hvd.size(), "rank": hvd.rank()})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     HorovodTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().metrics
        {'size': 2, 'rank': 0}
    """

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: Mapping[str, Any] | None = None,
        horovod_config: HorovodConfig | None = None,
        scaling_config: ScalingConfig | Mapping[str, Any] | None = None,
        run_config: RunConfig | None = None,
        datasets: Mapping[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        metadata: Mapping[str, Any] | None = None,
        preprocessor: Any = None,
    ) -> None:
        restore_kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if horovod_config is not None and not isinstance(horovod_config, HorovodConfig):
            raise ValueError(
                f"horovod_config must be a HorovodConfig, got {type(horovod_config).__name__}. "
                "HINT: horovod_config=HorovodConfig(timeout_s=300)"
            )
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=horovod_config or HorovodConfig(),
            scaling_config=scaling_config,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
            preprocessor=preprocessor,
        )
        self._init_kwargs = restore_kwargs
