"""prepare_data_loader and enable_reproducibility."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from lockstep._internal.execution.worker import session
from lockstep.train.torch._devices import get_device
from lockstep.train.torch._resume import ResumableLoader, ResumableSampler, timed_batches
from lockstep.train.torch._world import world_rank, world_size


class _Seed:
    value: int | None = None


def enable_reproducibility(seed: int = 0) -> None:
    """Make training repeatable: seed every generator and use deterministic kernels.

    Seeds Python's, NumPy's and torch's generators, turns on
    ``torch.use_deterministic_algorithms``, turns off cuDNN's autotuning, and makes
    ``prepare_data_loader`` shuffle and seed its loader processes from ``seed``. Call it at
    the start of the training function; it can make training slower.

    Example:
        >>> import tempfile
        >>> from lockstep.train import RunConfig
        >>> from lockstep.train.torch import TorchTrainer
        >>> def train_func():
        ...     enable_reproducibility(seed=42)
        ...     return torch.rand(3).tolist()
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     run = RunConfig(storage_path=storage, verbose=0)
        ...     first = TorchTrainer(train_func, run_config=run).fit().return_value
        ...     again = TorchTrainer(train_func, run_config=run).fit().return_value
        >>> first == again
        True
    """
    import numpy as np

    _Seed.value = seed
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS needs it


def prepare_data_loader(
    data_loader: DataLoader[Any],
    add_dist_sampler: bool = True,
    move_to_device: bool = True,
    auto_transfer: bool = True,
) -> DataLoader[Any]:
    """Give each worker its own part of ``data_loader``'s data, on its device.

    With several workers the loader is rebuilt with a ``DistributedSampler`` (unless it has
    one, or its dataset is iterable); it shuffles if the loader did. Call
    ``loader.sampler.set_epoch(epoch)`` each epoch for a new order. Batches are moved to
    :func:`get_device`.

    The sampler keeps its place: its epoch and the batches handed out in it are kept with
    every checkpoint, and after a restart from that checkpoint (with as many workers, or
    another number) the epoch continues with the samples no worker was given yet. Inside
    a training function this holds for one worker too (its loader gets a sampler of one
    replica, drawing a new order at every pass when the loader shuffled).

    Args:
        data_loader: The loader a single-process script would use.
        add_dist_sampler: Split the data across workers.
        move_to_device: Move every batch to the worker's device.
        auto_transfer: Copy to the GPU asynchronously (pinned memory).

    Example:
        >>> data = torch.utils.data.TensorDataset(torch.arange(6.0))
        >>> loader = prepare_data_loader(DataLoader(data, batch_size=3))
        >>> [batch[0].tolist() for batch in loader]
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    if add_dist_sampler and _can_shard(data_loader) and _keeps_place(data_loader):
        data_loader = _with_sampler(data_loader)
    if not move_to_device:
        return data_loader
    return _DeviceLoader(data_loader, get_device(), non_blocking=auto_transfer)  # type: ignore[return-value]


def _can_shard(loader: DataLoader[Any]) -> bool:
    if isinstance(loader.dataset, IterableDataset):
        return False  # an iterable dataset shards itself
    if isinstance(loader.sampler, DistributedSampler):
        return False
    # A custom batch sampler decides batches itself; it cannot be resharded from outside.
    return loader.batch_size is not None


def _keeps_place(loader: DataLoader[Any]) -> bool:
    """Whether the loader gets the sampler that keeps its place across restarts: with
    several workers (Ray's DistributedSampler), and with one inside a training function,
    so that a run restored with another number of workers continues its epoch."""
    if world_size() > 1:
        return True
    return session.current() is not None and isinstance(
        loader.sampler, RandomSampler | SequentialSampler
    )


def _with_sampler(loader: DataLoader[Any]) -> DataLoader[Any]:
    seed = _Seed.value if _Seed.value is not None else 0
    shuffle = isinstance(loader.sampler, RandomSampler)
    current = session.current()
    key = current.next_loader_key() if current is not None else ""
    saved = current.resume_positions().get("loaders", {}).get(key) if current else None
    sampler = ResumableSampler(
        loader.dataset,
        num_replicas=world_size(),
        rank=world_rank(),
        shuffle=shuffle,
        seed=seed,
        saved=saved,
        # one worker stands in for a RandomSampler, which draws a new order at every pass
        auto_epoch=world_size() == 1 and shuffle,
    )
    if current is not None:
        current.track_loader(key, sampler.position)
    kwargs: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "sampler": sampler,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if _Seed.value is not None:
        kwargs["worker_init_fn"] = _seed_loader_process
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    return ResumableLoader(loader.dataset, **kwargs)


def _seed_loader_process(worker_id: int) -> None:
    import numpy as np

    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


class _DeviceLoader:
    """A DataLoader whose batches arrive on the worker's device; everything else passes
    through (``sampler.set_epoch``, ``dataset``, ``len``)."""

    def __init__(self, loader: DataLoader[Any], device: torch.device, *, non_blocking: bool):
        self._loader = loader
        self._device = device
        self._non_blocking = non_blocking and device.type == "cuda"

    def __iter__(self) -> Iterator[Any]:
        batches: Iterator[Any] = iter(self._loader)
        if not isinstance(self._loader, ResumableLoader):  # which times its own waits
            batches = timed_batches(batches, self._loader)
        for batch in batches:
            yield self._move(batch)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def _move(self, batch: Any) -> Any:
        if isinstance(batch, torch.Tensor):
            return batch.to(self._device, non_blocking=self._non_blocking)
        if isinstance(batch, Mapping):
            return {k: self._move(v) for k, v in batch.items()}
        if isinstance(batch, tuple | list):
            return type(batch)(self._move(v) for v in batch)
        return batch
