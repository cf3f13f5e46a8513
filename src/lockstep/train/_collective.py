"""Framework-free collectives across a run's workers, relayed through the driver."""

from __future__ import annotations

from typing import Any, TypeVar

from lockstep.train._session import _require

T = TypeVar("T")


def barrier() -> None:
    """Wait until every worker has called ``barrier()``.

    Example:
        >>> def train_func():  # doctest: +SKIP
        ...     barrier()
    """
    _require("collective.barrier()").barrier()


def broadcast_from_rank_zero(data: T) -> T:
    """Return rank 0's ``data`` on every worker (small, picklable data). Also a barrier.

    Example:
        >>> def train_func():  # doctest: +SKIP
        ...     port = broadcast_from_rank_zero(find_free_port() if rank == 0 else None)
    """
    value: Any = _require("collective.broadcast_from_rank_zero()").broadcast_from_rank_zero(data)
    return value  # type: ignore[no-any-return]
