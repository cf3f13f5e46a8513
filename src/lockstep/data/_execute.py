"""Running a dataset's plan: sources read, ops applied, block after block, in the caller.

A plan is ``(sources, ops)``: every op applies to the stream of every source, so a source
with its ops is itself a source (:class:`PlanSource`). That is how a split or a union keeps
pending transforms attached to exactly the rows they apply to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.data._ops import Op, all_preserve_rows, run_ops
from lockstep.data._sources import SlicedSource, Source, window_rows


def stream(sources: Sequence[Source], ops: Sequence[Op]) -> Iterator[Any]:
    """Every block of the plan, source after source; nothing is read before it is asked for."""
    for source in sources:
        yield from run_ops(source.read(), ops)


@dataclass(frozen=True)
class PlanSource(Source):
    """A source with pending ops, read and transformed together.

    Attributes:
        inner: Where the rows come from.
        ops: The transforms to apply to them.
        rows: The number of output rows when already counted, else None.
    """

    inner: Source
    ops: tuple[Op, ...]
    rows: int | None = None

    def read(self) -> Iterator[Any]:
        return run_ops(self.inner.read(), self.ops)

    def num_rows(self) -> int | None:
        if self.rows is not None:
            return self.rows
        return self.inner.num_rows() if all_preserve_rows(self.ops) else None

    def schema(self) -> Any | None:
        return None if self.ops else self.inner.schema()

    def slice(self, offset: int, length: int) -> Source:
        if all_preserve_rows(self.ops):
            # output row i is input row i: narrow the input, so unneeded files stay unread
            rows = window_rows(self.num_rows(), offset, length)
            return PlanSource(self.inner.slice(offset, length), self.ops, rows)
        return SlicedSource(self, offset, length)

    def input_files(self) -> list[str]:
        return self.inner.input_files()

    def describe(self) -> str:
        steps = " -> ".join(op.describe() for op in self.ops)
        return f"{self.inner.describe()} -> {steps}" if steps else self.inner.describe()


@dataclass(frozen=True)
class ConcatSource(Source):
    """Several sources read one after the other, as one block (``repartition``, ``limit``)."""

    parts: tuple[Source, ...]

    def read(self) -> Iterator[Any]:
        for part in self.parts:
            yield from part.read()

    def num_rows(self) -> int | None:
        counts = [p.num_rows() for p in self.parts]
        return None if any(c is None for c in counts) else sum(c for c in counts if c)

    def schema(self) -> Any | None:
        return self.parts[0].schema() if self.parts else None

    def input_files(self) -> list[str]:
        return [f for part in self.parts for f in part.input_files()]

    def describe(self) -> str:
        return f"{len(self.parts)} parts: " + "; ".join(p.describe() for p in self.parts)


def fold(
    sources: Sequence[Source], ops: Sequence[Op], counts: Sequence[int] | None = None
) -> list[Source]:
    """Each source with the ops attached; ``counts`` are output row counts when known."""
    if not ops:
        return list(sources)
    known = counts if counts is not None else [None] * len(sources)
    return [PlanSource(s, tuple(ops), c) for s, c in zip(sources, known, strict=True)]


def cheap_counts(sources: Sequence[Source], ops: Sequence[Op]) -> list[int] | None:
    """Output rows per source from metadata alone, or None when that is not possible."""
    if not all_preserve_rows(ops):
        return None
    counts = [s.num_rows() for s in sources]
    return None if any(c is None for c in counts) else [c for c in counts if c is not None]


def count_rows(sources: Sequence[Source], ops: Sequence[Op]) -> list[int]:
    """Output rows per source: from metadata where it is enough, else by streaming once."""
    counts = []
    for source in sources:
        known = source.num_rows() if all_preserve_rows(ops) else None
        if known is None:
            known = sum(block.num_rows for block in run_ops(source.read(), ops))
        counts.append(known)
    return counts
