"""Parquet files as sources: row counts from footers, splits at row groups, streaming reads."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from lockstep.data._files import Files
from lockstep.data._partitioning import Partitioning, partition_values
from lockstep.data._sources import SlicedSource, Source, window

# Read-ahead buffer per column chunk: pages are read as needed instead of the whole chunk.
_BUFFER_BYTES = 1 << 20
_FOOTER_THREADS = 16


@dataclass(frozen=True)
class ParquetSource(Source):
    """Some row groups of one parquet file, optionally a row window of them.

    Attributes:
        filesystem: The pyarrow filesystem of the file.
        path: The file's path on it.
        display: The file as the user named it (for ``input_files()``).
        row_groups: Indices of the row groups to read, in order.
        row_group_rows: The number of rows of each of them (from the footer).
        columns: The columns to read, or None for all.
        filter: A ``pyarrow.compute.Expression`` rows must satisfy, or None.
        skip: Rows to skip at the start of the first row group.
        take: Rows to keep after that, or None for all.
        file_schema: The schema of what is read (the projected file schema).
        partition_row: One row of the file's partition columns (hive), or None.
        include_path: Add the file's path in column ``path``.
    """

    filesystem: Any
    path: str
    display: str
    row_groups: tuple[int, ...]
    row_group_rows: tuple[int, ...]
    columns: tuple[str, ...] | None = None
    filter: Any = None
    skip: int = 0
    take: int | None = None
    file_schema: Any = None
    partition_row: Any = None
    include_path: bool = False

    def read(self) -> Iterator[Any]:
        if not self.row_groups:
            return
        if self.filter is not None and not self.include_path:
            # the scanner skips row groups by their statistics, and fills the partition
            # columns from the file's partition values
            yield from window(self._scan_filtered(), self.skip, self.take)
            return
        if not self._decorated():
            yield from window(self._scan(None), self.skip, self.take)
            return
        # partition columns (or the path) are not in the file: add them to what is read,
        # then filter and select, since the filter and columns may name them
        late_filter = self.filter is not None
        blocks = (self._decorate(b) for b in self._scan(None if late_filter else self._extra()))
        if late_filter:
            blocks = (b.filter(self.filter) for b in blocks)
        if self.columns is not None:
            blocks = (b.select(list(self.columns)) for b in blocks)
        yield from window(blocks, self.skip, self.take)

    def _decorated(self) -> bool:
        return self.partition_row is not None or self.include_path

    def _extra(self) -> list[str]:
        """The columns that are not in the file."""
        names = list(self.partition_row.column_names) if self.partition_row is not None else []
        return names + (["path"] if self.include_path else [])

    def _scan(self, not_in_file: list[str] | None) -> Iterator[Any]:
        """The row groups; every file column, or ``columns`` minus ``not_in_file``."""
        import pyarrow.parquet as pq

        with self.filesystem.open_input_file(self.path) as f:
            file = pq.ParquetFile(f, pre_buffer=False, buffer_size=_BUFFER_BYTES)
            columns = file.schema_arrow.names
            if self.columns is not None and not_in_file is not None:
                columns = [c for c in self.columns if c not in not_in_file]
            elif self.columns is not None and not self._decorated():
                columns = list(self.columns)
            for g in self.row_groups:
                yield _read_row_group(file, g, columns)

    def _decorate(self, block: Any) -> Any:
        import pyarrow as pa

        if self.partition_row is not None:
            for name in self.partition_row.column_names:
                value = self.partition_row.column(name)[0]
                block = block.append_column(name, pa.repeat(value, block.num_rows))
        if self.include_path:
            block = block.append_column("path", pa.repeat(pa.scalar(self.display), block.num_rows))
        return block

    def _scan_filtered(self) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.dataset as ds

        fragment = ds.ParquetFileFormat().make_fragment(
            self.path,
            self.filesystem,
            partition_expression=_guarantee(self.partition_row),
            row_groups=list(self.row_groups),
        )
        schema = fragment.physical_schema
        if self.partition_row is not None:
            schema = _full_schema(schema, self.partition_row, False)
        columns = list(self.columns) if self.columns is not None else schema.names
        for batch in fragment.to_batches(
            schema=schema,
            columns=columns,
            filter=self.filter,
            batch_readahead=0,
            fragment_readahead=0,
        ):
            yield pa.Table.from_batches([batch])

    def with_filter(self, expression: Any) -> Source | None:
        if self.skip or self.take is not None:
            return None  # a window of the unfiltered rows: filtering first would change it
        if self.file_schema is not None and not _applies(expression, self.file_schema):
            return None  # names a column that is not read: fails as an op does
        combined = expression if self.filter is None else self.filter & expression
        if self.partition_row is not None and _ruled_out(self, combined):
            return replace(self, filter=combined, row_groups=(), row_group_rows=())
        return replace(self, filter=combined)

    def num_rows(self) -> int | None:
        if self.filter is not None:
            return None
        available = max(0, sum(self.row_group_rows) - self.skip)
        return available if self.take is None else min(self.take, available)

    def schema(self) -> Any:
        return self.file_schema

    def slice(self, offset: int, length: int) -> Source:
        total = self.num_rows()
        if total is None:
            return SlicedSource(self, offset, length)
        start = self.skip + min(offset, total)
        stop = start + max(0, min(length, total - offset))
        groups: list[tuple[int, int]] = []
        skip, position = 0, 0
        for group, rows in zip(self.row_groups, self.row_group_rows, strict=True):
            if position < stop and position + rows > start:
                if not groups:
                    skip = start - position
                groups.append((group, rows))
            position += rows
        return replace(
            self,
            row_groups=tuple(g for g, _ in groups),
            row_group_rows=tuple(r for _, r in groups),
            skip=skip,
            take=stop - start,
        )

    def select(self, columns: Sequence[str]) -> Source:
        schema = self.file_schema
        if schema is not None:
            schema = schema.empty_table().select(list(columns)).schema
        return replace(self, columns=tuple(columns), file_schema=schema)

    def input_files(self) -> list[str]:
        return [self.display]

    def describe(self) -> str:
        groups = f"row groups {list(self.row_groups)}" if self.row_groups else "no row groups"
        window_text = "" if self.take is None else f", rows {self.skip}..{self.skip + self.take}"
        return f"parquet {self.display} ({groups}{window_text})"


def _read_row_group(file: Any, group: int, columns: list[str]) -> Any:
    """One row group, decoded one column at a time.

    Measured on a 16 MB row group: pyarrow's whole-row-group readers peak at 2.5-5x the
    decoded size (every column's buffers grow at once); column by column peaks at 1.25x and
    is no slower.
    """
    import pyarrow as pa

    if not columns:  # rows without columns: a table keeps its row count through select([])
        return pa.table({"_": pa.nulls(file.metadata.row_group(group).num_rows)}).select([])
    parts = [file.read_row_group(group, columns=[c], use_threads=False) for c in columns]
    return pa.Table.from_arrays([p.column(0) for p in parts], schema=_schema_of(parts))


def _schema_of(parts: list[Any]) -> Any:
    import pyarrow as pa

    return pa.schema([p.schema.field(0) for p in parts])


def parquet_sources(
    files: Files,
    columns: Sequence[str] | None,
    filter: Any,
    *,
    partitioning: Partitioning | None = None,
    partition_filter: Any = None,
    include_paths: bool = False,
) -> list[Source]:
    """One source per file, with row counts and schema read from the footers (in parallel).

    With ``partitioning``, each file's ``key=value`` directories become columns, and files
    that the filter or ``partition_filter`` rule out by those values are left out unread.
    """
    if columns is not None and include_paths and "path" not in columns:
        columns = [*columns, "path"]  # the path column comes with a projection too, as in Ray
    rows_of = _partition_rows(files, partitioning)
    paths = _pruned(files, rows_of, filter, partition_filter)
    if not paths:
        paths = files.paths[:1]  # keep the schema: one file, whose rows the filter drops
        filter = filter if filter is not None else _nothing()
    with ThreadPoolExecutor(min(_FOOTER_THREADS, len(paths))) as pool:
        footers = list(pool.map(lambda p: _footer(files.filesystem, p), paths))
    sources: list[Source] = []
    for path, (rows, schema) in zip(paths, footers, strict=True):
        row = _not_in_file(rows_of.get(path), schema)
        schema = _full_schema(schema, row, include_paths)
        if columns is not None:
            _check_columns(schema, columns, files.display(path))
            schema = schema.empty_table().select(list(columns)).schema
        sources.append(
            ParquetSource(
                filesystem=files.filesystem,
                path=path,
                display=files.display(path),
                row_groups=tuple(range(len(rows))),
                row_group_rows=tuple(rows),
                columns=tuple(columns) if columns is not None else None,
                filter=filter,
                file_schema=schema,
                partition_row=row,
                include_path=include_paths,
            )
        )
    return sources


def _partition_rows(files: Files, partitioning: Partitioning | None) -> dict[str, Any]:
    """Per file with partition directories: one row of its typed partition values."""
    import pyarrow as pa

    if partitioning is None:
        return {}
    roots = (partitioning.base_dir.rstrip("/"),) if partitioning.base_dir else files.roots
    rows = {}
    for path in files.paths:
        values = partition_values(path, roots)
        if values:
            rows[path] = pa.table(
                {
                    k: pa.array([v], pa.string()).cast(partitioning.arrow_type(k))
                    for k, v in values.items()
                }
            )
    return rows


def _pruned(
    files: Files, rows_of: dict[str, Any], filter: Any, partition_filter: Any
) -> tuple[str, ...]:
    """The paths whose partition values can satisfy ``filter`` and ``partition_filter``.

    pyarrow decides from each file's partition values alone (its "guarantee"), opening only
    the first file for the schema; a filter on data columns keeps every file.
    """
    kept = files.paths
    if partition_filter is not None:
        kept = tuple(
            p for p in kept if partition_filter(_strings(rows_of[p]) if p in rows_of else {})
        )
    if filter is None or not rows_of or not kept:
        return kept
    import pyarrow.dataset as pads

    _, schema = _footer(files.filesystem, kept[0])
    for f in next(iter(rows_of.values())).schema:
        if f.name not in schema.names:
            schema = schema.append(f)
    dataset = pads.FileSystemDataset.from_paths(
        list(kept),
        schema=schema,
        format=pads.ParquetFileFormat(),
        filesystem=files.filesystem,
        partitions=[_guarantee(rows_of.get(p)) for p in kept],
    )
    survivors = {f.path for f in dataset.get_fragments(filter=filter)}
    return tuple(p for p in kept if p in survivors)


def _applies(expression: Any, schema: Any) -> bool:
    """Whether ``expression`` evaluates on rows of ``schema`` (its columns exist, its types
    compare). Asked once per file of a filtered read, whose files mostly share a schema:
    answered once per expression and schema (a check costs 0.1 ms). Only the last few are
    kept: the cache holds its expressions, and one may hold a large value set."""
    return _applies_to(_Same(expression), schema)


@functools.lru_cache(maxsize=4)
def _applies_to(expression: _Same, schema: Any) -> bool:
    try:
        schema.empty_table().filter(expression.value)
    except Exception:  # pyarrow raises several types for a bad field or type
        return False
    return True


class _Same:
    """``value`` as a cache key, by identity (pyarrow's expressions cannot be hashed); the
    key holds it, so its id is not reused while the key is cached."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value


def _ruled_out(source: ParquetSource, expression: Any) -> bool:
    """Whether the source's partition values alone make ``expression`` false for every
    row: decided by pyarrow from the values, without opening the file."""
    import pyarrow.dataset as pads

    dataset = pads.FileSystemDataset.from_paths(
        [source.path],
        schema=source.file_schema,
        format=pads.ParquetFileFormat(),
        filesystem=source.filesystem,
        partitions=[_guarantee(source.partition_row)],
    )
    return not list(dataset.get_fragments(filter=expression))


def _guarantee(row: Any) -> Any:
    """What is known of every row of a file: its partition columns' values."""
    import pyarrow.compute as pc

    known = pc.scalar(True)
    if row is None:
        return known
    for name in row.column_names:
        value = row.column(name)[0]
        known = known & (pc.field(name) == value if value.is_valid else pc.field(name).is_null())
    return known


def _not_in_file(row: Any, schema: Any) -> Any:
    """The partition values of columns the file does not hold itself (a column stored in
    the file keeps the file's values, as in Ray); None when none is left."""
    if row is None:
        return None
    left = [n for n in row.column_names if n not in schema.names]
    return row.select(left) if left else None


def _strings(row: Any) -> dict[str, Any]:
    return {k: (None if v is None else str(v)) for k, v in row.to_pylist()[0].items()}


def _nothing() -> Any:
    import pyarrow.compute as pc

    return pc.scalar(False)


def _full_schema(schema: Any, row: Any, include_paths: bool) -> Any:
    import pyarrow as pa

    if row is not None:
        for f in row.schema:
            schema = schema.append(f)
    if include_paths:
        schema = schema.append(pa.field("path", pa.string()))
    return schema


def _footer(filesystem: Any, path: str) -> tuple[list[int], Any]:
    import pyarrow.parquet as pq

    with filesystem.open_input_file(path) as f:
        file = pq.ParquetFile(f)
        metadata = file.metadata
        rows = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        return rows, file.schema_arrow


def _check_columns(schema: Any, columns: Sequence[str], where: str) -> None:
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise ValueError(
            f"read_parquet: columns {missing} are not in {where}, whose columns are "
            f"{schema.names}. HINT: pass columns= from that list"
        )


def to_filter_expression(filter: Any) -> Any:
    """A pyarrow Expression from an Expression or a DNF list such as ``[("x", ">", 3)]``."""
    if filter is None:
        return None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if isinstance(filter, pc.Expression):
        return filter
    try:
        return pq.filters_to_expression(filter)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"read_parquet: filter {filter!r} is not a pyarrow expression nor a filter list "
            f"({exc}). HINT: filter=pyarrow.compute.field('x') > 3, or filter=[('x', '>', 3)]"
        ) from exc
