"""Checkpoint: a directory of files on a local or remote filesystem."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lockstep._core import storage

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

METADATA_FILE = ".metadata.json"
# The fitted preprocessor, as hex-encoded cloudpickle in the metadata, as Ray stores it.
PREPROCESSOR_KEY = "preprocessor_pkl"


class Checkpoint:
    """A directory of files, on the local disk or on an fsspec filesystem.

    A checkpoint is a reference: creating one copies nothing. ``report()`` copies the files
    into the run directory; :meth:`to_directory` and :meth:`as_directory` read them back.

    Args:
        path: A local path or a URL such as ``s3://bucket/runs/exp/checkpoint_000003``.
        filesystem: An fsspec filesystem, when ``path`` is a path on it.

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with open(os.path.join(d, "weights.txt"), "w") as f:
        ...         _ = f.write("42")
        ...     with Checkpoint.from_directory(d).as_directory() as path:
        ...         print(open(os.path.join(path, "weights.txt")).read())
        42
    """

    def __init__(
        self, path: str | os.PathLike[str], filesystem: AbstractFileSystem | None = None
    ) -> None:
        text = os.fspath(path)
        if filesystem is None:
            filesystem, text = storage.resolve(text)
        self._fs = filesystem
        self.path = text

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        """A checkpoint of the local directory ``path``, which must exist.

        Raises:
            FileNotFoundError: ``path`` does not exist or is not a directory.
        """
        text = os.path.abspath(os.fspath(path))
        if not os.path.isdir(text):
            what = "is not a directory" if os.path.exists(text) else "does not exist"
            raise FileNotFoundError(
                f"Checkpoint.from_directory: {text!r} {what}. HINT: write the checkpoint "
                "files into a directory first and pass that directory while it still exists"
            )
        return cls(text)

    @property
    def filesystem(self) -> AbstractFileSystem:
        """The fsspec filesystem the checkpoint lives on."""
        if self._fs is None:
            self._fs = storage.local_filesystem()
        return self._fs

    @property
    def is_local(self) -> bool:
        return self._dir().is_local

    def _dir(self) -> storage.StorageDir:
        return storage.StorageDir(self._fs, self.path)

    @property
    def uri(self) -> str:
        """The path as a user would type it: a local path or ``protocol://path``."""
        return storage.display_uri(self._fs, self.path)

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the checkpoint's files into the local directory ``path`` and return it.

        Without ``path``, a new temporary directory is created; the caller owns it.
        """
        target = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="lockstep-ckpt-")
        self._dir().download("", target)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the checkpoint's files, to read and not modify.

        A local checkpoint yields its own directory without copying; a remote one is
        downloaded into a temporary directory that is deleted afterwards.
        """
        if self.is_local:
            yield self.path
            return
        tmp = self.to_directory()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def get_metadata(self) -> dict[str, Any]:
        """The JSON metadata stored with the checkpoint; empty when none was set."""
        target = self._join(METADATA_FILE)
        if not self.filesystem.exists(target):
            return {}
        with self.filesystem.open(target, "rb") as f:
            loaded: dict[str, Any] = json.loads(f.read().decode("utf-8"))
        return loaded

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace the checkpoint's metadata with ``metadata`` (JSON-serialisable)."""
        try:
            data = json.dumps(dict(metadata), sort_keys=True).encode("utf-8")
        except TypeError as exc:
            raise ValueError(
                f"checkpoint metadata must be JSON-serialisable: {exc}. "
                "HINT: store numbers, strings, lists and dicts only"
            ) from exc
        with self.filesystem.open(self._join(METADATA_FILE), "wb") as f:
            f.write(data)

    def update_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata."""
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def get_preprocessor(self) -> Any:
        """The preprocessor the trainer fitted and saved with this checkpoint, or None.

        Serving applies exactly the training transform with it:
        ``checkpoint.get_preprocessor().transform_batch(batch)``.
        """
        data = self.get_metadata().get(PREPROCESSOR_KEY)
        if data is None:
            return None
        import cloudpickle

        return cloudpickle.loads(bytes.fromhex(data))

    def set_preprocessor(self, preprocessor: Any) -> None:
        """Save ``preprocessor`` (pickled) in this checkpoint's metadata."""
        self.update_metadata({PREPROCESSOR_KEY: preprocessor_metadata(preprocessor)})

    def _join(self, name: str) -> str:
        return self._dir().join(name)

    def __fspath__(self) -> str:
        raise TypeError(
            "a Checkpoint is not a local path. HINT: use `with checkpoint.as_directory() as d:` "
            "and open files under d"
        )

    def __repr__(self) -> str:
        return f"Checkpoint({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and self.uri == other.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __getstate__(self) -> dict[str, Any]:
        # A local filesystem is recreated on demand rather than pickled.
        return {"path": self.path, "fs": None if self.is_local else self._fs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._fs = state["fs"]


def preprocessor_metadata(preprocessor: Any) -> str:
    """``preprocessor`` as it is stored in checkpoint metadata."""
    import cloudpickle

    return bytes(cloudpickle.dumps(preprocessor)).hex()
