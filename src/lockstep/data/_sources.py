"""Where a dataset's rows come from: small, picklable descriptions that read when asked.

A :class:`Source` is one block of a dataset as Ray users know it (a file, a row range, an
in-memory table). It reads as a stream of Arrow tables, knows its row count when that is
cheap (metadata, never data), and can be narrowed to a row window without reading, so that
a split hands each worker only the files and row groups it needs.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lockstep.data._convert import column_from_values

# Rows per block produced by sources that choose their own block size (range, numpy).
BLOCK_ROWS = 65536


class Source(abc.ABC):
    """One block of a dataset: a stream of Arrow tables and what is known about it."""

    @abc.abstractmethod
    def read(self) -> Iterator[Any]:
        """Yield the rows as ``pyarrow.Table`` pieces, in order."""

    def num_rows(self) -> int | None:
        """The row count when metadata gives it, else None; never reads data."""
        return None

    def schema(self) -> Any | None:
        """The schema when metadata gives it, else None; never reads data."""
        return None

    def slice(self, offset: int, length: int) -> Source:
        """The rows ``[offset, offset + length)`` of this source, as a source."""
        return SlicedSource(self, offset, length)

    def select(self, columns: Sequence[str]) -> Source | None:
        """This source reading only ``columns``, when the reader can; else None."""
        return None

    def with_filter(self, expression: Any) -> Source | None:
        """This source reading only the rows that match ``expression`` (skipping what the
        reader can tell holds none), when the reader can; else None."""
        return None

    def input_files(self) -> list[str]:
        """The files this source reads."""
        return []

    def describe(self) -> str:
        """A short description for ``repr`` and ``stats()``."""
        return type(self).__name__


def window(blocks: Iterator[Any], skip: int, take: int | None) -> Iterator[Any]:
    """The rows ``[skip, skip + take)`` of a stream of tables; stops reading once done.

    With no rows in the window, an empty slice of the first block still comes out, so that
    the schema is known.
    """
    if not skip and take is None:
        yield from blocks  # holds no block between reads
        return
    if take is not None and take <= 0:
        first = next(blocks, None)
        if first is not None:
            yield first.slice(0, 0)
        return
    empty = None
    for block in blocks:
        if skip >= block.num_rows:
            skip -= block.num_rows
            empty = empty if empty is not None else block.slice(0, 0)
            continue
        length = block.num_rows - skip if take is None else min(take, block.num_rows - skip)
        yield block.slice(skip, length) if (skip or length < block.num_rows) else block
        skip, empty = 0, None
        if take is not None:
            take -= length
            if take <= 0:
                return  # before asking for another block: nothing more is read
    if empty is not None:
        yield empty


def window_rows(total: int | None, offset: int, length: int) -> int | None:
    """How many rows ``slice(offset, length)`` keeps of a source with ``total`` rows."""
    return None if total is None else max(0, min(length, total - offset))


class TableSource(Source):
    """Rows already in memory, as one Arrow table (from_items, from_pandas, materialize)."""

    __slots__ = ("table",)

    def __init__(self, table: Any) -> None:
        self.table = table

    def read(self) -> Iterator[Any]:
        yield self.table

    def num_rows(self) -> int:
        return int(self.table.num_rows)

    def schema(self) -> Any:
        return self.table.schema

    def slice(self, offset: int, length: int) -> Source:
        return TableSource(self.table.slice(offset, max(0, length)))

    def select(self, columns: Sequence[str]) -> Source:
        return TableSource(self.table.select(list(columns)))

    def describe(self) -> str:
        return f"in-memory table ({self.table.num_rows} rows)"

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        # Arrow pickles a sliced table with its whole parent buffer; the IPC stream format
        # writes only the slice, so a worker's shard carries only its own rows.
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.table.schema) as writer:
            writer.write_table(self.table)
        return _table_source_from_ipc, (sink.getvalue().to_pybytes(),)


@dataclass(frozen=True)
class ReshuffledSource(Source):
    """Rows in memory, handed out in a new random order at every read.

    An unseeded ``random_shuffle`` gives a new order at every epoch in Ray (its plan runs
    again); the rows of each block (and of each worker's part of it) are permuted anew at
    each pass here.
    """

    inner: TableSource

    def read(self) -> Iterator[Any]:
        table = self.inner.table
        yield table.take(np.random.default_rng().permutation(table.num_rows))

    def num_rows(self) -> int:
        return self.inner.num_rows()

    def schema(self) -> Any:
        return self.inner.schema()

    def slice(self, offset: int, length: int) -> Source:
        return ReshuffledSource(TableSource(self.inner.table.slice(offset, max(0, length))))

    def select(self, columns: Sequence[str]) -> Source:
        return ReshuffledSource(TableSource(self.inner.table.select(list(columns))))

    def describe(self) -> str:
        return f"in-memory table ({self.inner.table.num_rows} rows), reshuffled at each pass"


def _table_source_from_ipc(data: bytes) -> TableSource:
    return TableSource(pa.ipc.open_stream(pa.py_buffer(data)).read_all())


@dataclass(frozen=True)
class RangeSource(Source):
    """The integers ``[start, stop)`` in column ``id``, generated when read; with a
    ``shape``, arrays of that shape filled with each integer in column ``data``."""

    start: int
    stop: int
    shape: tuple[int, ...] | None = None

    def read(self) -> Iterator[Any]:
        for low in range(self.start, self.stop, BLOCK_ROWS):
            high = min(low + BLOCK_ROWS, self.stop)
            ids = np.arange(low, high, dtype=np.int64)
            yield (
                pa.table({"id": pa.array(ids)}) if self.shape is None else _tensors(ids, self.shape)
            )

    def num_rows(self) -> int:
        return max(0, self.stop - self.start)

    def schema(self) -> Any:
        if self.shape is None:
            return pa.schema([("id", pa.int64())])
        return _tensors(np.arange(0, 1, dtype=np.int64), self.shape).schema

    def slice(self, offset: int, length: int) -> Source:
        start = min(self.stop, self.start + offset)
        return RangeSource(start, min(self.stop, start + max(0, length)), self.shape)

    def describe(self) -> str:
        shape = "" if self.shape is None else f", shape={self.shape}"
        return f"range({self.start}, {self.stop}{shape})"


def _tensors(ids: Any, shape: tuple[int, ...]) -> Any:
    values = np.broadcast_to(ids.reshape((-1,) + (1,) * len(shape)), (len(ids), *shape))
    return pa.table({"data": column_from_values(np.ascontiguousarray(values))})


@dataclass(frozen=True)
class SlicedSource(Source):
    """A row window of a source that cannot narrow itself: it skips rows while streaming."""

    inner: Source
    offset: int
    length: int

    def read(self) -> Iterator[Any]:
        yield from window(self.inner.read(), self.offset, self.length)

    def num_rows(self) -> int | None:
        return window_rows(self.inner.num_rows(), self.offset, self.length)

    def schema(self) -> Any | None:
        return self.inner.schema()

    def slice(self, offset: int, length: int) -> Source:
        kept = max(0, min(length, self.length - offset))
        return SlicedSource(self.inner, self.offset + offset, kept)

    def input_files(self) -> list[str]:
        return self.inner.input_files()

    def describe(self) -> str:
        return f"rows {self.offset}..{self.offset + self.length} of {self.inner.describe()}"
