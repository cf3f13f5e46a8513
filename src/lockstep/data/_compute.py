"""Compute strategies of Ray Data's transforms, and the resource arguments that go with them.

In Ray, ``map_batches(compute=ActorPoolStrategy(size=4), num_cpus=2)`` runs a callable
class in a pool of 4 actors, each reserving 2 CPUs. Here a transform runs in whichever
process reads the rows (a training worker reads its own shard), with no resources of its
own: a callable class is instantiated once per such process and reused for every batch
there. The arguments are checked as Ray checks them and otherwise have no effect, so Ray
code runs unchanged and never waits for CPUs the training workers hold.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ActorPoolStrategy:
    """Ray's actor pool for a callable class: here, one instance per process reading rows.

    Args:
        size: A fixed pool size (Ray); accepted here.
        min_size: The smallest pool (Ray); accepted here.
        max_size: The largest pool (Ray); accepted here.
        max_tasks_in_flight_per_actor: Ray's queue depth per actor; accepted here.

    Example:
        >>> import lockstep.data as ld
        >>> class AddOne:
        ...     def __call__(self, batch):
        ...         return {"id": batch["id"] + 1}
        >>> ds = ld.range(3).map_batches(AddOne, compute=ld.ActorPoolStrategy(size=2))
        >>> ds.take_all()
        [{'id': 1}, {'id': 2}, {'id': 3}]
    """

    size: int | None = None
    min_size: int | None = None
    max_size: int | None = None
    max_tasks_in_flight_per_actor: int | None = None

    def __post_init__(self) -> None:
        for name in ("size", "min_size", "max_size", "max_tasks_in_flight_per_actor"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"ActorPoolStrategy: {name} must be a positive int, got {value!r}. "
                    "HINT: ActorPoolStrategy(size=4)"
                )
        if self.size is not None and (self.min_size is not None or self.max_size is not None):
            raise ValueError(
                "ActorPoolStrategy: give size, or min_size and max_size, not both. "
                "HINT: ActorPoolStrategy(size=4) or ActorPoolStrategy(min_size=1, max_size=4)"
            )
        if self.min_size and self.max_size and self.min_size > self.max_size:
            raise ValueError(
                f"ActorPoolStrategy: min_size {self.min_size} > max_size {self.max_size}"
            )


@dataclass(frozen=True)
class TaskPoolStrategy:
    """Ray's task pool for a function: here, the function runs where the rows are read.

    Args:
        size: The most tasks at a time (Ray); accepted here.

    Example:
        >>> import lockstep.data as ld
        >>> ld.range(2).map_batches(lambda b: b, compute=ld.TaskPoolStrategy()).count()
        2
    """

    size: int | None = None


def check_compute(
    fn: Any, where: str, compute: Any, concurrency: Any, num_cpus: Any, num_gpus: Any
) -> None:
    """Raise a ValueError for arguments Ray would refuse; the rest have no effect here."""
    is_class = inspect.isclass(fn)
    if isinstance(compute, str):
        if compute not in ("tasks", "actors"):
            raise ValueError(
                f"{where}: compute must be 'tasks', 'actors', ActorPoolStrategy or "
                f"TaskPoolStrategy, got {compute!r}"
            )
    elif compute is not None and not isinstance(compute, ActorPoolStrategy | TaskPoolStrategy):
        raise ValueError(
            f"{where}: compute must be 'tasks', 'actors', ActorPoolStrategy or "
            f"TaskPoolStrategy, got {type(compute).__name__}. "
            "HINT: compute=ActorPoolStrategy(size=2)"
        )
    actors = compute == "actors" or isinstance(compute, ActorPoolStrategy)
    if actors and not is_class:
        raise ValueError(
            f"{where}: ``compute`` is an actor strategy, but ``fn`` is not a callable class. "
            "HINT: pass a class with __call__, or leave compute out for a function"
        )
    _check_concurrency(concurrency, where, is_class)
    for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if value is not None and (not isinstance(value, int | float) or value < 0):
            raise ValueError(f"{where}: {name} must be a non-negative number, got {value!r}")


def _check_concurrency(concurrency: Any, where: str, is_class: bool) -> None:
    """Ray's rules: an int; for a callable class also ``(min, max)`` or
    ``(min, max, initial)`` with ``min <= max``."""
    if concurrency is None:
        return
    values = concurrency if isinstance(concurrency, tuple) else (concurrency,)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ValueError(
            "``concurrency`` is expected to be set as an integer or a tuple of integers, "
            f"but got: {concurrency}. HINT: {where}: concurrency=4, or (min, max) for a "
            "callable class"
        )
    if not isinstance(concurrency, tuple):
        return
    if len(concurrency) not in (2, 3):
        raise ValueError(
            "``concurrency`` is expected to be set as a tuple of integers, but got: "
            f"{concurrency}. HINT: {where}: (min, max) or (min, max, initial)"
        )
    if not is_class:
        raise ValueError(
            "``concurrency`` is set as a tuple of integers, but ``fn`` is not a callable "
            f"class. Use ``concurrency=n`` to control maximum number of workers to use. "
            f"HINT: {where}: a (min, max) pool is for a class with __call__"
        )
    low, high = concurrency[0], concurrency[1]
    if low > high or (len(concurrency) == 3 and not low <= concurrency[2] <= high):
        raise ValueError(
            f"min_size must be <= max_size: concurrency={concurrency}. HINT: {where}: "
            "concurrency=(min, max) with min <= max (and min <= initial <= max)"
        )
