"""Strategies, environment, report callback and prepare_trainer for Lightning under
TorchTrainer, as Ray's ``ray.train.lightning``."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Generator
from typing import Any

import torch

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._session import get_context, report
from lockstep.train.torch import get_device

try:  # Lightning 2.x; pytorch_lightning is the same code under its older name.
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments.lightning import LightningEnvironment
    from lightning.fabric.utilities.seed import reset_seed
except ImportError:  # pragma: no cover - only pytorch_lightning installed
    import pytorch_lightning as pl  # type: ignore[no-redef]
    from lightning_fabric.plugins.environments.lightning import (  # type: ignore[assignment]
        LightningEnvironment,
    )
    from lightning_fabric.utilities.seed import reset_seed


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
    """Lightning's FSDP on lockstep's workers, on GPUs or on CPUs (with gloo). Takes
    ``FSDPStrategy``'s arguments.

    Example:
        >>> isinstance(RayFSDPStrategy(), pl.strategies.FSDPStrategy)
        True
    """

    def _wrap_kwargs(self) -> dict[str, Any]:
        # Lightning passes ``device_id=root_device.index``, which is None on a CPU, and
        # torch's FSDP then looks for an accelerator and refuses to run. The device itself
        # names the CPU (and is the same as its index on a GPU).
        return {
            "cpu_offload": self.cpu_offload,
            "mixed_precision": self.mixed_precision_config,
            "sharding_strategy": self.sharding_strategy,
            "device_id": self.root_device,
            **self.kwargs,
        }

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = any(isinstance(m, FullyShardedDataParallel) for m in model.modules())
        if self.root_device.type != "cpu" or wrapped:
            return super()._setup_model(model)
        model = FullyShardedDataParallel(module=model, **self._wrap_kwargs())
        # Lightning sees a wrapped model and skips its own wrap; the policy was applied
        # above, so it is held back from Lightning's "already wrapped" warning.
        policy = self.kwargs.pop("auto_wrap_policy", None)
        try:
            return super()._setup_model(model)
        finally:
            if policy is not None:
                self.kwargs["auto_wrap_policy"] = policy

    @contextlib.contextmanager
    def model_sharded_context(self) -> Generator[None, None, None]:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import enable_wrap

        with enable_wrap(wrapper_cls=FullyShardedDataParallel, **self._wrap_kwargs()):
            yield

    def _gathers_on_cpu(self) -> bool:
        return self.root_device.type == "cpu" and self._state_dict_type == "full"

    def _full_state_dict_context(self) -> contextlib.AbstractContextManager[None]:
        from torch.distributed.fsdp import FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.api import FullOptimStateDictConfig

        assert self.model is not None
        # Lightning gathers with offload_to_cpu=True. On a CPU the "offload" copy is the
        # gathered tensor itself, which torch then frees: the next read crashes the worker.
        # The tensors are on the CPU already, so nothing is offloaded.
        return FSDP.state_dict_type(
            module=self.model,
            state_dict_type=StateDictType.FULL_STATE_DICT,
            state_dict_config=FullStateDictConfig(offload_to_cpu=False, rank0_only=True),
            optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=True),
        )

    def lightning_module_state_dict(self) -> dict[str, Any]:
        if not self._gathers_on_cpu():
            return super().lightning_module_state_dict()
        assert self.model is not None
        with self._full_state_dict_context():
            return self.model.state_dict()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        if not self._gathers_on_cpu():
            return super().optimizer_state(optimizer)
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import OptimStateKeyType

        assert self.model is not None
        optimizer = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer
        with self._full_state_dict_context():
            state = FSDP.optim_state_dict(self.model, optimizer)
        if self.global_rank == 0:  # the format Lightning saves and loads
            state = FSDP.rekey_optim_state_dict(state, OptimStateKeyType.PARAM_ID, self.model)
        return state


class RayDeepSpeedStrategy(_OnLockstepWorkers, pl.strategies.DeepSpeedStrategy):
    """Lightning's DeepSpeed on lockstep's workers, on GPUs or on CPUs (DeepSpeed's CPU
    accelerator, gloo). Needs ``deepspeed`` installed. Takes ``DeepSpeedStrategy``'s arguments.
    """

    def setup_environment(self) -> None:
        if self.root_device.type != "cpu":
            super().setup_environment()
            return
        # Lightning refuses any accelerator but CUDA here, yet DeepSpeed runs on CPUs with its
        # CPU accelerator (gloo). Everything else DeepSpeed's setup does is kept.
        pl.strategies.DDPStrategy.setup_environment(self)

    def setup_distributed(self) -> None:
        if self.root_device.type != "cpu":
            super().setup_distributed()
            return
        # Lightning's check that GPU indices match the local ranks has no meaning on CPUs
        # (the CPU device has no index); the rest is DeepSpeedStrategy.setup_distributed.
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    def _setup_model_and_optimizer(
        self, model: torch.nn.Module, optimizer: Any, lr_scheduler: Any = None
    ) -> tuple[Any, Any]:
        if self.root_device.type != "cpu":
            return super()._setup_model_and_optimizer(model, optimizer, lr_scheduler)
        parameters = [p for p in model.parameters() if p.requires_grad]
        return self._initialize_on_cpu(
            model,
            self.config,
            model_parameters=parameters,
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
        )

    def _initialize_deepspeed_inference(self, model: torch.nn.Module) -> None:
        if self.root_device.type != "cpu":
            super()._initialize_deepspeed_inference(model)
            return
        # Lightning's inference set-up (validate, test, predict), on the CPU accelerator.
        assert isinstance(self.config, dict)
        config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 1}
        config.update({k: self.config[k] for k in ("fp16", "bf16") if k in self.config})
        if self.zero_stage_3:
            keys = ("zero_allow_untested_optimizer", "zero_optimization")
            config.update({k: self.config[k] for k in keys})
        importlib.import_module(pl.strategies.DeepSpeedStrategy.__module__).remove_module_hooks(
            model
        )
        self.model, _ = self._initialize_on_cpu(model, config, model_parameters=[])

    def _initialize_on_cpu(
        self, model: torch.nn.Module, config: Any, **training: Any
    ) -> tuple[Any, Any]:
        """The engine and optimizer of ``deepspeed.initialize`` on the CPU accelerator;
        ``training`` holds its ``model_parameters``, ``optimizer`` and ``lr_scheduler``."""
        import deepspeed

        # Lightning names the device by ``root_device.index``, None on a CPU, which DeepSpeed
        # cannot compare; DeepSpeed's CPU accelerator takes the local rank.
        engine, deepspeed_optimizer, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=self.local_rank),
            config=config,
            model=model,
            dist_init_required=False,
            **training,
        )
        return engine, deepspeed_optimizer


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

    ``checkpoint.ckpt`` is one file, or with DeepSpeed a directory holding every rank's
    ZeRO shard. Resume with ``trainer.fit(model, ckpt_path=os.path.join(d, "checkpoint.ckpt"))``.

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
        # Every rank takes part (FSDP gathers, DeepSpeed writes each rank's shard) and
        # Lightning writes to rank 0's path, so every rank uses rank 0's directory.
        mine = tempfile.mkdtemp(prefix="lightning-checkpoint-") if trainer.global_rank == 0 else ""
        directory = trainer.strategy.broadcast(mine)
        try:
            os.makedirs(directory, exist_ok=True)
            trainer.save_checkpoint(os.path.join(directory, self.CHECKPOINT_NAME))
            # One rank a machine hands its files over; report merges the machines' files.
            has_files = trainer.local_rank == 0 and bool(os.listdir(directory))
            report(metrics, checkpoint=Checkpoint.from_directory(directory) if has_files else None)
        finally:
            # report returns once the files are copied, on every rank.
            shutil.rmtree(directory, ignore_errors=True)
