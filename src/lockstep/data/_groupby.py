"""``Dataset.groupby(key)``: aggregations and functions per group.

Grouping needs all rows of a group together, so the key and aggregated columns (only those)
are gathered in the caller's process, as documented on ``Dataset.groupby``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import pyarrow as pa

from lockstep.data._aggregate import AggregateFn, AggregateMethods, Count, group_aggregate
from lockstep.data._convert import check_batch_format, concat, from_batch, to_format
from lockstep.data._plan import Plan
from lockstep.data._sources import TableSource

D = TypeVar("D")


class GroupedData(AggregateMethods, Generic[D]):
    """The rows of a dataset grouped by the values of key columns.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}])
        >>> ds.groupby("k").sum("v").take_all()
        [{'k': 'a', 'sum(v)': 4}, {'k': 'b', 'sum(v)': 2}]
    """

    def __init__(self, plan: Plan, key: str | list[str], wrap: Callable[[Plan], D]) -> None:
        keys = [key] if isinstance(key, str) else list(key) if isinstance(key, list | tuple) else []
        if not keys or not all(isinstance(k, str) for k in keys):
            raise ValueError(
                f"groupby takes a column name or a list of them, got {key!r}. "
                'HINT: ds.groupby("label")'
            )
        self._plan = plan
        self._keys = keys
        self._wrap = wrap  # the public dataset class: results are datasets of its kind

    def aggregate(self, *aggs: AggregateFn) -> D:
        """One row per group: the keys, then each aggregation (sorted by the keys).

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.aggregate import Count, Max
            >>> ds = ld.from_items([{"k": 1, "v": 5}, {"k": 1, "v": 7}])
            >>> ds.groupby("k").aggregate(Count(), Max("v")).take_all()
            [{'k': 1, 'count()': 2, 'max(v)': 7}]
        """
        if not aggs or not all(isinstance(a, AggregateFn) for a in aggs):
            raise ValueError(
                "aggregate takes aggregations such as Count(), Sum('x'). "
                "HINT: from lockstep.data.aggregate import Count, Sum"
            )
        columns = list(dict.fromkeys(self._keys + [a.on for a in aggs if a.on is not None]))
        table = self._plan.select_columns(columns).arrow()
        if not table.num_columns:  # no rows, and no schema to make an empty result with
            return self._wrap(Plan([]))
        return self._wrap(Plan([TableSource(group_aggregate(table, self._keys, list(aggs)))]))

    def _aggregate_columns(self, aggs: list[AggregateFn], one: bool) -> D:
        return self.aggregate(*aggs)

    def count(self) -> D:
        """The number of rows per group, in column ``count()``.

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"k": 1}, {"k": 1}, {"k": 2}]).groupby("k").count().take_all()
            [{'k': 1, 'count()': 2}, {'k': 2, 'count()': 1}]
        """
        return self.aggregate(Count())

    def map_groups(
        self,
        fn: Callable[[Any], Any],
        *,
        batch_format: str = "default",
        fn_args: tuple[Any, ...] = (),
        fn_kwargs: dict[str, Any] | None = None,
    ) -> D:
        """Apply ``fn`` to each group as one batch; the results, in key order, form a dataset.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 2}, {"k": 2, "v": 5}, {"k": 1, "v": 4}])
            >>> sizes = lambda g: {"k": g["k"][:1], "n": [len(g["v"])]}
            >>> ds.groupby("k").map_groups(sizes).take_all()
            [{'k': 1, 'n': 2}, {'k': 2, 'n': 1}]
        """
        check_batch_format(batch_format, "map_groups")
        table = self._plan.sorted([(k, "ascending") for k in self._keys]).arrow()
        outputs = []
        for group in _groups(table, self._keys):
            result = fn(
                to_format(group, batch_format, writable=True), *fn_args, **(fn_kwargs or {})
            )
            outputs.append(from_batch(result, "map_groups"))
        return self._wrap(Plan([TableSource(concat(outputs))] if outputs else []))


def _groups(table: Any, keys: list[str]) -> list[Any]:
    """The runs of equal keys of a table sorted by ``keys``."""
    if not table.num_rows:
        return []
    key_rows = pa.Table.from_arrays([table.column(k) for k in keys], names=keys).to_pylist()
    groups, start = [], 0
    for i in range(1, table.num_rows + 1):
        if i == table.num_rows or key_rows[i] != key_rows[start]:
            groups.append(table.slice(start, i - start))
            start = i
    return groups
