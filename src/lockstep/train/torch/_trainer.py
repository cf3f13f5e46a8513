"""TorchTrainer: DataParallelTrainer with a torch.distributed process group in every worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockstep._core.config import ScalingConfig
from lockstep._internal.backends.torch import TorchConfig
from lockstep.train._trainer import DataParallelTrainer, TrainerSpec, WorkerSetup


@dataclass(frozen=True, kw_only=True)
class TorchTrainerSpec(TrainerSpec):
    """TorchTrainer's arguments: DataParallelTrainer's, with ``torch_config`` for the
    process group instead of ``backend_config``."""

    torch_config: TorchConfig | None = None

    not_taken: ClassVar[tuple[str, ...]] = ("backend_config",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.torch_config is not None and not isinstance(self.torch_config, TorchConfig):
            raise ValueError(
                f"torch_config must be a TorchConfig, got {type(self.torch_config).__name__}. "
                'HINT: torch_config=TorchConfig(backend="gloo")'
            )
        self.backend_config_for(ScalingConfig.coerce(self.scaling_config))

    def backend_config_for(self, scaling: ScalingConfig) -> TorchConfig:
        """The process group's config for the workers' devices (gloo, or NCCL on GPUs)."""
        return (self.torch_config or TorchConfig()).for_devices(scaling.use_gpu)


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

    def _worker_setup(self) -> WorkerSetup:
        spec = self._spec
        assert isinstance(spec, TorchTrainerSpec) and spec.train_loop_per_worker is not None
        backend = spec.backend_config_for(self.scaling_config)
        return WorkerSetup(spec.train_loop_per_worker, spec.train_loop_config, backend)
