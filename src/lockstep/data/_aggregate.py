"""Aggregations: count, sum, min, max, mean, std, over a whole dataset or per group.

Over a whole dataset they stream: each block gives a partial state (exact sums for
``sum``, ``mean`` and ``std``, so the result does not depend on the blocks or their order),
states merge, and the final value comes out. Per group, the needed columns are gathered
and ``pyarrow.Table.group_by`` does it. As in Ray, nulls are skipped unless
``ignore_nulls=False``, and an empty or all-null input gives None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._exact import Exact, exact_sum, exact_sum_of_squares

# A streaming state: (count of values, sum or min/max or mean, M2, saw a null).
State = tuple[int, Any, float, bool]


@dataclass(frozen=True)
class Moments:
    """Count, mean and sum of squared deviations (M2) of a column's values, in floats.

    Merging (Chan's formula) is what lets the scalers' statistics stream over blocks at
    pyarrow's speed; ``Std`` uses :class:`ExactMoments`, whose result does not depend on
    the blocks (at about a tenth of the speed).
    """

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @classmethod
    def of(cls, column: Any) -> Moments:
        """The moments of a column's non-null values (NaN, if any, propagates)."""
        count = len(column) - column.null_count
        if not count:
            return cls()
        mean = pc.mean(column).as_py()
        return cls(count, float(mean), float(pc.variance(column, ddof=0).as_py()) * count)

    def merge(self, other: Moments) -> Moments:
        """Both sets of values together (Chan et al.'s formula, stable for any block sizes)."""
        if not other.count:
            return self
        if not self.count:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / count
        m2 = self.m2 + other.m2 + delta * delta * self.count * other.count / count
        return Moments(count, mean, m2)

    def variance(self, ddof: int = 0) -> float | None:
        """``M2 / (count - ddof)``; None when ``count <= ddof``."""
        return self.m2 / (self.count - ddof) if self.count > ddof else None


@dataclass(frozen=True)
class ExactMoments:
    """Count, exact sum and exact sum of squares of a column's values: ``Std``'s state.

    The sums are exact (:mod:`lockstep.data._exact`), so the variance is the same whatever
    the blocks and their order.
    """

    count: int = 0
    total: Exact = 0
    squares: Exact = 0

    @classmethod
    def of(cls, column: Any) -> ExactMoments:
        """The moments of a column's non-null values (NaN, if any, propagates)."""
        values = column.drop_null()
        if not len(values):
            return cls()
        return cls(len(values), exact_sum(values), exact_sum_of_squares(values))

    def merge(self, other: ExactMoments) -> ExactMoments:
        """Both sets of values together."""
        return ExactMoments(
            self.count + other.count, self.total + other.total, self.squares + other.squares
        )

    def variance(self, ddof: int = 0) -> float | None:
        """``M2 / (count - ddof)``, rounded once; None when ``count <= ddof``."""
        if self.count <= ddof:
            return None
        if isinstance(self.total, float) or isinstance(self.squares, float):
            rough = float(self.squares) - float(self.total) ** 2 / self.count
            return max(0.0, rough) / (self.count - ddof)
        exact: Fraction = Fraction(self.squares) - Fraction(self.total) ** 2 / self.count
        return float(max(Fraction(0), exact) / (self.count - ddof))


class AggregateFn:
    """An aggregation over column ``on``, named ``alias_name`` or ``"kind(on)"`` in results.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Mean
        >>> ld.range(5).aggregate(Mean("id"))
        {'mean(id)': 2.0}
    """

    kind = ""

    def __init__(
        self, on: str | None, *, ignore_nulls: bool = True, alias_name: str | None = None
    ) -> None:
        if on is not None and not isinstance(on, str):
            raise ValueError(
                f"{type(self).__name__}(on=...) takes one column name, got {on!r}. "
                "HINT: one aggregation per column, e.g. Sum('a'), Sum('b')"
            )
        self.on = on
        self.ignore_nulls = ignore_nulls
        self.name = alias_name or f"{self.kind}({on or ''})"

    def _arrow_aggregation(self) -> tuple[Any, str, Any]:
        """``(column, function, options)`` for ``pyarrow.Table.group_by(...).aggregate``."""
        options = pc.ScalarAggregateOptions(skip_nulls=self.ignore_nulls, min_count=1)
        return self.on, self.kind, options

    def _partial(self, column: Any) -> State:
        """The state of one block's column."""
        valid = len(column) - column.null_count
        return valid, self._value(column) if valid else None, 0.0, column.null_count > 0

    def _value(self, column: Any) -> Any:
        return getattr(pc, self.kind)(column).as_py()

    def _merge(self, a: State, b: State) -> State:
        """The state of two blocks together."""
        if a[0] == 0:
            return b[0], b[1], b[2], a[3] or b[3]
        if b[0] == 0:
            return a[0], a[1], a[2], a[3] or b[3]
        return a[0] + b[0], self._combine(a, b), 0.0, a[3] or b[3]

    def _combine(self, a: State, b: State) -> Any:
        raise NotImplementedError

    def _finalize(self, state: State) -> Any:
        """The result, or None for no values (or a null when nulls are not ignored)."""
        count, value, _, saw_null = state
        if count == 0 or (saw_null and not self.ignore_nulls):
            return None
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.on!r})"


