"""TorchTrainer: DataParallelTrainer with a torch.distributed process group in every worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.backends.torch import TorchConfig
from lockstep.train._trainer import DataParallelTrainer, FrameworkTrainerSpec


@dataclass(frozen=True, kw_only=True)
class TorchTrainerSpec(FrameworkTrainerSpec):
    """TorchTrainer's arguments: DataParallelTrainer's, with ``torch_config`` for the
    process group instead of ``backend_config``."""

    torch_config: TorchConfig | None = None

    config_field: ClassVar[str] = "torch_config"
    config_type: ClassVar[type[BackendConfig]] = TorchConfig


class TorchTrainer(DataParallelTrainer):
    """Runs a PyTorch training function on N workers joined in one process group.

    Inside the function, ``prepare_model`` wraps the model in DistributedDataParallel and
    ``prepare_data_loader`` gives each worker its part of the data. Arguments are those of
    :class:`~lockstep.train.DataParallelTrainer`, with ``torch_config`` for the process group
    (gloo without GPUs, NCCL with them).

    Example:
        >>> import tempfile, torch
        >>> from lockstep import train
        >>> from lockstep.train import RunConfig, ScalingConfig
        >>> from lockstep.train.torch import prepare_model
        >>> def train_func():
        ...     model = prepare_model(torch.nn.Linear(4, 1))
        ...     train.report({"wrapped": type(model).__name__})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().metrics
        {'wrapped': 'DistributedDataParallel'}
    """

    Spec = TorchTrainerSpec
