"""Writing a dataset's blocks to files, one file per block, streaming."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from lockstep.data._convert import to_pandas
from lockstep.data._files import output_filesystem
from lockstep.data._sources import Source


class _BlockWriter:
    """Writes tables of one schema into one open output stream."""

    def __init__(self, stream: Any, schema: Any, kind: str, options: dict[str, Any]) -> None:
        self.stream, self.schema, self.kind = stream, schema, kind
        self.write_options: dict[str, Any] = {}
        if kind == "parquet":
            import pyarrow.parquet as pq

            options = dict(options)
            if "row_group_size" in options:  # an option of write_table, as pq.write_table takes
                self.write_options["row_group_size"] = options.pop("row_group_size")
            self.writer: Any = pq.ParquetWriter(stream, schema, **options)
        elif kind == "csv":
            import pyarrow.csv as pcsv

            self.writer = pcsv.CSVWriter(stream, schema, **options)
        else:
            self.writer = None
            self.json_options = {"orient": "records", "lines": True, **options}

    def write(self, table: Any) -> None:
        if table.schema != self.schema:
            table = table.cast(self.schema)  # a later block may infer a wider type
        if self.writer is not None:
            self.writer.write_table(table, **self.write_options)
        else:
            text = to_pandas(table).to_json(**self.json_options)
            self.stream.write(text.rstrip("\n").encode("utf-8") + b"\n")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def write_blocks(
    sources: list[Source],
    path: str | os.PathLike[str],
    *,
    filesystem: Any,
    kind: str,
    options: dict[str, Any],
) -> list[str]:
    """Write each source's rows into ``{path}/{write id}_{index}.{kind}``; return the files.

    Empty blocks write no file. ``options`` go to pyarrow's ParquetWriter or CSVWriter, or
    to ``pandas.DataFrame.to_json`` for JSON lines.
    """
    fs, directory = output_filesystem(path, filesystem, f"write_{kind}")
    write_id = uuid.uuid4().hex[:12]
    written = []
    for index, source in enumerate(sources):
        name = f"{directory.rstrip('/')}/{write_id}_{index:06d}.{kind}"
        if _write_one(source.read(), functools.partial(fs.open_output_stream, name), kind, options):
            written.append(name)
    return written


def _write_one(
    blocks: Iterator[Any], open_stream: Callable[[], Any], kind: str, options: dict[str, Any]
) -> bool:
    writer: _BlockWriter | None = None
    stream = None
    try:
        for block in blocks:
            if not block.num_rows:
                continue
            if writer is None:
                stream = open_stream()
                writer = _BlockWriter(stream, block.schema, kind, options)
            writer.write(block)
    finally:
        if writer is not None:
            writer.close()
        if stream is not None:
            stream.close()
    return writer is not None
