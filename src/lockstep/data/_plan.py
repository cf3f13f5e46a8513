"""Plan: a dataset's sources and pending ops, and what can be done with them.

``Dataset`` is the public face (argument checks, documentation); a :class:`Plan` is what it
describes, and what the helpers that read it use (``GroupedData``, ``DataIterator``,
``DatasetPipeline``). The helpers sit below ``Dataset`` and hand plans back; the public
class they were made from turns a plan into a dataset again, so no module here imports
``Dataset``'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from lockstep.data import _split
from lockstep.data._columns import require_columns
from lockstep.data._context import adopt, current_snapshot, within_block_size
from lockstep.data._convert import EMPTY, concat
from lockstep.data._execute import ConcatSource, cheap_counts, count_rows, fold, stream
from lockstep.data._ops import Filter, Op, SelectColumns
from lockstep.data._sources import ReshuffledSource, SlicedSource, Source, TableSource


class Plan:
    """Sources (where rows come from) and ops (what to do to them), read when asked.

    Attributes:
        sources: The blocks, in order.
        ops: The transforms every block goes through.
    """

    def __init__(
        self, sources: Sequence[Source], ops: Sequence[Op] = (), counts: Sequence[int] | None = None
    ) -> None:
        self.sources = tuple(sources)
        self.ops = tuple(ops)
        # output rows per source, once known (from metadata or counted once)
        self._counts: list[int] | None = list(counts) if counts is not None else None
        # the plan this one is a row window of, and the window, in the process that cut it
        # (not pickled): where a worker's shard sits in the dataset, for a mid-epoch resume
        self.origin: tuple[Plan, tuple[int, int]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # the DataContext travels with the plan: a worker reads under the driver's settings
        context = current_snapshot()
        return {
            "sources": self.sources,
            "ops": self.ops,
            "counts": self._counts,
            "context": context,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        adopt(state.get("context"))
        self.__init__(state["sources"], state["ops"], state["counts"])  # type: ignore[misc]

    @property
    def counts(self) -> list[int] | None:
        """Output rows per source when already known, without reading anything."""
        return self._counts

    def with_op(self, op: Op) -> Plan:
        """This plan with one more op."""
        return Plan(self.sources, (*self.ops, op), self._counts if op.preserves_rows else None)

    def blocks(self) -> Iterator[Any]:
        """Every output block, source after source."""
        return stream(self.sources, self.ops)

    def known_counts(self) -> list[int] | None:
        """Output rows per source from metadata alone, or None when that cannot tell."""
        if self._counts is None:
            self._counts = cheap_counts(self.sources, self.ops)
        return self._counts

    def row_counts(self) -> list[int]:
        """Output rows per source; streams the data once when metadata cannot tell."""
        if self._counts is None:
            self._counts = count_rows(self.sources, self.ops)
        return self._counts

    def windows(self, ranges: Sequence[tuple[int, int]]) -> list[Plan]:
        """One plan per ``[start, stop)`` row range, each holding only its own sources."""
        counts = self.row_counts()
        out = []
        for start, stop in ranges:
            parts = _split.window_sources(self.sources, self.ops, counts, start, stop)
            window = Plan([s for s, _ in parts], counts=[n for _, n in parts])
            window.origin = (self, (start, stop))
            out.append(window)
        return out

    def split(self, n: int, equal: bool = False) -> list[Plan]:
        """``n`` disjoint plans covering the rows, in order (see ``Dataset.split``)."""
        return self.windows(_split.split_ranges(sum(self.row_counts()), n, equal))

    def limit(self, limit: int) -> Plan:
        """The first ``limit`` rows; reading stops once they are read."""
        if self.known_counts() is not None:
            return self.windows([(0, limit)])[0]
        whole = ConcatSource(tuple(self.folded()))
        return Plan([SlicedSource(whole, 0, limit)])

    def folded(self) -> list[Source]:
        """Each source with the ops attached, as sources of their own."""
        return fold(self.sources, self.ops, self._counts)

    def table(self) -> Any:
        """Every row in one Arrow table, in this process."""
        return concat(list(self.blocks()))

    def schema(self) -> Any:
        """The schema from metadata, else from the first block with rows; None if none."""
        if not self.ops and self.sources and self.sources[0].schema() is not None:
            return self.sources[0].schema()
        return _first_schema(self.limit(1).blocks())

    def metadata_schema(self) -> Any:
        """The schema when metadata gives it without reading (no ops), else None."""
        if self.ops or not self.sources:
            return None
        return self.sources[0].schema()

    def arrow(self) -> Any:
        """Every row in one Arrow table; with no rows, an empty table of the schema if known."""
        table = self.table()
        if not table.num_columns and not table.num_rows and self.schema() is not None:
            return self.schema().empty_table()
        return table

    def check_columns(self, names: Sequence[str], where: str) -> None:
        """Raise now, when the schema is known without reading, for a column that is absent."""
        schema = self.metadata_schema()
        if schema is not None:
            require_columns(schema.names, names, where)

    def select_columns(self, names: Sequence[str], where: str = "select_columns") -> Plan:
        """Only ``names``, in this order: read by the sources alone when they can."""
        self.check_columns(names, where)
        if not self.ops:
            narrowed = [s.select(names) for s in self.sources]
            if all(s is not None for s in narrowed):
                return Plan([s for s in narrowed if s is not None], counts=self._counts)
        return self.with_op(SelectColumns(tuple(names)))

    def filtered(self, expression: Any) -> Plan:
        """The rows matching a pyarrow ``expression``: pushed into the sources when they
        can read fewer rows for it (parquet: partitions and row groups it rules out are
        never read), else a filter op. The rows are the same either way."""
        if not self.ops:
            pushed = [s.with_filter(expression) for s in self.sources]
            if all(s is not None for s in pushed):
                return Plan([s for s in pushed if s is not None])
        return self.with_op(Filter(expression=expression))

    def materialize(self) -> Plan:
        """The ops done now, the rows held in memory, block by block."""
        tables = [
            piece
            for s in fold(self.sources, self.ops)
            for piece in within_block_size(concat(list(s.read())))
        ]
        return Plan([TableSource(t) for t in tables], counts=[t.num_rows for t in tables])

    def shuffled(self, seed: int | None, num_blocks: int | None = None) -> Plan:
        """The rows in a random order, gathered in this process.

        Without a seed, each pass (epoch) permutes each block's rows again, as Ray's
        unseeded shuffle gives a new order at every epoch; with one, the order is fixed.
        """
        table = self.table()
        order = np.random.default_rng(seed).permutation(table.num_rows)
        plan = in_memory(table.take(order), num_blocks or len(self.sources))
        if seed is not None or not table.num_rows:
            return plan
        sources = [ReshuffledSource(s) for s in plan.sources if isinstance(s, TableSource)]
        return Plan(sources, counts=plan.counts)

    def sorted(self, order: Sequence[tuple[str, str]]) -> Plan:
        """The rows sorted by ``(column, "ascending" | "descending")`` pairs, nulls last."""
        self.check_columns([k for k, _ in order], "sort")
        table = self.table()
        if not table.num_rows:
            return in_memory(table, 1)
        require_columns(table.column_names, [k for k, _ in order], "sort")
        return in_memory(table.sort_by(list(order)), len(self.sources))

    def describe(self) -> str:
        """``Dataset(num_blocks=..., num_rows=..., schema=...)`` without reading data."""
        counts = self.known_counts()
        rows = sum(counts) if counts is not None else "?"
        schema = self.metadata_schema()
        columns = (
            "?" if schema is None else "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"
        )
        return f"Dataset(num_blocks={len(self.sources)}, num_rows={rows}, schema={columns})"


def in_memory(table: Any, num_blocks: int) -> Plan:
    """``table`` as an in-memory plan of ``num_blocks`` near-equal blocks."""
    if table is EMPTY or not table.num_rows:
        return Plan([TableSource(table)], counts=[0])
    parts = _split.split_ranges(table.num_rows, max(1, min(num_blocks, table.num_rows)), False)
    sources = [TableSource(table.slice(a, b - a)) for a, b in parts]
    return Plan(sources, counts=[b - a for a, b in parts])


def _first_schema(blocks: Iterator[Any]) -> Any:
    first = None
    for block in blocks:
        if block.num_rows:
            return block.schema
        first = first or block
    return first.schema if first is not None and first.num_columns else None
