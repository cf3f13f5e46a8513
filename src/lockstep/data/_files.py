"""Turning what a user passes to a reader (paths, globs, directories, URLs) into files.

Listing goes through fsspec, which knows globs and every protocol; reading goes through a
pyarrow filesystem: pyarrow's own for local paths (C++ I/O, no GIL), and fsspec wrapped in
``pyarrow.fs.PyFileSystem(FSSpecHandler(fs))`` for URLs such as ``s3://`` or ``memory://``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class Files:
    """Files found for a reader, on one filesystem.

    Attributes:
        filesystem: The pyarrow filesystem to read them with (picklable).
        paths: Paths on that filesystem, sorted.
        prefix: What to put before a path to show it as a URL (``"s3://"``), or ``""``.
        roots: The directories the user named (for a glob, the part before it): partition
            directories (``key=value``) are looked for below them.
    """

    filesystem: Any
    paths: tuple[str, ...]
    prefix: str = ""
    roots: tuple[str, ...] = ()

    def display(self, path: str) -> str:
        """``path`` as the user would write it."""
        return self.prefix + path


def find_files(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    filesystem: Any = None,
    extensions: Sequence[str] | None,
    where: str,
) -> Files:
    """Expand ``paths`` into the files to read; directories are searched recursively.

    Files found inside a directory or by a glob are kept only when their name ends with one
    of ``extensions`` (any name when None) and does not start with ``.`` or ``_`` (markers
    such as ``_SUCCESS``); a file named explicitly is always kept.

    Raises:
        FileNotFoundError: A path does not exist.
        ValueError: No file was found, or the paths are on different filesystems.
    """
    items = [os.fspath(p) for p in ([paths] if isinstance(paths, str | os.PathLike) else paths)]
    if not items:
        raise ValueError(f"{where}: no paths given. HINT: pass a file, a directory or a glob")
    fs, protocol = _fsspec_for(items, filesystem, where)
    found: list[str] = []
    roots: list[str] = []
    for item in items:
        stripped = _strip(fs, item, protocol)
        found += _expand(fs, stripped, extensions, where)
        roots.append(_root(stripped))
    if not found:
        raise ValueError(
            f"{where}: no files found in {items}"
            + (f" ending with {list(extensions)}" if extensions else "")
            + ". HINT: check the path, or pass file_extensions=None to read every file"
        )
    paths = tuple(sorted(dict.fromkeys(found)))
    return Files(_arrow_filesystem(fs, protocol), paths, protocol, tuple(roots))


def _root(path: str) -> str:
    """The directory partition values are read below: a glob's fixed part, else the path."""
    cut = min((path.index(c) for c in GLOB_CHARS if c in path), default=None)
    if cut is None:
        return path.rstrip("/")
    return posixpath.dirname(path[:cut]).rstrip("/")


def _fsspec_for(items: list[str], filesystem: Any, where: str) -> tuple[Any, str]:
    """The fsspec filesystem for the paths, and the URL prefix to display them with."""
    if filesystem is not None:
        return _as_fsspec(filesystem, where), ""
    protocols = {_protocol(item) for item in items}
    if len(protocols) > 1:
        raise ValueError(
            f"{where}: paths on different filesystems ({sorted(protocols)}). "
            "HINT: read each filesystem separately and combine the datasets with union()"
        )
    protocol = protocols.pop()
    import fsspec

    if not protocol:
        return fsspec.filesystem("file"), ""
    from fsspec.core import url_to_fs

    fs, _ = url_to_fs(items[0])
    return fs, protocol


def _protocol(path: str) -> str:
    if "://" in path and not path.startswith("file://"):
        return path.split("://", 1)[0] + "://"
    return ""


def _strip(fs: Any, item: str, protocol: str) -> str:
    if item.startswith("file://"):
        item = item[len("file://") :]
    if not protocol and _is_local(fs):
        return os.path.abspath(os.path.expanduser(item))
    return str(fs._strip_protocol(item))


def _expand(fs: Any, path: str, extensions: Sequence[str] | None, where: str) -> list[str]:
    if GLOB_CHARS & set(path):
        return [p for p in sorted(fs.glob(path)) if fs.isfile(p) and _wanted(p, extensions)]
    if fs.isdir(path):
        return [p for p in sorted(fs.find(path)) if _wanted(p, extensions)]
    if fs.isfile(path):
        return [path]
    raise FileNotFoundError(
        f"{where}: {path!r} does not exist. HINT: check the path; a URL needs its protocol, "
        "e.g. s3://bucket/key"
    )


def _wanted(path: str, extensions: Sequence[str] | None) -> bool:
    name = posixpath.basename(path.replace(os.sep, "/"))
    if name.startswith((".", "_")):
        return False
    return extensions is None or any(name.endswith("." + e.lstrip(".")) for e in extensions)


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def _as_fsspec(filesystem: Any, where: str) -> Any:
    import pyarrow.fs as pafs

    if isinstance(filesystem, pafs.FileSystem):
        from fsspec.implementations.arrow import ArrowFSWrapper

        return ArrowFSWrapper(filesystem)
    if not hasattr(filesystem, "glob"):
        raise ValueError(
            f"{where}: filesystem must be a pyarrow or fsspec filesystem, got "
            f"{type(filesystem).__name__}. HINT: fsspec.filesystem('s3') or "
            "pyarrow.fs.S3FileSystem()"
        )
    return filesystem


def _arrow_filesystem(fs: Any, protocol: str) -> Any:
    import pyarrow.fs as pafs
    from fsspec.implementations.local import LocalFileSystem

    if not protocol and type(fs) is LocalFileSystem:  # a subclass may do more: keep it
        return pafs.LocalFileSystem()
    if hasattr(fs, "fs") and isinstance(fs.fs, pafs.FileSystem):  # an ArrowFSWrapper
        return fs.fs
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def output_filesystem(
    path: str | os.PathLike[str], filesystem: Any, where: str, *, create: bool = True
) -> tuple[Any, str]:
    """The pyarrow filesystem and directory path to write a dataset's files under ``path``
    (created unless ``create=False``)."""
    text = os.fspath(path)
    if filesystem is not None:
        fs = _as_fsspec(filesystem, where)
        if create:
            fs.makedirs(text, exist_ok=True)
        return _arrow_filesystem(fs, ""), text
    fs, protocol = _fsspec_for([text], None, where)
    directory = _strip(fs, text, protocol)
    if create:
        fs.makedirs(directory, exist_ok=True)
    return _arrow_filesystem(fs, protocol), directory
