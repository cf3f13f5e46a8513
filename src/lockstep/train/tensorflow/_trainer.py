"""TensorflowTrainer: DataParallelTrainer with ``TF_CONFIG`` set in every worker."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from lockstep._core.config import ScalingConfig
from lockstep._internal.backends.tensorflow import TensorflowConfig
from lockstep.train._trainer import DataParallelTrainer, TrainerSpec, WorkerSetup


@dataclass(frozen=True, kw_only=True)
class TensorflowTrainerSpec(TrainerSpec):
    """TensorflowTrainer's arguments: DataParallelTrainer's, with ``tensorflow_config``
    instead of ``backend_config``."""

    tensorflow_config: TensorflowConfig | None = None

    not_taken: ClassVar[tuple[str, ...]] = ("backend_config",)

    def __post_init__(self) -> None:
        super().__post_init__()
        config = self.tensorflow_config
        if config is not None and not isinstance(config, TensorflowConfig):
            raise ValueError(
                f"tensorflow_config must be a TensorflowConfig, got {type(config).__name__}. "
                "HINT: tensorflow_config=TensorflowConfig()"
            )


class TensorflowTrainer(DataParallelTrainer):
    """Runs a TensorFlow training function on N workers that form one TF cluster.

    Each worker's ``TF_CONFIG`` names every worker, so
    ``tf.distribute.MultiWorkerMirroredStrategy()`` created in the function trains one
    model across them. TensorFlow's thread pools are sized to the worker's CPUs
    (``ScalingConfig.resources_per_worker``). Arguments are those of
    :class:`~lockstep.train.DataParallelTrainer`, with ``tensorflow_config``.

    Example:
        >>> import json, os, tempfile
        >>> from lockstep import train
        >>> from lockstep.train import RunConfig, ScalingConfig
        >>> def train_func():
        ...     cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
        ...     train.report({"workers": len(cluster)})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     TensorflowTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit().metrics
        {'workers': 2}
    """

    Spec = TensorflowTrainerSpec

    def _worker_setup(self) -> WorkerSetup:
        spec = self._spec
        assert isinstance(spec, TensorflowTrainerSpec) and spec.train_loop_per_worker is not None
        backend = with_threads(spec.tensorflow_config or TensorflowConfig(), self.scaling_config)
        return WorkerSetup(spec.train_loop_per_worker, spec.train_loop_config, backend)


def with_threads(config: TensorflowConfig, scaling: ScalingConfig) -> TensorflowConfig:
    """``config`` with TensorFlow's thread pools sized to each worker's CPUs, unless set."""
    if config.num_threads is not None:
        return config
    return replace(config, num_threads=max(1, int(scaling.num_cpus_per_worker)))
