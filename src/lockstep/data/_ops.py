"""Per-block transforms: what ``map``, ``map_batches``, ``filter`` and friends record.

Each op is a small picklable value that turns a stream of Arrow tables into another, so a
dataset's pending transforms travel to the workers and run there, block by block.
``preserves_rows`` says whether output row ``i`` comes from input row ``i``; when every op
of a dataset preserves rows, row counts and splits come from metadata alone.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from lockstep.data._batching import rebatch
from lockstep.data._columns import put_column, require_columns
from lockstep.data._convert import (
    column_from_values,
    from_batch,
    from_rows,
    to_format,
    to_rows,
)


class Udf:
    """A user function, or a callable class instantiated once per process when first used.

    A class is how a user sets up expensive state (a model) once and reuses it per batch,
    as with Ray's callable classes; the instance is not pickled, so each worker builds its own.
    """

    __slots__ = ("_instance", "args", "constructor_args", "constructor_kwargs", "fn", "kwargs")

    def __init__(
        self,
        fn: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        constructor_args: Sequence[Any] = (),
        constructor_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.constructor_args = tuple(constructor_args)
        self.constructor_kwargs = dict(constructor_kwargs or {})
        self._instance: Any = None

    def __call__(self, value: Any) -> Any:
        return self.resolve()(value, *self.args, **self.kwargs)

    def resolve(self) -> Callable[..., Any]:
        if not inspect.isclass(self.fn):
            return self.fn  # type: ignore[no-any-return]
        if self._instance is None:
            self._instance = self.fn(*self.constructor_args, **self.constructor_kwargs)
        return self._instance  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def __getstate__(self) -> dict[str, Any]:
        from lockstep._core.pickling import to_bytes

        state = {k: getattr(self, k) for k in self.__slots__ if k not in ("_instance", "fn")}
        # by value where plain pickle cannot (a function defined inside another, a lambda,
        # a class in __main__): datasets travel to workers inside a plain pickle; the
        # function keeps its file and lines for a worker's traceback
        state["fn"] = to_bytes(self.fn)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        import pickle

        for key, value in state.items():
            setattr(self, key, pickle.loads(value) if key == "fn" else value)
        self._instance = None


def same_columns(rows: list[Any]) -> list[Any]:
    """``rows``, checked to name the same columns, as Ray checks a block's rows."""
    first = rows[0].keys() if rows and isinstance(rows[0], Mapping) else None
    for row in rows:
        if first is not None and isinstance(row, Mapping) and row.keys() != first:
            raise ValueError(
                "Current row has different columns compared to previous rows. Columns of "
                f"current row: {sorted(row.keys())}, Columns of previous rows: "
                f"{sorted(first)}. HINT: return the same keys from every row (None for a "
                "missing value)"
            )
    return rows


def check_callable(fn: Any, where: str) -> None:
    """Raise a ValueError unless ``fn`` is a function or a callable class."""
    if not callable(fn):
        raise ValueError(
            f"{where} takes a function or a callable class, got {type(fn).__name__}. "
            "HINT: pass e.g. lambda row: {**row, 'y': row['x'] * 2}"
        )


class Op(abc.ABC):
    """One pending transform."""

    preserves_rows = False

    @abc.abstractmethod
    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        """The transformed stream."""

    @abc.abstractmethod
    def describe(self) -> str:
        """A short description for ``repr`` and ``stats()``."""


@dataclass(frozen=True)
class MapRows(Op):
    """``map``: one output row per input row."""

    udf: Udf
    preserves_rows = True

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        for block in blocks:
            if block.num_rows:
                yield from_rows(same_columns([self.udf(row) for row in to_rows(block)]), "map()")

    def describe(self) -> str:
        return f"map({self.udf.name})"


@dataclass(frozen=True)
class FlatMap(Op):
    """``flat_map``: any number of output rows per input row."""

    udf: Udf

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        for block in blocks:
            rows = same_columns([out for row in to_rows(block) for out in self.udf(row)])
            if rows:
                yield from_rows(rows, "flat_map()")

    def describe(self) -> str:
        return f"flat_map({self.udf.name})"


