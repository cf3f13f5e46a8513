"""TorchTrainer: DataParallelTrainer with a torch.distributed process group in every worker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import DataConfig, RunConfig, ScalingConfig
from lockstep._internal.backends.torch import TorchConfig
from lockstep.train._trainer import DataParallelTrainer


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

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: Mapping[str, Any] | None = None,
        torch_config: TorchConfig | None = None,
        scaling_config: ScalingConfig | Mapping[str, Any] | None = None,
        run_config: RunConfig | None = None,
        datasets: Mapping[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        metadata: Mapping[str, Any] | None = None,
        preprocessor: Any = None,
    ) -> None:
        restore_kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise ValueError(
                f"torch_config must be a TorchConfig, got {type(torch_config).__name__}. "
                'HINT: torch_config=TorchConfig(backend="gloo")'
            )
        scaling = ScalingConfig.coerce(scaling_config)
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=(torch_config or TorchConfig()).for_devices(scaling.use_gpu),
            scaling_config=scaling,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
            preprocessor=preprocessor,
        )
        self._init_kwargs = restore_kwargs
