"""DataIterator: one worker's view of its dataset shard, as ``get_dataset_shard`` returns it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from lockstep.data._iterable import BatchIterable
from lockstep.data._plan import Plan
from lockstep.data._relational import Schema

D = TypeVar("D")


class DataIterator(BatchIterable, Generic[D]):
    """Iterates a dataset (a worker's shard); every ``iter_*`` call is a new epoch.

    Pickles as the dataset's description, so it can be made on the driver and used in a
    worker; the rows are read where it is iterated.

    Example:
        >>> import lockstep.data as ld
        >>> it = ld.range(4).iterator()
        >>> for epoch in range(2):
        ...     print([b["id"].tolist() for b in it.iter_batches(batch_size=2)])
        [[0, 1], [2, 3]]
        [[0, 1], [2, 3]]
    """

    def __init__(self, plan: Plan, wrap: Callable[[Plan], D]) -> None:
        self._plan = plan
        self._wrap = wrap  # the public dataset class, for materialize() and iter_epochs()
        self._last_stats = None

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self._plan, "wrap": self._wrap}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["plan"], state["wrap"])  # type: ignore[misc]

    def _pass_blocks(self) -> Iterator[Any]:
        return self._plan.blocks()

    def schema(self) -> Any:
        """The :class:`~lockstep.data.Schema` of the rows.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).iterator().schema().names
            ['id']
        """
        schema = self._plan.schema()
        return Schema(schema) if schema is not None else None

    def count(self) -> int:
        """The number of rows in one epoch.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(5).iterator().count()
            5
        """
        return sum(self._plan.row_counts())

    def materialize(self) -> D:
        """The rows of one epoch, read now and held in memory, as a Dataset.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(3).iterator().materialize().count()
            3
        """
        return self._wrap(self._plan.materialize())

    def iter_epochs(self, max_epoch: int = -1) -> Iterator[D]:
        """The shard once per epoch, as a Dataset (the older API); forever by default.

        Example:
            >>> import lockstep.data as ld
            >>> [epoch.count() for epoch in ld.range(3).iterator().iter_epochs(max_epoch=2)]
            [3, 3]
        """
        epoch = 0
        while max_epoch < 0 or epoch < max_epoch:
            yield self._wrap(self._plan)
            epoch += 1

    def stats(self) -> str:
        """Figures of the latest pass: rows, batches, time waiting for data.

        Example:
            >>> import lockstep.data as ld
            >>> it = ld.range(4).iterator()
            >>> _ = list(it.iter_batches(batch_size=4))
            >>> it.stats().split(",")[0]
            'Last pass: 4 rows in 1 batches'
        """
        stats = self._last_stats
        return stats.summary() if stats else "No pass over the data has run yet."

    def __repr__(self) -> str:
        return f"DataIterator({self._plan.describe()})"