class Count(AggregateFn):
    """The number of rows, or of non-null values of ``on`` with ``ignore_nulls=True``.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Count
        >>> ld.range(4).aggregate(Count())
        {'count()': 4}
    """

    kind = "count"

    def __init__(
        self, on: str | None = None, *, ignore_nulls: bool = False, alias_name: str | None = None
    ) -> None:
        super().__init__(on, ignore_nulls=ignore_nulls, alias_name=alias_name)

    def _arrow_aggregation(self) -> tuple[Any, str, Any]:
        if self.on is None:
            return [], "count_all", None
        mode = "only_valid" if self.ignore_nulls else "all"
        return self.on, "count", pc.CountOptions(mode=mode)

    def _partial(self, column: Any) -> State:
        counted = len(column) - (column.null_count if self.ignore_nulls else 0)
        return counted, counted, 0.0, False

    def _merge(self, a: State, b: State) -> State:
        return a[0] + b[0], a[0] + b[0], 0.0, False

    def _finalize(self, state: State) -> Any:
        return state[0]


class Sum(AggregateFn):
    """The sum of column ``on``.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Sum
        >>> ld.range(4).aggregate(Sum("id"))
        {'sum(id)': 6}
    """

    kind = "sum"

    def _value(self, column: Any) -> Any:
        return exact_sum(column.drop_null())

    def _combine(self, a: State, b: State) -> Any:
        return a[1] + b[1]

    def _finalize(self, state: State) -> Any:
        value = super()._finalize(state)
        return float(value) if isinstance(value, Fraction) else value


class Min(AggregateFn):
    """The smallest value of column ``on``.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Min
        >>> ld.range(4).aggregate(Min("id"))
        {'min(id)': 0}
    """

    kind = "min"

    def _combine(self, a: State, b: State) -> Any:
        return min(a[1], b[1])


class Max(AggregateFn):
    """The largest value of column ``on``.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Max
        >>> ld.range(4).aggregate(Max("id"))
        {'max(id)': 3}
    """

    kind = "max"

    def _combine(self, a: State, b: State) -> Any:
        return max(a[1], b[1])


class Mean(AggregateFn):
    """The mean of column ``on``.

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Mean
        >>> ld.range(4).aggregate(Mean("id"))
        {'mean(id)': 1.5}
    """

    kind = "mean"

    def _value(self, column: Any) -> Any:
        return exact_sum(column.drop_null())  # the sum; divided once, at the end

    def _combine(self, a: State, b: State) -> Any:
        return a[1] + b[1]

    def _finalize(self, state: State) -> Any:
        total = super()._finalize(state)
        return None if total is None else float(total / state[0])


class Std(AggregateFn):
    """The standard deviation of column ``on``, with ``ddof`` (1: the sample std).

    Example:
        >>> import lockstep.data as ld
        >>> from lockstep.data.aggregate import Std
        >>> ld.from_items([{"x": 1.0}, {"x": 3.0}]).aggregate(Std("x", ddof=0))
        {'std(x)': 1.0}
    """

    kind = "std"

    def __init__(
        self,
        on: str | None = None,
        ddof: int = 1,
        *,
        ignore_nulls: bool = True,
        alias_name: str | None = None,
    ) -> None:
        super().__init__(on, ignore_nulls=ignore_nulls, alias_name=alias_name)
        self.ddof = ddof

    def _arrow_aggregation(self) -> tuple[Any, str, Any]:
        options = pc.VarianceOptions(ddof=self.ddof, skip_nulls=self.ignore_nulls, min_count=1)
        return self.on, "stddev", options

    def _partial(self, column: Any) -> State:
        moments = ExactMoments.of(column)
        return moments.count, moments, 0.0, column.null_count > 0

    def _merge(self, a: State, b: State) -> State:
        merged = (a[1] or ExactMoments()).merge(b[1] or ExactMoments())
        return merged.count, merged, 0.0, a[3] or b[3]

    def _finalize(self, state: State) -> Any:
        count, moments, _, saw_null = state
        if not count or (saw_null and not self.ignore_nulls):
            return None
        variance = moments.variance(self.ddof)
        return math.nan if variance is None else math.sqrt(variance)  # Ray: NaN, as pandas