@dataclass(frozen=True)
class Filter(Op):
    """``filter``: rows for which a function is true, or that match a pyarrow expression."""

    udf: Udf | None = None
    expression: Any = None

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        # empty blocks pass too, so that a filter that keeps nothing still has a schema
        for block in blocks:
            if self.expression is not None:
                yield block.filter(self.expression)
            else:
                assert self.udf is not None
                mask = [bool(self.udf(row)) for row in to_rows(block)]
                yield block.filter(pa.array(mask, pa.bool_()))

    def describe(self) -> str:
        what = self.udf.name if self.udf is not None else str(self.expression)
        return f"filter({what})"


@dataclass(frozen=True)
class MapBatches(Op):
    """``map_batches``: a function of a batch in the chosen format.

    ``batch_size=None`` gives whole blocks. The function may return a batch or yield
    several. ``zero_copy_batch=False`` hands numpy batches as writable copies (Ray's default).
    """

    udf: Udf
    batch_format: str = "default"
    batch_size: int | None = None
    zero_copy_batch: bool = False
    # True only for transforms lockstep knows keep rows (preprocessors); a user's function
    # may add or drop rows.
    preserves_rows: bool = False

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        writable = not self.zero_copy_batch
        for batch in rebatch(blocks, self.batch_size):
            out = self.udf(to_format(batch, self.batch_format, writable=writable))
            if inspect.isgenerator(out):
                for item in out:
                    yield from_batch(item, f"map_batches({self.udf.name})")
            else:
                yield from_batch(out, f"map_batches({self.udf.name})")

    def describe(self) -> str:
        return f"map_batches({self.udf.name}, batch_format={self.batch_format!r})"


@dataclass(frozen=True)
class AddColumn(Op):
    """``add_column``: a new (or replaced) column computed from each batch."""

    name: str
    udf: Udf
    batch_format: str = "pandas"
    preserves_rows = True

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        for block in blocks:
            if not block.num_rows:
                # the function is not run on no rows; the column still appears, untyped
                if block.num_columns:
                    yield put_column(block, self.name, pa.nulls(0))
                continue
            values = self.udf(to_format(block, self.batch_format, writable=True))
            column = column_from_values(values, f"add_column({self.name!r})", self.name)
            if len(column) != block.num_rows:
                raise ValueError(
                    f"add_column({self.name!r}): the function gave {len(column)} values for "
                    f"a batch of {block.num_rows} rows. HINT: return one value per row"
                )
            yield put_column(block, self.name, column)

    def describe(self) -> str:
        return f"add_column({self.name!r})"


@dataclass(frozen=True)
class _NamedColumnsOp(Op):
    """An op on named columns of every block, each of which must have them all."""

    columns: tuple[str, ...]
    preserves_rows = True
    #: The Dataset method the op is, for errors and ``describe``.
    method: ClassVar[str]

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        for block in blocks:
            if block.num_columns or block.num_rows:
                require_columns(block.column_names, self.columns, self.method)
                yield self._apply_to(block)

    @abc.abstractmethod
    def _apply_to(self, block: pa.Table) -> pa.Table:
        """``block`` (which has all the columns) transformed."""

    def describe(self) -> str:
        return f"{self.method}({list(self.columns)})"


@dataclass(frozen=True)
class SelectColumns(_NamedColumnsOp):
    """``select_columns``: these columns, in this order."""

    method = "select_columns"

    def _apply_to(self, block: pa.Table) -> pa.Table:
        return block.select(list(self.columns))


@dataclass(frozen=True)
class DropColumns(_NamedColumnsOp):
    """``drop_columns``."""

    method = "drop_columns"

    def _apply_to(self, block: pa.Table) -> pa.Table:
        return block.drop_columns(list(self.columns))


@dataclass(frozen=True)
class RenameColumns(Op):
    """``rename_columns``: old name to new name."""

    mapping: tuple[tuple[str, str], ...]
    preserves_rows = True

    def apply(self, blocks: Iterator[Any]) -> Iterator[Any]:
        names = dict(self.mapping)
        for block in blocks:
            if block.num_columns or block.num_rows:
                require_columns(block.column_names, list(names), "rename_columns")
                yield block.rename_columns([names.get(n, n) for n in block.column_names])

    def describe(self) -> str:
        return f"rename_columns({dict(self.mapping)})"


def run_ops(blocks: Iterator[Any], ops: Sequence[Op]) -> Iterator[Any]:
    """Apply ``ops`` in order to a stream of blocks."""
    for op in ops:
        blocks = op.apply(blocks)
    return blocks


def all_preserve_rows(ops: Sequence[Op]) -> bool:
    """Whether every op maps input row ``i`` to output row ``i``."""
    return all(op.preserves_rows for op in ops)
