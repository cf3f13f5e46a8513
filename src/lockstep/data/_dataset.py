"""Dataset: a lazy, immutable description of rows (sources) and what to do to them (ops).

Transforms return a new Dataset with one more op; nothing is read until the rows are
consumed, and then block by block, in whichever process consumes them. A Dataset pickles
as its description, so a worker receives its shard's files and ops, not its rows.
Global operations (``random_shuffle``, ``sort``, ``groupby``, ``unique``) need all rows at
once and gather them in the calling process; ``repartition``, ``union``, ``limit`` and the
splits stay lazy.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lockstep.data import _split
from lockstep.data._aggregate import AggregateFn, AggregateMethods, aggregate_blocks
from lockstep.data._compute import check_compute
from lockstep.data._convert import check_batch_format, to_pandas
from lockstep.data._execute import ConcatSource, PlanSource
from lockstep.data._expressions import parse as parse_expression
from lockstep.data._groupby import GroupedData
from lockstep.data._iterable import BatchIterable
from lockstep.data._iterator import DataIterator
from lockstep.data._ops import (
    AddColumn,
    DropColumns,
    Filter,
    FlatMap,
    MapBatches,
    MapRows,
    Op,
    RenameColumns,
    Udf,
    check_callable,
)
from lockstep.data._pipeline import DatasetPipeline
from lockstep.data._plan import Plan
from lockstep.data._relational import Sampler, Schema, join_tables, stratified_indices, zip_tables
from lockstep.data._sources import Source, TableSource
from lockstep.data._write import FilenameProvider, SaveMode, make_request, write_blocks

if TYPE_CHECKING:
    import pandas as pd


class Dataset(BatchIterable, AggregateMethods):
    """Rows described on the driver and read, transformed and batched where they are consumed.

    Create one with :func:`lockstep.data.from_items`, :func:`~lockstep.data.read_parquet`
    and the other constructors; pass it to a trainer as ``datasets={"train": ds}``; each
    worker then iterates ``lockstep.train.get_dataset_shard("train")``.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.range(6).map(lambda row: {"x": row["id"] * 10}).filter(lambda r: r["x"] > 20)
        >>> ds.take_all()
        [{'x': 30}, {'x': 40}, {'x': 50}]
    """

    def __init__(
        self,
        sources: Sequence[Source],
        ops: Sequence[Op] = (),
        *,
        counts: Sequence[int] | None = None,
    ) -> None:
        self._plan = Plan(sources, ops, counts)
        self._schema: Any = None
        self._last_stats = None

    # -- internals -------------------------------------------------------------------------

    @classmethod
    def _of(cls, plan: Plan) -> Dataset:
        dataset = cls.__new__(cls)
        dataset._plan, dataset._schema, dataset._last_stats = plan, None, None
        return dataset

    @property
    def _sources(self) -> tuple[Source, ...]:
        return self._plan.sources

    @property
    def _ops(self) -> tuple[Op, ...]:
        return self._plan.ops

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self._plan}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._plan, self._schema, self._last_stats = state["plan"], None, None

    def _with_op(self, op: Op) -> Dataset:
        return Dataset._of(self._plan.with_op(op))

    def _pass_blocks(self) -> Iterator[Any]:
        return self._plan.blocks()

    def _row_counts(self) -> list[int]:
        return self._plan.row_counts()

    def _table(self) -> Any:
        """Every row in one Arrow table, in this process."""
        return self._plan.table()

    def _aggregate_columns(self, aggs: list[AggregateFn], one: bool) -> Any:
        result = self.aggregate(*aggs)
        return next(iter(result.values())) if one else result

    # -- transforms --------------------------------------------------------------------------

    def map(
        self,
        fn: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        fn_args: Sequence[Any] | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_args: Sequence[Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        concurrency: int | tuple[int, int] | None = None,
        compute: Any = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        memory: float | None = None,
        ray_remote_args_fn: Callable[[], dict[str, Any]] | None = None,
        **ray_remote_args: Any,
    ) -> Dataset:
        """Apply ``fn`` to each row (a dict) and keep the dict it returns.

        ``fn`` may be a callable class: it is instantiated once per process, with the
        constructor arguments, before its first row. ``compute``, ``concurrency``,
        ``num_cpus``, ``num_gpus``, ``memory`` and Ray's remote arguments are checked as Ray
        checks them and have no other effect: rows are transformed by whoever consumes them.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(3).map(lambda row: {"sq": row["id"] ** 2}).take_all()
            [{'sq': 0}, {'sq': 1}, {'sq': 4}]
        """
        check_compute(fn, "map", compute, concurrency, num_cpus, num_gpus)
        udf = _udf(fn, "map", fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        return self._with_op(MapRows(udf))

    def map_batches(
        self,
        fn: Callable[[Any], Any],
        *,
        batch_size: int | None = None,
        batch_format: str = "default",
        zero_copy_batch: bool = False,
        fn_args: Sequence[Any] | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_args: Sequence[Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        concurrency: int | tuple[int, int] | None = None,
        compute: Any = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        memory: float | None = None,
        ray_remote_args_fn: Callable[[], dict[str, Any]] | None = None,
        **ray_remote_args: Any,
    ) -> Dataset:
        """Apply ``fn`` to batches of rows; it returns (or yields) batches.

        Args:
            fn: A function of a batch, or a callable class set up once per process.
            batch_size: Rows per batch; None (default) for whole blocks.
            batch_format: ``"default"``/``"numpy"``, ``"pandas"`` or ``"pyarrow"``.
            zero_copy_batch: Hand numpy batches as read-only views instead of copies.
            fn_args: Extra positional arguments for ``fn``.
            fn_kwargs: Extra keyword arguments for ``fn``.
            fn_constructor_args: Positional arguments for the class's constructor.
            fn_constructor_kwargs: Keyword arguments for the class's constructor.
            concurrency: Ray's number of parallel workers (or actors): accepted, no effect.
            compute: ``"tasks"``, ``"actors"``, :class:`ActorPoolStrategy` (a callable class,
                instantiated once per process that reads rows, not once per actor) or
                :class:`TaskPoolStrategy`.
            num_cpus: CPUs Ray reserves per worker: accepted, no effect (nothing is
                reserved, so a transform never waits for CPUs that training holds).
            num_gpus: GPUs Ray reserves per worker: accepted, no effect.
            memory: Memory Ray reserves per worker: accepted, no effect.
            ray_remote_args_fn: Ray's per-worker remote arguments: accepted, no effect.
            **ray_remote_args: Ray's remote arguments: accepted, no effect.

        Example:
            >>> import lockstep.data as ld
            >>> double = lambda batch: {"id": batch["id"] * 2}
            >>> ld.range(4).map_batches(double, batch_size=2).take_all()
            [{'id': 0}, {'id': 2}, {'id': 4}, {'id': 6}]
        """
        check_batch_format(batch_format, "map_batches")
        if batch_size is not None and (
            not isinstance(batch_size, numbers.Integral) or batch_size <= 0
        ):
            raise ValueError(
                f"map_batches: batch_size must be a positive int or None, got {batch_size!r}"
            )
        check_compute(fn, "map_batches", compute, concurrency, num_cpus, num_gpus)
        udf = _udf(
            fn, "map_batches", fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs
        )
        return self._with_op(MapBatches(udf, batch_format, batch_size, zero_copy_batch))

    def flat_map(
        self,
        fn: Callable[[dict[str, Any]], list[dict[str, Any]]],
        *,
        fn_args: Sequence[Any] | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_args: Sequence[Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        concurrency: int | tuple[int, int] | None = None,
        compute: Any = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        memory: float | None = None,
        ray_remote_args_fn: Callable[[], dict[str, Any]] | None = None,
        **ray_remote_args: Any,
    ) -> Dataset:
        """Apply ``fn`` to each row; it returns a list of rows (possibly empty).

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).flat_map(lambda row: [row, row]).count()
            4
        """
        check_compute(fn, "flat_map", compute, concurrency, num_cpus, num_gpus)
        udf = _udf(fn, "flat_map", fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        return self._with_op(FlatMap(udf))

    def filter(
        self,
        fn: Callable[[dict[str, Any]], bool] | None = None,
        *,
        expr: Any = None,
        fn_args: Sequence[Any] | None = None,
        fn_kwargs: Mapping[str, Any] | None = None,
        fn_constructor_args: Sequence[Any] | None = None,
        fn_constructor_kwargs: Mapping[str, Any] | None = None,
        concurrency: int | tuple[int, int] | None = None,
        compute: Any = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        memory: float | None = None,
        ray_remote_args_fn: Callable[[], dict[str, Any]] | None = None,
        **ray_remote_args: Any,
    ) -> Dataset:
        """Keep the rows for which ``fn(row)`` is true, or that match ``expr``.

        ``expr`` is a ``pyarrow.compute`` expression (``lockstep.data.expressions.col``
        builds one) or a string such as ``"x > 50 and y != 'a'"``, as Ray takes; it is
        evaluated on whole blocks (fast).

        Example:
            >>> import pyarrow.compute as pc, lockstep.data as ld
            >>> ld.range(5).filter(expr=pc.field("id") >= 3).take_all()
            [{'id': 3}, {'id': 4}]
        """
        if expr is None and _is_expression(fn):
            fn, expr = None, fn  # a pyarrow expression given as the function
        if (fn is None) == (expr is None):
            raise ValueError(
                "filter takes either fn or expr. HINT: ds.filter(lambda row: row['x'] > 0) "
                "or ds.filter(expr=pyarrow.compute.field('x') > 0)"
            )
        if isinstance(expr, str):
            expr = parse_expression(expr)
        if expr is not None:
            import pyarrow.compute as pc

            if not isinstance(expr, pc.Expression):
                raise ValueError(
                    "filter(expr=...) takes a pyarrow.compute.Expression, got "
                    f"{type(expr).__name__}. HINT: expr=pyarrow.compute.field('x') > 0"
                )
            return Dataset._of(self._plan.filtered(expr))
        assert fn is not None
        check_compute(fn, "filter", compute, concurrency, num_cpus, num_gpus)
        udf = _udf(fn, "filter", fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        return self._with_op(Filter(udf=udf))

    def add_column(
        self, col: str, fn: Callable[[Any], Any], *, batch_format: str = "pandas"
    ) -> Dataset:
        """Add (or replace) column ``col``, computed as ``fn(batch)``, one value per row.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).add_column("twice", lambda df: df["id"] * 2).take_all()
            [{'id': 0, 'twice': 0}, {'id': 1, 'twice': 2}]
        """
        if not isinstance(col, str):
            raise ValueError(f"add_column: the column name must be a string, got {col!r}")
        check_callable(fn, "add_column")
        check_batch_format(batch_format, "add_column")
        return self._with_op(AddColumn(col, Udf(fn), batch_format))

    def drop_columns(self, cols: str | Sequence[str]) -> Dataset:
        """Remove columns.

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"a": 1, "b": 2}]).drop_columns(["b"]).take_all()
            [{'a': 1}]
        """
        names = _column_list(cols, "drop_columns")
        self._plan.check_columns(names, "drop_columns")
        return self._with_op(DropColumns(tuple(names)))

    def select_columns(self, cols: str | Sequence[str]) -> Dataset:
        """Keep only these columns, in this order; files then read only these columns.

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"a": 1, "b": 2}]).select_columns(["b"]).take_all()
            [{'b': 2}]
        """
        return Dataset._of(self._plan.select_columns(_column_list(cols, "select_columns")))

    def rename_columns(self, names: Mapping[str, str] | Sequence[str]) -> Dataset:
        """Rename columns: a dict of old to new name, or the new names of all columns.

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"a": 1}]).rename_columns({"a": "b"}).take_all()
            [{'b': 1}]
        """
        mapping = _rename_mapping(names, lambda: self.columns() or [])
        self._plan.check_columns(list(mapping), "rename_columns")
        return self._with_op(RenameColumns(tuple(mapping.items())))

    def limit(self, limit: int) -> Dataset:
        """The first ``limit`` rows; reading stops once they are read.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(1000).limit(2).take_all()
            [{'id': 0}, {'id': 1}]
        """
        if not isinstance(limit, numbers.Integral) or isinstance(limit, bool) or limit < 0:
            raise ValueError(f"limit takes a non-negative int, got {limit!r}")
        return Dataset._of(self._plan.limit(int(limit)))

    # -- global operations (rows gathered in this process) -----------------------------------

    def random_shuffle(self, *, seed: int | None = None, num_blocks: int | None = None) -> Dataset:
        """The rows in a random order. Gathers all rows in this process.

        Example:
            >>> import lockstep.data as ld
            >>> sorted(r["id"] for r in ld.range(5).random_shuffle(seed=0).take_all())
            [0, 1, 2, 3, 4]
        """
        return Dataset._of(self._plan.shuffled(seed, num_blocks))

    def sort(self, key: str | list[str], descending: bool | list[bool] = False) -> Dataset:
        """The rows sorted by ``key`` (nulls last). Gathers all rows in this process.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(3).sort("id", descending=True).take_all()
            [{'id': 2}, {'id': 1}, {'id': 0}]
        """
        keys = _column_list(key, "sort")
        orders = descending if isinstance(descending, list) else [descending] * len(keys)
        if len(orders) != len(keys):
            raise ValueError(
                f"sort: {len(keys)} keys but {len(orders)} descending flags. "
                "HINT: one flag per key, or a single bool"
            )
        order = [(k, "descending" if d else "ascending") for k, d in zip(keys, orders, strict=True)]
        return Dataset._of(self._plan.sorted(order))

    def repartition(self, num_blocks: int, *, shuffle: bool = False) -> Dataset:
        """The same rows in ``num_blocks`` blocks of near-equal size (lazy unless ``shuffle``).

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(10).repartition(3).num_blocks()
            3
        """
        _split.check_num_splits(num_blocks, "repartition")
        if shuffle:
            return self.random_shuffle(num_blocks=num_blocks)
        parts = self._plan.split(num_blocks)
        counts = [sum(p.row_counts()) for p in parts]
        return Dataset([ConcatSource(p.sources) for p in parts], counts=counts)

    def union(self, *other: Dataset) -> Dataset:
        """This dataset's rows followed by those of ``other`` (lazy).

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).union(ld.range(1)).take_all()
            [{'id': 0}, {'id': 1}, {'id': 0}]
        """
        for ds in other:
            if not isinstance(ds, Dataset):
                raise ValueError(f"union takes Datasets, got {type(ds).__name__}")
        everything = (self, *other)
        sources = [s for ds in everything for s in ds._plan.folded()]
        known = [ds._plan.counts for ds in everything]
        counts = None if any(c is None for c in known) else [n for c in known for n in c or []]
        return Dataset(sources, counts=counts)

    def groupby(self, key: str | list[str]) -> GroupedData[Dataset]:
        """Group rows by the values of ``key`` columns, to aggregate each group.

        The key and aggregated columns are gathered in this process.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"k": i % 2, "v": i} for i in range(6)])
            >>> ds.groupby("k").mean("v").take_all()
            [{'k': 0, 'mean(v)': 2.0}, {'k': 1, 'mean(v)': 3.0}]
        """
        return GroupedData(self._plan, key, Dataset._of)

    def unique(self, column: str) -> list[Any]:
        """The distinct values of ``column``, in order of first appearance (streaming).

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"c": "b"}, {"c": "a"}, {"c": "b"}]).unique("c")
            ['b', 'a']
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        seen: list[Any] = []
        for block in self.select_columns([column])._pass_blocks():
            if block.num_rows:
                seen.append(pc.unique(block.column(0)))
        if not seen:
            return []
        values: list[Any] = pc.unique(pa.chunked_array(seen)).to_pylist()
        return values

    def aggregate(self, *aggs: AggregateFn) -> dict[str, Any]:
        """Aggregations over all rows, computed streaming; a dict of name to value.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.aggregate import Max, Min
            >>> ld.range(10).aggregate(Min("id"), Max("id"))
            {'min(id)': 0, 'max(id)': 9}
        """
        if not aggs or not all(isinstance(a, AggregateFn) for a in aggs):
            raise ValueError(
                "aggregate takes aggregations such as Sum('x'). "
                "HINT: from lockstep.data.aggregate import Sum"
            )
        columns = list(dict.fromkeys(a.on for a in aggs if a.on is not None))
        return aggregate_blocks(self.select_columns(columns)._pass_blocks(), list(aggs))

    # -- splits -----------------------------------------------------------------------------

    def split(self, n: int, *, equal: bool = False, locality_hints: Any = None) -> list[Dataset]:
        """``n`` disjoint datasets covering the rows, in order.

        With ``equal=True`` each has ``count() // n`` rows (at most ``n - 1`` rows at the end
        are left out, as in Ray); otherwise sizes differ by at most one row. Row counts come
        from metadata (parquet footers) when the pending transforms keep rows; otherwise the
        data is streamed once here to count them. Each part holds only its own files, row
        groups or table slices. ``locality_hints`` is accepted for Ray compatibility.

        Example:
            >>> import lockstep.data as ld
            >>> [part.count() for part in ld.range(10).split(3, equal=True)]
            [3, 3, 3]
        """
        _split.check_num_splits(n, "split")
        return [Dataset._of(p) for p in self._plan.split(n, equal)]

    def split_at_indices(self, indices: Sequence[int]) -> list[Dataset]:
        """The rows cut at ``indices``: ``len(indices) + 1`` datasets.

        Example:
            >>> import lockstep.data as ld
            >>> [p.count() for p in ld.range(10).split_at_indices([2, 5])]
            [2, 3, 5]
        """
        ranges = _split.index_ranges(sum(self._row_counts()), indices)
        return [Dataset._of(p) for p in self._plan.windows(ranges)]

    def split_proportionately(self, proportions: Sequence[float]) -> list[Dataset]:
        """Datasets with these fractions of the rows, plus one with the rest.

        Example:
            >>> import lockstep.data as ld
            >>> [p.count() for p in ld.range(10).split_proportionately([0.2, 0.5])]
            [2, 5, 3]
        """
        total = sum(self._row_counts())
        return self.split_at_indices(_split.proportion_indices(total, proportions))

    def train_test_split(
        self,
        test_size: int | float,
        *,
        shuffle: bool = False,
        seed: int | None = None,
        stratify: str | None = None,
    ) -> tuple[Dataset, Dataset]:
        """``(train, test)``: the last ``test_size`` rows (a count, or a fraction) are test.

        With ``stratify`` (a column), each of its values is split in the same proportion
        (the rows are gathered in this process, as Ray does).

        Example:
            >>> import lockstep.data as ld
            >>> train, test = ld.range(10).train_test_split(0.3)
            >>> train.count(), test.count()
            (7, 3)
        """
        if stratify is not None:
            return self._stratified_split(test_size, stratify, seed if shuffle else None)
        ds = self.random_shuffle(seed=seed) if shuffle else self
        if isinstance(test_size, float):
            if not 0 < test_size < 1:
                raise ValueError(
                    f"train_test_split: a fractional test_size must be in (0, 1), got {test_size}"
                )
            train, test = ds.split_proportionately([1 - test_size])
            return train, test
        total = ds.count()
        if not isinstance(test_size, int) or not 0 < test_size < total:
            raise ValueError(
                f"train_test_split: test_size must be a fraction or a row count between 1 and "
                f"{total - 1}, got {test_size!r}"
            )
        train, test = ds.split_at_indices([total - test_size])
        return train, test

    def _stratified_split(
        self, test_size: int | float, column: str, seed: int | None
    ) -> tuple[Dataset, Dataset]:
        table = self.to_arrow()
        if column not in table.column_names:
            raise ValueError(
                f"train_test_split: stratify column {column!r} does not exist; the columns "
                f"are {table.column_names}. HINT: stratify= one of them"
            )
        fraction = test_size / table.num_rows if isinstance(test_size, int) else test_size
        if not 0 < fraction < 1:
            raise ValueError(f"train_test_split: test_size {test_size!r} is out of range")
        train, test = stratified_indices(table.column(column), fraction, seed)
        return (
            Dataset([TableSource(table.take(train))]),
            Dataset([TableSource(table.take(test))]),
        )

    def join(
        self,
        ds: Dataset,
        join_type: str = "inner",
        num_partitions: int | None = None,
        on: Sequence[str] = ("id",),
        right_on: Sequence[str] | None = None,
        left_suffix: str | None = None,
        right_suffix: str | None = None,
        **ray_args: Any,
    ) -> Dataset:
        """This dataset's rows joined with ``ds``'s on key columns (a hash join in Arrow).

        Args:
            ds: The right side.
            join_type: ``"inner"``, ``"left_outer"``, ``"right_outer"``, ``"full_outer"``
                (and the semi and anti joins).
            num_partitions: Ray's shuffle partitions: accepted, no effect (both sides are
                gathered in this process).
            on: The key columns of this dataset.
            right_on: The key columns of ``ds`` (``on`` by default).
            left_suffix: Appended to this side's other columns whose names collide.
            right_suffix: Appended to ``ds``'s other columns whose names collide.
            **ray_args: Ray's other arguments (``partition_size_hint``, ...): accepted.

        Example:
            >>> import lockstep.data as ld
            >>> left = ld.from_items([{"id": 1, "a": "x"}, {"id": 2, "a": "y"}])
            >>> right = ld.from_items([{"id": 2, "b": 20}, {"id": 3, "b": 30}])
            >>> left.join(right, "inner", 1, on=("id",)).take_all()
            [{'id': 2, 'a': 'y', 'b': 20}]
        """
        table = join_tables(
            self.to_arrow(), ds.to_arrow(), join_type, list(on), right_on, left_suffix, right_suffix
        )
        return Dataset([TableSource(table)])

    def zip(self, *other: Dataset) -> Dataset:
        """The columns of this dataset and of ``other``, row by row (same row counts).

        A column whose name is already taken gets ``_1`` appended, as in Ray.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).zip(ld.range(2)).take_all()
            [{'id': 0, 'id_1': 0}, {'id': 1, 'id_1': 1}]
        """
        table = self.to_arrow()
        for ds in other:
            table = zip_tables(table, ds.to_arrow())
        return Dataset([TableSource(table)])

    def with_column(self, column_name: str, expr: Any) -> Dataset:
        """Add (or replace) a column computed from an expression, block by block, lazily.

        Example:
            >>> import lockstep.data as ld
            >>> from lockstep.data.expressions import col
            >>> ld.range(2).with_column("twice", col("id") * 2).take_all()
            [{'id': 0, 'twice': 0}, {'id': 1, 'twice': 2}]
        """
        import pyarrow.compute as pc

        if not isinstance(column_name, str):
            raise ValueError(f"with_column: the name must be a string, got {column_name!r}")
        if isinstance(expr, str):
            expr = parse_expression(expr)
        if not isinstance(expr, pc.Expression):
            raise ValueError(
                f"with_column takes an expression, got {type(expr).__name__}. HINT: "
                "from lockstep.data.expressions import col; col('x') + 1"
            )
        return self._with_op(
            MapBatches(Udf(_ColumnOf(column_name, expr)), "pyarrow", None, preserves_rows=True)
        )

    def random_sample(self, fraction: float, *, seed: int | None = None) -> Dataset:
        """Each row kept with probability ``fraction``; the same rows for the same seed.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.range(1000)
            >>> ds.random_sample(0.1, seed=3).take_all() == ds.random_sample(0.1, seed=3).take_all()
            True
        """
        if self._plan.known_counts() == [0] * len(self._sources):
            raise ValueError("Cannot sample from an empty Dataset. HINT: random_sample needs rows")
        if not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
            raise ValueError(
                f"Fraction must be between 0 and 1. HINT: random_sample got {fraction!r}"
            )
        sources = [
            PlanSource(s, (MapBatches(Udf(Sampler(float(fraction), seed, i)), "pyarrow"),))
            for i, s in enumerate(self._plan.folded())
        ]
        return Dataset(sources)

    def size_bytes(self) -> int:
        """The in-memory size of the rows, in bytes (Arrow's; computed by a pass if needed).

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(10).size_bytes()
            80
        """
        sources = self._plan.sources
        in_memory = not self._plan.ops and all(type(s) is TableSource for s in sources)
        blocks = (s.table for s in sources) if in_memory else self._pass_blocks()  # type: ignore[attr-defined]
        total = 0
        for block in blocks:
            total += int(block.nbytes)
        return total

    def streaming_split(
        self, n: int, *, equal: bool = False, locality_hints: Any = None
    ) -> list[DataIterator[Dataset]]:
        """``n`` iterators over disjoint parts, one per consumer (see :meth:`split`).

        Example:
            >>> import lockstep.data as ld
            >>> [it.count() for it in ld.range(9).streaming_split(2, equal=True)]
            [4, 4]
        """
        return [part.iterator() for part in self.split(n, equal=equal)]

    # -- consumption ------------------------------------------------------------------------

    def iterator(self) -> DataIterator[Dataset]:
        """A :class:`DataIterator` over this dataset: what ``get_dataset_shard`` returns.

        Example:
            >>> import lockstep.data as ld
            >>> it = ld.range(3).iterator()
            >>> [b["id"].tolist() for b in it.iter_batches(batch_size=3)]
            [[0, 1, 2]]
        """
        return DataIterator(self._plan, Dataset._of)

    def repeat(self, times: int | None = None) -> DatasetPipeline[Dataset]:
        """A pipeline of ``times`` epochs of this dataset (forever with None) (older API).

        Example:
            >>> import lockstep.data as ld
            >>> epochs = ld.range(2).repeat(3).iter_epochs()
            >>> [epoch.count() for epoch in epochs]
            [2, 2, 2]
        """
        return DatasetPipeline(self._plan, Dataset._of, times=times)

    def count(self) -> int:
        """The number of rows; from metadata when possible, else by streaming once.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(7).count()
            7
        """
        return sum(self._row_counts())

    def schema(self) -> Schema | None:
        """The :class:`Schema` of the rows (from metadata, or the first block).

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).schema().names
            ['id']
        """
        if self._schema is None:
            self._schema = self._plan.schema()
        return Schema(self._schema) if self._schema is not None else None

    def columns(self, fetch_if_missing: bool = True) -> list[str] | None:
        """The column names; with ``fetch_if_missing=False``, None unless metadata tells.

        Example:
            >>> import lockstep.data as ld
            >>> ld.from_items([{"a": 1, "b": 2}]).columns()
            ['a', 'b']
        """
        if not fetch_if_missing:
            schema = self._plan.metadata_schema()
            return None if schema is None else list(schema.names)
        schema = self.schema()
        return schema.names if schema is not None else []

    def __len__(self) -> int:
        raise AttributeError(
            "Use `ds.count()` to compute the length of a distributed Dataset. This may be "
            "an expensive operation. HINT: count() reads metadata where it can"
        )

    def num_blocks(self) -> int:
        """The number of blocks (files, row ranges, tables) the rows are described by.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(10, override_num_blocks=4).num_blocks()
            4
        """
        return len(self._sources)

    def input_files(self) -> list[str]:
        """The files this dataset reads (a split part lists only its own).

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(3).input_files()
            []
        """
        return list(dict.fromkeys(f for s in self._sources for f in s.input_files()))

    def take(self, limit: int = 20) -> list[dict[str, Any]]:
        """The first ``limit`` rows, as dicts.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(100).take(2)
            [{'id': 0}, {'id': 1}]
        """
        return list(self.limit(limit).iter_rows(prefetch_batches=0))

    def take_batch(self, batch_size: int = 20, *, batch_format: str = "default") -> Any:
        """The first ``batch_size`` rows as one batch.

        Raises:
            ValueError: The dataset is empty.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(100).take_batch(3)["id"]
            array([0, 1, 2])
        """
        batches = self.limit(batch_size).iter_batches(
            batch_size=batch_size, batch_format=batch_format, prefetch_batches=0
        )
        for batch in batches:
            return batch
        raise ValueError("take_batch: the dataset is empty")

    def take_all(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every row, as dicts.

        Raises:
            ValueError: There are more than ``limit`` rows.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).take_all()
            [{'id': 0}, {'id': 1}]
        """
        source = self.limit(limit + 1) if limit is not None else self
        rows = list(source.iter_rows(prefetch_batches=0))
        if limit is not None and len(rows) > limit:
            raise ValueError(
                f"take_all: the dataset has more than {limit} rows. "
                "HINT: raise limit, or use take(n) or iter_rows()"
            )
        return rows

    def show(self, limit: int = 20) -> None:
        """Print the first ``limit`` rows.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(2).show()
            {'id': 0}
            {'id': 1}
        """
        for row in self.take(limit):
            print(row)

    def to_pandas(self, limit: int | None = None) -> pd.DataFrame:
        """Every row in one pandas DataFrame, in this process.

        Raises:
            ValueError: There are more than ``limit`` rows.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(3).to_pandas()["id"].tolist()
            [0, 1, 2]
        """
        source = self.limit(limit + 1) if limit is not None else self
        table = source._table()
        if limit is not None and table.num_rows > limit:
            raise ValueError(
                f"to_pandas: the dataset has more than {limit} rows. HINT: raise limit, "
                "or iterate with iter_batches(batch_format='pandas')"
            )
        if not table.num_columns and self._plan.schema() is not None:
            table = self._plan.schema().empty_table()
        return to_pandas(table)

    def to_arrow(self) -> Any:
        """Every row in one ``pyarrow.Table``, in this process.

        Example:
            >>> import lockstep.data as ld
            >>> ld.range(3).to_arrow().num_rows
            3
        """
        return self._plan.arrow()

    def materialize(self) -> Dataset:
        """This dataset with the transforms done and the rows held in memory, block by block.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.range(3).map(lambda r: {"x": r["id"] + 1}).materialize()
            >>> ds.take_all()
            [{'x': 1}, {'x': 2}, {'x': 3}]
        """
        return Dataset._of(self._plan.materialize())

    def stats(self) -> str:
        """What the dataset is made of and figures of its latest pass, in Ray's layout: an
        ``Operator`` paragraph per step (the read, then each transform), then the
        iterator's time breakdown and throughput.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.range(4)
            >>> _ = list(ds.iter_batches(batch_size=2))
            >>> print(ds.stats().splitlines()[0])
            Operator 0 Read: 1 blocks
        """
        lines = [f"Operator 0 Read: {len(self._sources)} blocks"]
        lines += [f"* block {i}: {s.describe()}" for i, s in enumerate(self._sources[:10])]
        if len(self._sources) > 10:
            lines.append(f"* ... and {len(self._sources) - 10} more")
        for number, op in enumerate(self._ops, start=1):
            lines += ["", f"Operator {number} {op.describe()}"]
        stats = self._last_stats
        lines += ["", stats.summary() if stats else "No pass over the data has run yet."]
        return "\n".join(lines)

    # -- writing ----------------------------------------------------------------------------

    def write_parquet(
        self,
        path: str | os.PathLike[str],
        *,
        partition_cols: Sequence[str] | None = None,
        min_rows_per_file: int | None = None,
        max_rows_per_file: int | None = None,
        filesystem: Any = None,
        filename_provider: FilenameProvider | None = None,
        arrow_parquet_args_fn: Callable[[], dict[str, Any]] | None = None,
        mode: str | SaveMode = SaveMode.APPEND,
        partitioning_flavor: str | None = "hive",
        **arrow_parquet_args: Any,
    ) -> None:
        """Write parquet files under the directory ``path`` (local or URL), streaming.

        Args:
            path: The directory.
            partition_cols: Write hive directories ``col=value/`` by these columns (left
                out of the files, as Ray does).
            min_rows_per_file: Put blocks together until a file has this many rows.
            max_rows_per_file: Start a new file when one has this many rows.
            filesystem: A pyarrow or fsspec filesystem the path is on.
            filename_provider: Names the files (a ``datasource.FilenameProvider``).
            arrow_parquet_args_fn: Returns more ``pyarrow.parquet.ParquetWriter`` options;
                they override ``arrow_parquet_args`` of the same name, as in Ray.
            mode: ``"append"`` (default), ``"overwrite"``, ``"ignore"`` or ``"error"``
                when the directory exists.
            partitioning_flavor: With ``partition_cols``: ``"hive"`` (``col=value/``
                directories, the default), None (``value/`` directories) or
                ``"filename"`` (``value_`` file name prefixes), pyarrow's flavors.
            **arrow_parquet_args: ``pyarrow.parquet.ParquetWriter`` options (``schema``:
                every block is cast to it; and ``row_group_size``); Ray's
                ``try_create_dir``, ``concurrency``, ``ray_remote_args``,
                ``arrow_open_stream_args`` are accepted.

        Raises:
            TypeError: A keyword the parquet writer does not take.

        Example:
            >>> import tempfile, lockstep.data as ld
            >>> with tempfile.TemporaryDirectory() as d:
            ...     ld.range(5).write_parquet(d)
            ...     ld.read_parquet(d).count()
            5
        """
        request = make_request(
            "parquet",
            "write_parquet",
            arrow_parquet_args,
            options_fn=arrow_parquet_args_fn,
            partition_cols=partition_cols,
            min_rows_per_file=min_rows_per_file,
            max_rows_per_file=max_rows_per_file,
            mode=mode,
            filename_provider=filename_provider,
            partitioning_flavor=partitioning_flavor,
        )
        write_blocks(self._folded(), path, filesystem=filesystem, request=request)

    def write_csv(
        self,
        path: str | os.PathLike[str],
        *,
        min_rows_per_file: int | None = None,
        filesystem: Any = None,
        filename_provider: FilenameProvider | None = None,
        arrow_csv_args_fn: Callable[[], dict[str, Any]] | None = None,
        mode: str | SaveMode = SaveMode.APPEND,
        **arrow_csv_args: Any,
    ) -> None:
        """Write CSV files under the directory ``path`` (local or URL), streaming.

        Takes Ray's ``min_rows_per_file``, ``filename_provider``, ``arrow_csv_args_fn`` and
        ``mode`` (see :meth:`write_parquet`); ``arrow_csv_args`` are
        ``pyarrow.csv.CSVWriter``'s (``write_options``).

        Raises:
            TypeError: A keyword the CSV writer does not take.

        Example:
            >>> import tempfile, lockstep.data as ld
            >>> with tempfile.TemporaryDirectory() as d:
            ...     ld.range(5).write_csv(d)
            ...     ld.read_csv(d).sum("id")
            10
        """
        request = make_request(
            "csv",
            "write_csv",
            arrow_csv_args,
            options_fn=arrow_csv_args_fn,
            min_rows_per_file=min_rows_per_file,
            mode=mode,
            filename_provider=filename_provider,
        )
        write_blocks(self._folded(), path, filesystem=filesystem, request=request)

    def write_json(
        self,
        path: str | os.PathLike[str],
        *,
        min_rows_per_file: int | None = None,
        filesystem: Any = None,
        filename_provider: FilenameProvider | None = None,
        pandas_json_args_fn: Callable[[], dict[str, Any]] | None = None,
        mode: str | SaveMode = SaveMode.APPEND,
        **pandas_json_args: Any,
    ) -> None:
        """Write JSON-lines files under the directory ``path`` (local or URL), streaming.

        Takes Ray's ``min_rows_per_file``, ``filename_provider``, ``pandas_json_args_fn``
        and ``mode`` (see :meth:`write_parquet`); ``pandas_json_args`` are
        ``pandas.DataFrame.to_json``'s.

        Raises:
            TypeError: A keyword ``to_json`` does not take.

        Example:
            >>> import tempfile, lockstep.data as ld
            >>> with tempfile.TemporaryDirectory() as d:
            ...     ld.range(3).write_json(d)
            ...     ld.read_json(d).take_all()
            [{'id': 0}, {'id': 1}, {'id': 2}]
        """
        request = make_request(
            "json",
            "write_json",
            pandas_json_args,
            options_fn=pandas_json_args_fn,
            min_rows_per_file=min_rows_per_file,
            mode=mode,
            filename_provider=filename_provider,
        )
        write_blocks(self._folded(), path, filesystem=filesystem, request=request)

    def _folded(self) -> list[Source]:
        return self._plan.folded()

    def __repr__(self) -> str:
        """Ray's layout: a table of the columns (and, in memory, the rows); the plan's
        summary when the schema is not known without reading."""
        from lockstep.data import _repr

        schema = self._plan.metadata_schema()
        if schema is None or not schema.names:
            return self._plan.describe()
        tables = [s.table for s in self._sources if isinstance(s, TableSource)]
        rows = None
        if len(tables) == len(self._sources):
            rows = _repr.preview_rows(_ends(tables))
        counts = self._plan.known_counts()
        return _repr.dataset_table(schema, sum(counts) if counts is not None else None, rows)


def _ends(tables: list[Any]) -> Any:
    """The first and last ten rows of in-memory blocks, as one table (no other row is
    copied)."""
    from lockstep.data._convert import concat

    head: list[Any] = []
    tail: list[Any] = []
    need = 10
    for table in tables:
        if need <= 0:
            break
        head.append(table.slice(0, need))
        need -= min(need, table.num_rows)
    need = 10
    for table in reversed(tables):
        if need <= 0:
            break
        tail.insert(0, table.slice(max(0, table.num_rows - need)))
        need -= min(need, table.num_rows)
    total = sum(t.num_rows for t in tables)
    if total <= 20:
        return concat(tables)
    return concat([*head, *tail])  # 20 rows: the preview's first and last five among them


class _ColumnOf:
    """A block with column ``name`` set to ``expression`` evaluated on it."""

    def __init__(self, name: str, expression: Any) -> None:
        self.name, self.expression = name, expression

    def __call__(self, table: Any) -> Any:
        import pyarrow.dataset as pads

        columns = {c: pads.field(c) for c in table.column_names if c != self.name}
        values = pads.dataset(table).to_table(columns={self.name: self.expression})
        out = (
            table.drop_columns([self.name])
            if self.name in columns or self.name in table.column_names
            else table
        )
        return out.append_column(self.name, values.column(0))


def _udf(
    fn: Any,
    where: str,
    fn_args: Sequence[Any] | None,
    fn_kwargs: Mapping[str, Any] | None,
    constructor_args: Sequence[Any] | None,
    constructor_kwargs: Mapping[str, Any] | None,
) -> Udf:
    check_callable(fn, where)
    if (constructor_args or constructor_kwargs) and not isinstance(fn, type):
        raise ValueError(
            f"{where}: fn_constructor_args/fn_constructor_kwargs are for a callable class, but "
            f"fn is a {type(fn).__name__}. HINT: pass the class itself, not an instance"
        )
    return Udf(fn, fn_args or (), fn_kwargs, constructor_args or (), constructor_kwargs)


def _is_expression(value: Any) -> bool:
    import pyarrow.compute as pc

    return isinstance(value, pc.Expression)


def _column_list(cols: str | Sequence[str], where: str) -> list[str]:
    """``cols`` as a list of names, checked with Ray's words (and a hint)."""
    if not isinstance(cols, str | list | tuple):
        raise TypeError(
            f"{where} requires 'cols' to be a string or a list of strings. HINT: got {cols!r}"
        )
    names = [cols] if isinstance(cols, str) else list(cols)
    if not all(isinstance(c, str) for c in names):
        raise ValueError(
            f"{where} requires all elements of 'cols' to be strings. HINT: got {cols!r}"
        )
    if where in ("select_columns", "drop_columns") and len(set(names)) != len(names):
        verb = "expected" if where == "select_columns" else "expects"
        raise ValueError(
            f"{where} {verb} unique column names, got {names}. HINT: name each column once"
        )
    return names


