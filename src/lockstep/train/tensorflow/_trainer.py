"""TensorflowTrainer: DataParallelTrainer with ``TF_CONFIG`` set in every worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lockstep._core.config import ScalingConfig
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.backends.tensorflow import TensorflowConfig
from lockstep.train._trainer import DataParallelTrainer, FrameworkTrainerSpec


@dataclass(frozen=True, kw_only=True)
class TensorflowTrainerSpec(FrameworkTrainerSpec):
    """TensorflowTrainer's arguments: DataParallelTrainer's, with ``tensorflow_config``
    instead of ``backend_config``."""

    tensorflow_config: TensorflowConfig | None = None

    config_field: ClassVar[str] = "tensorflow_config"
    config_type: ClassVar[type[BackendConfig]] = TensorflowConfig

    @classmethod
    def of(cls, **arguments: Any) -> TensorflowTrainerSpec:
        # The Ray Train material writes tensorflow_backend=TensorflowConfig(...); Ray
        # itself takes only tensorflow_config, which this is another name of.
        alias = arguments.pop("tensorflow_backend", None)
        if alias is not None:
            if arguments.get("tensorflow_config") is not None:
                raise TypeError(
                    "tensorflow_backend is another name of tensorflow_config: pass one of "
                    "them. HINT: tensorflow_config=TensorflowConfig(...)"
                )
            arguments["tensorflow_config"] = alias
        return super().of(**arguments)

    def backend(self, scaling: ScalingConfig) -> TensorflowConfig:
        # TensorFlow's thread pools sized to each worker's CPUs, unless set
        config: TensorflowConfig = super().backend(scaling)
        return config.with_default_threads(scaling.num_cpus_per_worker)


class TensorflowTrainer(DataParallelTrainer):
    """Runs a TensorFlow training function on N workers that form one TF cluster.

    Each worker's ``TF_CONFIG`` names every worker, so
    ``tf.distribute.MultiWorkerMirroredStrategy()`` created in the function trains one
    model across them. TensorFlow's thread pools are sized to the worker's CPUs
    (``ScalingConfig.resources_per_worker``). Arguments are those of
    :class:`~lockstep.train.DataParallelTrainer`, with ``tensorflow_config`` (also taken as
    ``tensorflow_backend``, the Ray Train material's spelling).

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
