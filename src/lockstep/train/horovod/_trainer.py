"""HorovodTrainer: DataParallelTrainer with Horovod's gloo rendezvous set up for the workers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.backends.horovod import HorovodConfig
from lockstep.train._trainer import DataParallelTrainer, FrameworkTrainerSpec


@dataclass(frozen=True, kw_only=True)
class HorovodTrainerSpec(FrameworkTrainerSpec):
    """HorovodTrainer's arguments: DataParallelTrainer's, with ``horovod_config`` instead of
    ``backend_config``."""

    horovod_config: HorovodConfig | None = None

    config_field: ClassVar[str] = "horovod_config"
    config_type: ClassVar[type[BackendConfig]] = HorovodConfig


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

    Spec = HorovodTrainerSpec