def _rename_mapping(names: Any, current: Callable[[], list[str]]) -> dict[str, str]:
    """Old name to new name from ``rename_columns``' argument, checked as Ray checks it."""
    if isinstance(names, Mapping):
        if not names:
            raise ValueError("rename_columns received 'names' with no entries.")
        if len(set(names.values())) != len(names):
            raise ValueError(
                f"rename_columns received duplicate values in the 'names': {dict(names)}"
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
            raise ValueError(
                "rename_columns requires both keys and values in the 'names' to be strings."
            )
        return dict(names)
    if not isinstance(names, list | tuple):
        raise TypeError(
            "rename_columns expected names to be either List[str] or Dict[str, str], "
            f"got {type(names)}. HINT: {{'old': 'new'}}"
        )
    if not names:
        raise ValueError("rename_columns requires 'names' with at least one column name.")
    if len(set(names)) != len(names):
        raise ValueError(f"rename_columns received duplicate values in the 'names': {names}")
    if not all(isinstance(n, str) for n in names):
        raise ValueError("rename_columns requires all elements in the 'names' to be strings.")
    columns = current()
    if len(names) != len(columns):
        raise ValueError(
            f"rename_columns requires 'names': {list(names)} length match current schema "
            f"names: {columns}. HINT: a name for every column, or a dict of old to new name"
        )
    return dict(zip(columns, names, strict=True))
