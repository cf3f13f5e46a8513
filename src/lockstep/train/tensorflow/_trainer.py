"""TensorflowTrainer: DataParallelTrainer with ``TF_CONFIG`` set in every worker."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import DataConfig, RunConfig, ScalingConfig
from lockstep._internal.backends.tensorflow import TensorflowConfig
from lockstep.train._trainer import DataParallelTrainer


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

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        train_loop_config: Mapping[str, Any] | None = None,
        tensorflow_config: TensorflowConfig | None = None,
        scaling_config: ScalingConfig | Mapping[str, Any] | None = None,
        run_config: RunConfig | None = None,
        datasets: Mapping[str, Any] | None = None,
        dataset_config: DataConfig | None = None,
        resume_from_checkpoint: Checkpoint | None = None,
        metadata: Mapping[str, Any] | None = None,
        preprocessor: Any = None,
    ) -> None:
        restore_kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if tensorflow_config is not None and not isinstance(tensorflow_config, TensorflowConfig):
            raise ValueError(
                f"tensorflow_config must be a TensorflowConfig, got "
                f"{type(tensorflow_config).__name__}. HINT: tensorflow_config=TensorflowConfig()"
            )
        scaling = ScalingConfig.coerce(scaling_config)
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=with_threads(tensorflow_config or TensorflowConfig(), scaling),
            scaling_config=scaling,
            run_config=run_config,
            datasets=datasets,
            dataset_config=dataset_config,
            resume_from_checkpoint=resume_from_checkpoint,
            metadata=metadata,
            preprocessor=preprocessor,
        )
        self._init_kwargs = restore_kwargs


def with_threads(config: TensorflowConfig, scaling: ScalingConfig) -> TensorflowConfig:
    """``config`` with TensorFlow's thread pools sized to each worker's CPUs, unless set."""
    if config.num_threads is not None:
        return config
    return replace(config, num_threads=max(1, int(scaling.num_cpus_per_worker)))