def aggregate_blocks(blocks: Iterable[Any], aggs: list[AggregateFn]) -> dict[str, Any]:
    """Stream ``blocks`` once and return each aggregation's result by name."""
    states: list[State] = [(0, None, 0.0, False) for _ in aggs]
    for block in blocks:
        if not block.num_rows:
            continue
        for i, agg in enumerate(aggs):
            column = block.column(agg.on) if agg.on is not None else pa.nulls(block.num_rows)
            states[i] = agg._merge(states[i], agg._partial(column))
    return {agg.name: agg._finalize(state) for agg, state in zip(aggs, states, strict=True)}


def group_aggregate(table: Any, keys: list[str], aggs: list[AggregateFn]) -> Any:
    """Per-group aggregations of ``table``, one row per group, sorted by the keys."""
    specs = [agg._arrow_aggregation() for agg in aggs]
    result = table.group_by(keys, use_threads=False).aggregate(specs)
    # by position: two aggregations of one column and function get the same arrow name
    values = [i for i, n in enumerate(result.column_names) if n not in keys]
    arrays = [result.column(k) for k in keys] + [result.column(i) for i in values]
    out = pa.Table.from_arrays(arrays, names=keys + [agg.name for agg in aggs])
    return out.sort_by([(k, "ascending") for k in keys])


class AggregateMethods:
    """``sum``, ``min``, ``max``, ``mean`` and ``std`` of columns, written once.

    ``Dataset`` gives values (one, or a dict for a list of columns); ``GroupedData`` gives a
    dataset with one row per group. Each implements :meth:`_aggregate_columns`.
    """

    def _aggregate_columns(self, aggs: list[AggregateFn], one: bool) -> Any:
        """The result of ``aggs``; ``one`` when a single column name (not a list) was given."""
        raise NotImplementedError

    def sum(self, on: str | list[str], ignore_nulls: bool = True) -> Any:
        """The sum of column ``on`` (of each, for a list), in ``sum(col)``; None when no values.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(5).sum("id")
            10
        """
        return self._aggregate_columns(
            [Sum(c, ignore_nulls=ignore_nulls) for c in _names(on)], isinstance(on, str)
        )

    def min(self, on: str | list[str], ignore_nulls: bool = True) -> Any:
        """The smallest value of column ``on`` (of each, for a list), in ``min(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(5).min("id")
            0
        """
        return self._aggregate_columns(
            [Min(c, ignore_nulls=ignore_nulls) for c in _names(on)], isinstance(on, str)
        )

    def max(self, on: str | list[str], ignore_nulls: bool = True) -> Any:
        """The largest value of column ``on`` (of each, for a list), in ``max(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(5).max("id")
            4
        """
        return self._aggregate_columns(
            [Max(c, ignore_nulls=ignore_nulls) for c in _names(on)], isinstance(on, str)
        )

    def mean(self, on: str | list[str], ignore_nulls: bool = True) -> Any:
        """The mean of column ``on`` (of each, for a list), in ``mean(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(5).mean("id")
            2.0
        """
        return self._aggregate_columns(
            [Mean(c, ignore_nulls=ignore_nulls) for c in _names(on)], isinstance(on, str)
        )

    def std(self, on: str | list[str], ddof: int = 1, ignore_nulls: bool = True) -> Any:
        """The standard deviation of column ``on`` with ``ddof`` (1: sample std), in ``std(col)``.

        Example:
            >>> import lockstep.data as ld
            >>> round(ld.range(5).std("id"), 4)
            1.5811
        """
        return self._aggregate_columns(
            [Std(c, ddof, ignore_nulls=ignore_nulls) for c in _names(on)], isinstance(on, str)
        )


def _names(on: str | list[str]) -> list[str]:
    return [on] if isinstance(on, str) else list(on)
