"""Filesystems as Ray's users pass them: ``pyarrow.fs.FileSystem`` in, and out again.

lockstep reads and writes through fsspec; a pyarrow filesystem a user passes is wrapped
(``ArrowFSWrapper``), and ``.filesystem`` gives a pyarrow one back, as Ray does: the
wrapped one itself, or an fsspec one wrapped with ``PyFileSystem(FSSpecHandler(...))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.fs
    from fsspec import AbstractFileSystem


def is_pyarrow(filesystem: Any) -> bool:
    return type(filesystem).__module__.startswith("pyarrow")


def to_fsspec(filesystem: Any) -> AbstractFileSystem:
    """The fsspec filesystem lockstep works through for ``filesystem`` (pyarrow or fsspec).

    Raises:
        ValueError: ``filesystem`` is neither.
    """
    if is_pyarrow(filesystem):
        import pyarrow.fs as pafs

        if isinstance(filesystem, pafs.PyFileSystem) and isinstance(
            filesystem.handler, pafs.FSSpecHandler
        ):
            inner: AbstractFileSystem = filesystem.handler.fs
            return inner
        from fsspec.implementations.arrow import ArrowFSWrapper

        return ArrowFSWrapper(filesystem)
    if hasattr(filesystem, "protocol") and hasattr(filesystem, "open"):
        return filesystem
    raise ValueError(
        f"a filesystem must be a pyarrow.fs.FileSystem or an fsspec filesystem, got "
        f"{type(filesystem).__name__}. HINT: pyarrow.fs.S3FileSystem(...), or leave it out "
        "and pass a URI such as s3://bucket/path"
    )


def to_pyarrow(filesystem: AbstractFileSystem | None) -> pyarrow.fs.FileSystem:
    """``filesystem`` (None: the local disk) as a ``pyarrow.fs.FileSystem``."""
    import pyarrow.fs as pafs
    from fsspec.implementations.arrow import ArrowFSWrapper

    if isinstance(filesystem, ArrowFSWrapper):
        return filesystem.fs
    protocol = getattr(filesystem, "protocol", "file")
    protocol = protocol if isinstance(protocol, str) else protocol[0]
    if filesystem is None or protocol in ("file", "local"):
        return pafs.LocalFileSystem()
    return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))


def from_uri_with_options(uri: str) -> tuple[AbstractFileSystem, str]:
    """A URI with pyarrow's query options (``s3://b/p?region=...&endpoint_override=...``)."""
    import pyarrow.fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(uri)
    return to_fsspec(filesystem), path
