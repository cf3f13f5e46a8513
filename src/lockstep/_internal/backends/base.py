"""The Backend interface: what a framework needs set up in each worker, and torn down."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from lockstep._core.context import Collective, TrainContext


def check_timeout_s(timeout_s: object) -> None:
    """Raise a ValueError unless ``timeout_s`` is a positive number of seconds."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise ValueError(f"timeout_s must be a number of seconds, got {timeout_s!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")


class Backend:
    """Sets a framework up in each worker before the training function runs.

    ``on_group_start``, ``worker_env`` and ``on_group_shutdown`` run in the driver,
    ``on_worker_start`` and ``on_worker_shutdown`` in each worker. ``on_worker_start`` may
    use the collective (to agree on a port chosen by rank 0, say). Ray's driver-side hooks
    are called too, with a :class:`WorkerGroupInfo` in place of Ray's worker group:
    ``on_start`` and ``on_training_start`` before the workers of each attempt start,
    ``on_shutdown`` after they stopped.
    """

    # Whether local workers that together take every CPU are each bound to their own
    # CPUs (see execution.process.worker_cpus).
    pin_cpus = True
    # Modules every worker imports that the driver need not: a fork server imports them
    # once, before it forks the first worker that asks.
    worker_imports: tuple[str, ...] = ()

    def __init__(self, config: BackendConfig) -> None:
        self.config = config

    def on_group_start(self, contexts: Sequence[TrainContext]) -> None:
        """In the driver, before the workers of ``contexts`` start (a rendezvous server)."""

    def on_group_shutdown(self) -> None:
        """In the driver, once every worker of the group has stopped."""

    def worker_env(self, context: TrainContext) -> dict[str, str]:
        """Environment variables the worker of ``context`` needs before it starts."""
        return {}

    def on_worker_start(self, context: TrainContext, collective: Collective) -> None:
        """Set the framework up in this worker."""

    def on_worker_shutdown(self, context: TrainContext) -> None:
        """Tear the framework down in this worker, after the training function."""

    def on_start(self, worker_group: WorkerGroupInfo, backend_config: BackendConfig) -> None:
        """Ray's hook, in the driver: the workers of an attempt are about to start."""

    def on_training_start(
        self, worker_group: WorkerGroupInfo, backend_config: BackendConfig
    ) -> None:
        """Ray's hook, in the driver: the training function is about to run."""

    def on_shutdown(self, worker_group: WorkerGroupInfo, backend_config: BackendConfig) -> None:
        """Ray's hook, in the driver: the workers of an attempt have stopped."""


@dataclass(frozen=True)
class BackendConfig:
    """Configuration of a framework backend; the base class sets nothing up.

    Subclasses name their :class:`Backend` in ``backend_cls`` (a class attribute, or a
    property as in Ray).

    Example:
        >>> BackendConfig().backend_cls.__name__
        'Backend'
    """

    backend_cls: ClassVar[type[Backend]] = Backend

    def make_backend(self) -> Backend:
        return self.backend_cls(self)

    def for_devices(self, use_gpu: bool) -> BackendConfig:
        """This config completed for workers with (or without) GPUs; the execution plan
        asks, once. Raises a ValueError when the config cannot run on those devices."""
        return self


@dataclass(frozen=True)
class WorkerGroupInfo:
    """What Ray's driver-side backend hooks learn about the workers here.

    Attributes:
        num_workers: The number of workers.

    Example:
        >>> len(WorkerGroupInfo(num_workers=4))
        4
    """

    num_workers: int

    def __len__(self) -> int:
        return self.num_workers
