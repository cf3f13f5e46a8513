"""Readers of whole files: images (Pillow), raw bytes, and TFRecord files of tf.train.Example.

Each file is a block of its own, listed on the caller's side and read by whoever iterates,
as the other readers do. Pillow and TensorFlow are imported where a file is decoded.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lockstep.data._block_control import num_blocks_arg, rebalance
from lockstep.data._convert import column_from_values, from_rows
from lockstep.data._dataset import Dataset
from lockstep.data._file_sources import FileSource
from lockstep.data._files import find_files

Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "tif", "tiff", "bmp", "gif")


@dataclass(frozen=True)
class BinarySource(FileSource):
    """A file as one row: its bytes in column ``bytes`` (and its path in ``path``)."""

    include_paths: bool = False

    def read(self) -> Iterator[Any]:
        with self.filesystem.open_input_stream(self.path) as f:
            data = f.read()
        yield _with_path(pa.table({"bytes": pa.array([data], pa.binary())}), self)

    def num_rows(self) -> int:
        return 1


@dataclass(frozen=True)
class ImageSource(FileSource):
    """An image file as one row: an ``(height, width[, channels])`` array in ``image``."""

    size: tuple[int, int] | None = None
    mode: str | None = None
    include_paths: bool = False

    def read(self) -> Iterator[Any]:
        import numpy as np
        from PIL import Image

        with self.filesystem.open_input_stream(self.path) as f:
            image: Image.Image = Image.open(io.BytesIO(f.read()))
            image.load()
        if self.mode is not None:
            image = image.convert(self.mode)
        if self.size is not None:
            height, width = self.size
            image = image.resize((width, height))
        array = np.asarray(image)
        yield _with_path(pa.table({"image": column_from_values(array[np.newaxis])}), self)

    def num_rows(self) -> int:
        return 1


@dataclass(frozen=True)
class TFRecordSource(FileSource):
    """A TFRecord file of ``tf.train.Example`` records, one row per record."""

    def read(self) -> Iterator[Any]:
        rows: list[dict[str, Any]] = []
        with self.filesystem.open_input_stream(self.path, compression="detect") as f:
            for record in _records(f, self.display):
                example = _example_class().FromString(record)
                rows.append({k: _feature_value(v) for k, v in example.features.feature.items()})
                if len(rows) == 4096:
                    yield from_rows(rows, f"read_tfrecords({self.display!r})")
                    rows = []
        if rows:
            yield from_rows(rows, f"read_tfrecords({self.display!r})")


def _example_class() -> Any:
    try:
        from tensorflow.core.example import example_pb2
    except ImportError as exc:
        raise ImportError(
            "read_tfrecords decodes tf.train.Example with TensorFlow. HINT: pip install tensorflow"
        ) from exc
    return example_pb2.Example


def _with_path(table: Any, source: BinarySource | ImageSource) -> Any:
    if not source.include_paths:
        return table
    return table.append_column("path", pa.array([source.display] * table.num_rows, pa.string()))


def _records(stream: Any, display: str) -> Iterator[bytes]:
    """The records of a TFRecord stream: length (8 bytes), its CRC, data, the data's CRC."""
    while True:
        header = stream.read(12)
        if not header:
            return
        if len(header) < 12:
            raise ValueError(f"read_tfrecords: {display} ends inside a record header")
        (length,) = struct.unpack("<Q", header[:8])
        data = stream.read(length)
        if len(data) < length or len(stream.read(4)) < 4:
            raise ValueError(f"read_tfrecords: {display} ends inside a record")
        yield data


def _feature_value(feature: Any) -> Any:
    """A feature's values: one value as itself, several as a list (as Ray reads them)."""
    kind = feature.WhichOneof("kind")
    values = list(getattr(feature, kind).value) if kind else []
    return values[0] if len(values) == 1 else values


def read_binary_files(
    paths: Paths,
    *,
    include_paths: bool = False,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = None,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of files as raw bytes: one row per file, column ``bytes``.

    Args:
        paths: A path, glob, directory or URL, or a list of them.
        include_paths: Add each file's path in column ``path``.
        filesystem: A pyarrow or fsspec filesystem the paths are on.
        file_extensions: Files found in directories must end with one of these.
        override_num_blocks: The number of blocks (see ``lockstep.data.range``).
        parallelism: Ray's deprecated name of ``override_num_blocks`` (a warning).

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with open(os.path.join(d, "a.bin"), "wb") as f:
        ...         _ = f.write(b"\\x00\\x01")
        ...     read_binary_files(d).take_all()
        [{'bytes': b'\\x00\\x01'}]
    """
    files = find_files(
        paths, filesystem=filesystem, extensions=file_extensions, where="read_binary_files"
    )
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_binary_files"),
        Dataset(
            [
                BinarySource(files.filesystem, p, files.display(p), include_paths)
                for p in files.paths
            ]
        ),
    )


def read_images(
    paths: Paths,
    *,
    size: tuple[int, int] | None = None,
    mode: str | None = None,
    include_paths: bool = False,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = IMAGE_EXTENSIONS,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of image files decoded by Pillow: one row per image, column ``image``.

    Args:
        paths: A path, glob, directory or URL, or a list of them.
        size: ``(height, width)`` to resize every image to.
        mode: A Pillow mode to convert every image to (``"RGB"``, ``"L"``, ...).
        include_paths: Add each file's path in column ``path``.
        filesystem: A pyarrow or fsspec filesystem the paths are on.
        file_extensions: Files found in directories must end with one of these.
        override_num_blocks: The number of blocks (see ``lockstep.data.range``).
        parallelism: Ray's deprecated name of ``override_num_blocks`` (a warning).

    Example:
        >>> import os, tempfile
        >>> from PIL import Image
        >>> with tempfile.TemporaryDirectory() as d:
        ...     Image.new("RGB", (4, 2)).save(os.path.join(d, "a.png"))
        ...     read_images(d, size=(8, 8)).take(1)[0]["image"].shape
        (8, 8, 3)
    """
    if size is not None and (len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size)):
        raise ValueError(
            f"read_images: size must be (height, width) of positive ints, got {size!r}"
        )
    _import_pillow()
    files = find_files(
        paths, filesystem=filesystem, extensions=file_extensions, where="read_images"
    )
    size_tuple = (size[0], size[1]) if size is not None else None
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_images"),
        Dataset(
            [
                ImageSource(files.filesystem, p, files.display(p), size_tuple, mode, include_paths)
                for p in files.paths
            ]
        ),
    )


def read_tfrecords(
    paths: Paths,
    *,
    filesystem: Any = None,
    file_extensions: Sequence[str] | None = None,
    override_num_blocks: int | None = None,
    parallelism: int | None = None,
) -> Dataset:
    """A dataset of TFRecord files of ``tf.train.Example``: one row per record.

    A feature with one value gives that value; with several, a list (as Ray reads them).
    Decoding needs TensorFlow installed (its ``Example`` protocol buffer).

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:  # files written by tf.io.TFRecordWriter
        ...     open(os.path.join(d, "empty.tfrecords"), "wb").close()
        ...     read_tfrecords(d).count()
        0
    """
    files = find_files(
        paths, filesystem=filesystem, extensions=file_extensions, where="read_tfrecords"
    )
    return rebalance(
        num_blocks_arg(override_num_blocks, parallelism, "read_tfrecords"),
        Dataset([TFRecordSource(files.filesystem, p, files.display(p)) for p in files.paths]),
    )


def _import_pillow() -> None:
    try:
        import PIL  # noqa: F401
    except ImportError as exc:
        raise ImportError("read_images needs Pillow. HINT: pip install Pillow") from exc
