"""DataIterator: one worker's view of its dataset shard, as ``get_dataset_shard`` returns it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from lockstep.data._iterable import BatchIterable
from lockstep.data._plan import Plan
from lockstep.data._position import PassTracker, ShardPlace

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
        self._place: ShardPlace | None = None  # kept for a worker's shard only

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self._plan, "wrap": self._wrap, "place": self._place}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["plan"], state["wrap"])  # type: ignore[misc]
        self._place = state.get("place")

    def _pass_blocks(self) -> Iterator[Any]:
        return self._plan.blocks()

    def _begin_pass(self) -> tuple[Iterator[Any], PassTracker | None]:
        if self._place is None:
            return self._pass_blocks(), None
        plan = self._place.begin_pass()
        return (plan or self._plan).blocks(), self._place.tracker

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
            >>> it.stats().splitlines()[4]
            '* Last pass: 4 rows in 1 batches'
        """
        stats = self._last_stats
        return stats.summary() if stats else "No pass over the data has run yet."

    def __repr__(self) -> str:
        return f"DataIterator({self._plan.describe()})"


def placed(iterator: DataIterator[Any], place: ShardPlace) -> DataIterator[Any]:
    """``iterator``, keeping its position in the data as ``place`` says (a worker's shard)."""
    iterator._place = place
    return iterator


def rows_plan(parent: Plan, ranges: list[tuple[int, int]]) -> Plan:
    """The rows of ``parent`` in the global ``ranges``, in that order, as one plan."""
    windows = parent.windows(ranges or [(0, 0)])
    sources = [s for w in windows for s in w.sources]
    counts = [n for w in windows for n in (w.counts or [])]
    return Plan(sources, counts=counts)


def reorders(plan: Plan) -> bool:
    """Whether ``plan`` hands out its rows in a new order at every pass (an unseeded
    ``random_shuffle``): then row ``i`` is not the same row in every attempt."""
    from lockstep.data._sources import ReshuffledSource

    def changes(source: Any) -> bool:
        if isinstance(source, ReshuffledSource) or getattr(source, "reorders_rows", False):
            return True
        inner = getattr(source, "inner", None)
        return (inner is not None and changes(inner)) or any(
            changes(p) for p in getattr(source, "parts", ())
        )

    return any(changes(s) for s in plan.sources)
