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
    """A JSON-lines file (``pyarrow.json``), or one JSON array of objects."""

    options: dict[str, Any] | None = None
    lines: bool = False

    def read(self) -> Iterator[Any]:
        import pyarrow.json as pjson

        head = b""
        if not self.lines:
            with self.filesystem.open_input_stream(self.path, compression="detect") as f:
                head = f.read(4096)
        with self.filesystem.open_input_stream(self.path, compression="detect") as f:
            if head.lstrip()[:1] == b"[":
                # pyarrow reads JSON lines only; an array of objects is parsed whole.
                yield from_rows(json.loads(f.read()), f"read_json({self.display!r})")
                return
            for batch in pjson.open_json(f, **(self.options or {})):
                yield pa.Table.from_batches([batch])


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
