"""CSV, JSON, text and numpy files as sources, each read as a stream of Arrow tables."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lockstep.data._convert import column_from_values, from_rows
from lockstep.data._sources import BLOCK_ROWS, Source


@dataclass(frozen=True)
class FileSource(Source):
    """One file on a pyarrow filesystem; subclasses say how to parse it."""

    filesystem: Any
    path: str
    display: str

    def input_files(self) -> list[str]:
        return [self.display]

    def describe(self) -> str:
        return f"{type(self).__name__.removesuffix('Source').lower()} {self.display}"


@dataclass(frozen=True)
class CsvSource(FileSource):
    """A CSV file, parsed block by block by ``pyarrow.csv.open_csv``."""

    options: dict[str, Any] | None = None

    def read(self) -> Iterator[Any]:
        import pyarrow.csv as pcsv

        with self.filesystem.open_input_stream(self.path, compression="detect") as f:
            for batch in pcsv.open_csv(f, **(self.options or {})):
                yield pa.Table.from_batches([batch])


@dataclass(frozen=True)
class JsonSource(FileSource):
    """A JSON-lines file (``pyarrow.json``), or one JSON array of objects.

    Read streaming by ``pyarrow.json``; a file it cannot parse (an array per line, a field
    whose type changes, a ``block_size`` too small) is read as Ray reads it then: the
    whole file by ``pyarrow.json.read_json`` (doubling a block size that splits an
    object), and failing that by Python's ``json`` (``json.load`` of the file, or of each
    line with ``lines=True``). Rows already handed out are not handed out twice.
    """

    options: dict[str, Any] | None = None
    lines: bool = False
    open_args: dict[str, Any] | None = None

    def read(self) -> Iterator[Any]:
        import pyarrow.json as pjson

        head = b""
        if not self.lines:
            with self._open() as f:
                head = f.read(4096)
        done = 0
        with self._open() as f:
            if head.lstrip()[:1] == b"[":
                # pyarrow reads JSON lines only; an array of objects is parsed whole.
                yield from_rows(json.loads(f.read()), f"read_json({self.display!r})")
                return
            try:
                for batch in pjson.open_json(f, **(self.options or {})):
                    done += batch.num_rows
                    yield pa.Table.from_batches([batch])
                return
            except pa.ArrowInvalid:
                pass
        yield from _after(self._read_whole(), done)

    def _open(self) -> Any:
        args = {"compression": "detect", **(self.open_args or {})}
        return self.filesystem.open_input_stream(self.path, **args)

    def _read_whole(self) -> Iterator[Any]:
        with self._open() as f:
            buffer = f.read()
        if not buffer:
            return
        try:
            yield _read_json_doubling(buffer, self.options or {})
        except pa.ArrowInvalid:
            yield from _python_json(buffer, self.lines, f"read_json({self.display!r})")


def _read_json_doubling(buffer: bytes, options: dict[str, Any]) -> Any:
    """``pyarrow.json.read_json`` of the whole file, doubling the block size while an
    object straddles two blocks, up to ``DataContext.target_max_block_size``."""
    import copy

    import pyarrow.json as pjson

    from lockstep.data._context import DataContext

    options = dict(options)
    read_options = copy.copy(options.pop("read_options", None) or pjson.ReadOptions())
    largest = DataContext.get_current().target_max_block_size
    while True:
        try:
            return pjson.read_json(io.BytesIO(buffer), read_options=read_options, **options)
        except pa.ArrowInvalid as exc:
            straddles = "straddles two block boundaries" in str(exc)
            size = read_options.block_size
            if not straddles or size <= 0 or (largest is not None and size >= largest):
                raise
            read_options.block_size = size * 2


def _python_json(buffer: bytes, lines: bool, where: str) -> Iterator[Any]:
    """Rows parsed by Python's ``json``: the file as one document, or each line."""
    if not lines:
        parsed = json.loads(buffer)
        yield from_rows(parsed if isinstance(parsed, list) else [parsed], where)
        return
    rows = [_as_row(json.loads(line)) for line in buffer.splitlines() if line.strip()]
    for start in range(0, len(rows), BLOCK_ROWS):
        yield from_rows(rows[start : start + BLOCK_ROWS], where)


def _as_row(value: Any) -> Any:
    """A line's value as a row: an array's items are columns ``"0"``, ``"1"``, ... (as
    pandas reads an array per line, and Ray with it)."""
    return {str(i): v for i, v in enumerate(value)} if isinstance(value, list) else value


def _after(blocks: Iterator[Any], skip: int) -> Iterator[Any]:
    """``blocks`` without their first ``skip`` rows."""
    for block in blocks:
        if skip >= block.num_rows:
            skip -= block.num_rows
            continue
        yield block.slice(skip) if skip else block
        skip = 0


@dataclass(frozen=True)
class TextSource(FileSource):
    """A text file, one row per line in column ``text`` (line endings removed)."""

    encoding: str = "utf-8"
    drop_empty_lines: bool = False

    def read(self) -> Iterator[Any]:
        with self.filesystem.open_input_stream(self.path, compression="detect") as f:
            lines: list[str] = []
            for line in io.TextIOWrapper(f, encoding=self.encoding):
                line = line.rstrip("\r\n")
                if line or not self.drop_empty_lines:
                    lines.append(line)
                if len(lines) == BLOCK_ROWS:
                    yield pa.table({"text": pa.array(lines, pa.string())})
                    lines = []
            if lines:
                yield pa.table({"text": pa.array(lines, pa.string())})


@dataclass(frozen=True)
class NumpySource(FileSource):
    """A ``.npy`` file: one row per entry along the first axis, in column ``data``."""

    shape: tuple[int, ...] = ()

    def read(self) -> Iterator[Any]:
        with self.filesystem.open_input_file(self.path) as f:
            array = np.load(io.BytesIO(f.read()), allow_pickle=False)
        for low in range(0, len(array), BLOCK_ROWS):
            yield pa.table({"data": column_from_values(array[low : low + BLOCK_ROWS])})

    def num_rows(self) -> int:
        return self.shape[0] if self.shape else 1

    def describe(self) -> str:
        return f"numpy {self.display} {self.shape}"


def numpy_shape(filesystem: Any, path: str) -> tuple[int, ...]:
    """The array shape in a ``.npy`` header, read without reading the array."""
    fmt = np.lib.format
    with filesystem.open_input_file(path) as f:
        version = fmt.read_magic(f)
        header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, _ = header(f)
    return tuple(shape)
