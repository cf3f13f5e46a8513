"""Strategies, environment, report callback and prepare_trainer for Lightning under
TorchTrainer, as Ray's ``ray.train.lightning``."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import torch

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._session import get_context, report
from lockstep.train.torch import get_device

try:  # Lightning 2.x; pytorch_lightning is the same code under its older name.
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments.lightning import LightningEnvironment
except ImportError:  # pragma: no cover - only pytorch_lightning installed
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from lightning_fabric.plugins.environments.lightning import (  # type: ignore[assignment]
        LightningEnvironment,
    )


class _OnLockstepWorkers:
    """What the strategies change in Lightning's: each worker's device, and samplers that
    split the data by lockstep's ranks."""

    @property
    def root_device(self) -> torch.device:
        return get_device()

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        context = get_context()
        return {"num_replicas": context.get_world_size(), "rank": context.get_world_rank()}


class RayDDPStrategy(_OnLockstepWorkers, pl.strategies.DDPStrategy):
    """Lightning's DDP on lockstep's workers: each worker's device, and samplers that split
    the data by lockstep's ranks. Takes ``DDPStrategy``'s arguments.

    Example:
        >>> isinstance(RayDDPStrategy(find_unused_parameters=False), pl.strategies.DDPStrategy)
        True
    """


class RayFSDPStrategy(_OnLockstepWorkers, pl.strategies.FSDPStrategy):
    """Lightning's FSDP on lockstep's workers. Takes ``FSDPStrategy``'s arguments.

    Example:
        >>> isinstance(RayFSDPStrategy(), pl.strategies.FSDPStrategy)
        True
    """


class RayDeepSpeedStrategy(_OnLockstepWorkers, pl.strategies.DeepSpeedStrategy):
    """Lightning's DeepSpeed on lockstep's workers (needs ``deepspeed`` installed). Takes
    ``DeepSpeedStrategy``'s arguments.
    """


class RayLightningEnvironment(LightningEnvironment):
    """Tells Lightning the ranks and world size lockstep gave this worker.

    Example:
        >>> RayLightningEnvironment().creates_processes_externally
        True
    """

    @property
    def creates_processes_externally(self) -> bool:
        # lockstep started the workers; Lightning must not launch processes of its own.
        return True

    def world_size(self) -> int:
        return get_context().get_world_size()

    def global_rank(self) -> int:
        return get_context().get_world_rank()

    def local_rank(self) -> int:
        return get_context().get_local_rank()

    def node_rank(self) -> int:
        return get_context().get_node_rank()

    def set_world_size(self, size: int) -> None:
        # lockstep decides the world size; Lightning's own value is ignored, as in Ray.
        pass

    def set_global_rank(self, rank: int) -> None:
        pass

    def teardown(self) -> None:
        pass


_STRATEGIES = (RayDDPStrategy, RayFSDPStrategy, RayDeepSpeedStrategy)


def prepare_trainer(trainer: pl.Trainer) -> pl.Trainer:
    """Check that a ``lightning.Trainer`` is set up to run on lockstep's workers.

    Raises:
        ValueError: The strategy is not one of the Ray strategies, or the cluster
            environment is not :class:`RayLightningEnvironment`.

    Example:
        >>> prepare_trainer  # doctest: +ELLIPSIS
        <function prepare_trainer at ...>
    """
    strategy = trainer.strategy
    if not isinstance(strategy, _STRATEGIES):
        raise ValueError(
            f"the Trainer's strategy is {type(strategy).__name__}, which does not know "
            "lockstep's workers. HINT: pass strategy=RayDDPStrategy() (or RayFSDPStrategy, "
            "RayDeepSpeedStrategy) from lockstep.train.lightning"
        )
    environment = getattr(strategy, "cluster_environment", None)
    if not isinstance(environment, RayLightningEnvironment):
        raise ValueError(
            f"the Trainer's cluster environment is {type(environment).__name__}. "
            "HINT: pass plugins=[RayLightningEnvironment()] from lockstep.train.lightning"
        )
    return trainer


class RayTrainReportCallback(pl.Callback):
    """Reports the logged metrics (with ``epoch`` and ``step``) and a checkpoint
    (``checkpoint.ckpt``, the Trainer's own format) at the end of every training epoch.

    Resume with ``trainer.fit(model, ckpt_path=os.path.join(d, "checkpoint.ckpt"))``.

    Example:
        >>> RayTrainReportCallback.CHECKPOINT_NAME
        'checkpoint.ckpt'
    """

    CHECKPOINT_NAME = "checkpoint.ckpt"

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = {
            k: v.item() if isinstance(v, torch.Tensor) else v
            for k, v in trainer.callback_metrics.items()
        }
        metrics["epoch"] = trainer.current_epoch
        metrics["step"] = trainer.global_step
        directory = tempfile.mkdtemp(prefix="lightning-checkpoint-")
        try:
            # Every rank takes part (a sharded strategy gathers here); rank 0 writes.
            trainer.save_checkpoint(os.path.join(directory, self.CHECKPOINT_NAME))
            has_files = trainer.global_rank == 0 and bool(os.listdir(directory))
            report(metrics, checkpoint=Checkpoint.from_directory(directory) if has_files else None)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
