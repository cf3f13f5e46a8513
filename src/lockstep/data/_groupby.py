"""``Dataset.groupby(key)``: aggregations and functions per group.

Grouping needs all rows of a group together, so the key and aggregated columns (only those)
are gathered in the caller's process, as documented on ``Dataset.groupby``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lockstep.data._aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum, group_aggregate
from lockstep.data._convert import check_batch_format, concat, from_batch, to_format
from lockstep.data._sources import TableSource

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset


class GroupedData:
    """The rows of a dataset grouped by the values of key columns.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}])
        >>> ds.groupby("k").sum("v").take_all()
        [{'k': 'a', 'sum(v)': 4}, {'k': 'b', 'sum(v)': 2}]
    """

    def __init__(self, dataset: Dataset, key: str | list[str]) -> None:
        keys = [key] if isinstance(key, str) else list(key) if isinstance(key, list | tuple) else []
        if not keys or not all(isinstance(k, str) for k in keys):
            raise ValueError(
                f"groupby takes a column name or a list of them, got {key!r}. "
                'HINT: ds.groupby("label")'
            )
        self._dataset = dataset
        self._keys = keys

    def aggregate(self, *aggs: AggregateFn) -> Dataset:
        """One row per group: the keys, then each aggregation (sorted by the keys).

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.aggregate import Count, Max
            >>> ds = ld.from_items([{"k": 1, "v": 5}, {"k": 1, "v": 7}])
            >>> ds.groupby("k").aggregate(Count(), Max("v")).take_all()
            [{'k': 1, 'count()': 2, 'max(v)': 7}]
        """
        from lockstep.data._dataset import Dataset

        if not aggs or not all(isinstance(a, AggregateFn) for a in aggs):
            raise ValueError(
                "aggregate takes aggregations such as Count(), Sum('x'). "
                "HINT: from lockstep.data.aggregate import Count, Sum"
            )
        columns = list(dict.fromkeys(self._keys + [a.on for a in aggs if a.on is not None]))
        table = self._dataset.select_columns(columns).to_arrow()
        if not table.num_columns:  # no rows, and no schema to make an empty result with
            return Dataset([])
        return Dataset([TableSource(group_aggregate(table, self._keys, list(aggs)))])

    def count(self) -> Dataset:
        """The number of rows per group, in column ``count()``.

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"k": 1}, {"k": 1}, {"k": 2}]).groupby("k").count().take_all()
            [{'k': 1, 'count()': 2}, {'k': 2, 'count()': 1}]
        """
        return self.aggregate(Count())

    def sum(self, on: str | list[str], ignore_nulls: bool = True) -> Dataset:
        """The sum of each ``on`` column per group, in ``sum(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 2}, {"k": 1, "v": 3}])
            >>> ds.groupby("k").sum("v").take_all()
            [{'k': 1, 'sum(v)': 5}]
        """
        return self.aggregate(*[Sum(c, ignore_nulls=ignore_nulls) for c in _names(on)])

    def min(self, on: str | list[str], ignore_nulls: bool = True) -> Dataset:
        """The smallest value of each ``on`` column per group, in ``min(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 2}, {"k": 1, "v": 3}])
            >>> ds.groupby("k").min("v").take_all()
            [{'k': 1, 'min(v)': 2}]
        """
        return self.aggregate(*[Min(c, ignore_nulls=ignore_nulls) for c in _names(on)])

    def max(self, on: str | list[str], ignore_nulls: bool = True) -> Dataset:
        """The largest value of each ``on`` column per group, in ``max(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 2}, {"k": 1, "v": 3}])
            >>> ds.groupby("k").max("v").take_all()
            [{'k': 1, 'max(v)': 3}]
        """
        return self.aggregate(*[Max(c, ignore_nulls=ignore_nulls) for c in _names(on)])

    def mean(self, on: str | list[str], ignore_nulls: bool = True) -> Dataset:
        """The mean of each ``on`` column per group, in ``mean(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 2}, {"k": 1, "v": 3}])
            >>> ds.groupby("k").mean("v").take_all()
            [{'k': 1, 'mean(v)': 2.5}]
        """
        return self.aggregate(*[Mean(c, ignore_nulls=ignore_nulls) for c in _names(on)])

    def std(self, on: str | list[str], ddof: int = 1, ignore_nulls: bool = True) -> Dataset:
        """The standard deviation of each ``on`` column per group, in ``std(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 1.0}, {"k": 1, "v": 3.0}])
            >>> ds.groupby("k").std("v", ddof=0).take_all()
            [{'k': 1, 'std(v)': 1.0}]
        """
        return self.aggregate(*[Std(c, ddof, ignore_nulls=ignore_nulls) for c in _names(on)])

    def map_groups(
        self,
        fn: Callable[[Any], Any],
        *,
        batch_format: str = "default",
        fn_args: tuple[Any, ...] = (),
        fn_kwargs: dict[str, Any] | None = None,
    ) -> Dataset:
        """Apply ``fn`` to each group as one batch; the results, in key order, form a dataset.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": 1, "v": 2}, {"k": 2, "v": 5}, {"k": 1, "v": 4}])
            >>> sizes = lambda g: {"k": g["k"][:1], "n": [len(g["v"])]}
            >>> ds.groupby("k").map_groups(sizes).take_all()
            [{'k': 1, 'n': 2}, {'k': 2, 'n': 1}]
        """
        from lockstep.data._dataset import Dataset

        check_batch_format(batch_format, "map_groups")
        table = self._dataset.sort(self._keys).to_arrow()
        outputs = []
        for group in _groups(table, self._keys):
            result = fn(
                to_format(group, batch_format, writable=True), *fn_args, **(fn_kwargs or {})
            )
            outputs.append(from_batch(result, "map_groups"))
        return Dataset([TableSource(concat(outputs))] if outputs else [])


def _names(on: str | list[str]) -> list[str]:
    return [on] if isinstance(on, str) else list(on)


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
