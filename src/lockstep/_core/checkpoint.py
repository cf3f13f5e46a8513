"""Checkpoint: a directory of files on a local or remote filesystem."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lockstep._core import pyarrow_fs, storage

if TYPE_CHECKING:
    import pyarrow.fs
    from fsspec import AbstractFileSystem

METADATA_FILE = ".metadata.json"
# Ray AIR's dict checkpoints: the dict, pickled, as the directory's one file.
DICT_FILE = "dict_checkpoint.pkl"
# A directory checkpoint as a dict (Ray AIR's key): the directory as tar bytes.
DIR_BYTES_KEY = "fs_checkpoint"
_model_loaders: list[Callable[[Checkpoint], Any]] = []
# The fitted preprocessor, as hex-encoded cloudpickle in the metadata, as Ray stores it.
PREPROCESSOR_KEY = "preprocessor_pkl"
# Ray AIR's key of the preprocessor in a dict checkpoint.
DICT_PREPROCESSOR_KEY = "_preprocessor"
# Where every worker's dataset shards and data loaders were at a checkpoint's step, kept by
# the driver so that a restart from it continues the data there (lockstep.data._position).
DATA_POSITIONS_KEY = "lockstep_data_positions"


class Checkpoint:
    """A directory of files, on the local disk or on an fsspec filesystem.

    A checkpoint is a reference: creating one copies nothing. ``report()`` copies the files
    into the run directory; :meth:`to_directory` and :meth:`as_directory` read them back.

    Args:
        path: A local path or a URL such as ``s3://bucket/runs/exp/checkpoint_000003``
            (pyarrow's query options, ``?region=...&endpoint_override=...``, work too).
        filesystem: A ``pyarrow.fs.FileSystem`` (or an fsspec one) when ``path`` is a
            path on it.

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with open(os.path.join(d, "weights.txt"), "w") as f:
        ...         _ = f.write("42")
        ...     with Checkpoint.from_directory(d).as_directory() as path:
        ...         print(open(os.path.join(path, "weights.txt")).read())
        42
    """

    def __init__(self, path: str | os.PathLike[str], filesystem: Any = None) -> None:
        text = os.fspath(path)
        if filesystem is None:
            fs, text = storage.resolve(text)
        else:
            fs = pyarrow_fs.to_fsspec(filesystem)
        self._fs: AbstractFileSystem | None = fs
        self.path = text
        self._data: dict[str, Any] | None = None  # the dict of from_dict(), in this process

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
    def filesystem(self) -> pyarrow.fs.FileSystem:
        """The ``pyarrow.fs.FileSystem`` the checkpoint lives on, as in Ray."""
        return pyarrow_fs.to_pyarrow(self._fs)

    @property
    def _fsspec(self) -> AbstractFileSystem:
        """The fsspec filesystem lockstep reads and writes the checkpoint through."""
        if self._fs is None:
            self._fs = storage.local_filesystem()
        return self._fs

    @property
    def is_local(self) -> bool:
        return self._dir().is_local

    def _dir(self) -> storage.StorageDir:
        return storage.StorageDir.of(self._fs, self.path)

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
        if not self._fsspec.exists(target):
            return {}
        with self._fsspec.open(target, "rb") as f:
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
        with self._fsspec.open(self._join(METADATA_FILE), "wb") as f:
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
            return self._dict_entry(DICT_PREPROCESSOR_KEY)
        import cloudpickle

        return cloudpickle.loads(bytes.fromhex(data))

    def set_preprocessor(self, preprocessor: Any) -> None:
        """Save ``preprocessor`` (pickled) in this checkpoint's metadata."""
        self.update_metadata({PREPROCESSOR_KEY: preprocessor_metadata(preprocessor)})

    # Ray AIR's conversions (Ray 2.0 to 2.6), which the older material uses.

    def to_bytes(self) -> bytes:
        """The checkpoint's files as one tar archive, for :meth:`from_bytes`.

        Example:
            >>> import os, shutil, tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     _ = open(os.path.join(d, "w.txt"), "w").write("42")
            ...     data = Checkpoint.from_directory(d).to_bytes()
            >>> copy = Checkpoint.from_bytes(data)
            >>> open(os.path.join(copy.path, "w.txt")).read()
            '42'
            >>> shutil.rmtree(copy.path)
        """
        buffer = io.BytesIO()
        with self.as_directory() as local, tarfile.open(fileobj=buffer, mode="w") as tar:
            for name in sorted(os.listdir(local)):
                tar.add(os.path.join(local, name), arcname=name)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """A checkpoint in a new temporary directory, from :meth:`to_bytes`'s archive.

        The caller owns the directory (``checkpoint.path``).
        """
        target = tempfile.mkdtemp(prefix="lockstep-ckpt-")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(target, filter="data")
        return cls(target)

    def to_dict(self) -> dict[str, Any]:
        """The dict a :meth:`from_dict` checkpoint holds, with the preprocessor saved with it
        under ``"_preprocessor"``; for a directory of files, the directory as archive bytes
        under ``"fs_checkpoint"`` (as Ray AIR had it).

        Example:
            >>> import shutil
            >>> checkpoint = Checkpoint.from_dict({"epoch": 3, "weights": [0.5]})
            >>> checkpoint.to_dict()
            {'epoch': 3, 'weights': [0.5]}
            >>> shutil.rmtree(checkpoint.path)
        """
        data = self._dict()
        if data is None:
            return {DIR_BYTES_KEY: self.to_bytes()}
        if self.get_metadata().get(PREPROCESSOR_KEY) is not None:
            data = {**data, DICT_PREPROCESSOR_KEY: self.get_preprocessor()}
        return data

    def _dict(self) -> dict[str, Any] | None:
        """The dict of a dict checkpoint (None for a directory of files). The one this
        process built keeps its objects, as Ray AIR's in-memory dict checkpoints did."""
        import cloudpickle

        if self._data is not None:
            return dict(self._data)
        if not self._fsspec.exists(self._join(DICT_FILE)):
            return None
        with self._fsspec.open(self._join(DICT_FILE), "rb") as f:
            loaded: dict[str, Any] = cloudpickle.loads(f.read())
        return loaded

    def _dict_entry(self, key: str) -> Any:
        data = self._dict()
        return None if data is None else data.get(key)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Checkpoint:
        """A checkpoint of ``data`` (pickled) in a new temporary directory the caller owns."""
        import cloudpickle

        if set(data) == {DIR_BYTES_KEY}:
            return cls.from_bytes(data[DIR_BYTES_KEY])
        target = tempfile.mkdtemp(prefix="lockstep-ckpt-")
        with open(os.path.join(target, DICT_FILE), "wb") as f:
            f.write(cloudpickle.dumps(dict(data)))
        checkpoint = cls(target)
        checkpoint._data = dict(data)
        return checkpoint

    def load_model(self) -> Any:
        """The trained model in this checkpoint, as a ``lockstep.train.Model`` whose
        ``predict(dataset)`` applies the saved preprocessor, then the model.

        Recognises the checkpoints of lockstep's trainers and framework checkpoints
        (XGBoost, LightGBM, scikit-learn, torch).
        """
        for loader in _model_loaders:
            model = loader(self)
            if model is not None:
                return model
        raise ValueError(
            f"{self!r} holds no model lockstep recognises. HINT: load it yourself with "
            "checkpoint.as_directory(), or save it with a framework checkpoint such as "
            "XGBoostCheckpoint.from_model(booster)"
        )

    def _join(self, name: str) -> str:
        return self._dir().join(name)

    def __fspath__(self) -> str:
        raise TypeError(
            "a Checkpoint is not a local path. HINT: use `with checkpoint.as_directory() as d:` "
            "and open files under d"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(filesystem={self._protocol()}, path={self.path})"

    def _protocol(self) -> str:
        """The filesystem's name as Ray's repr shows it: ``local``, ``s3``, ``gs``..."""
        if self.is_local:
            return "local"
        protocol = self._fsspec.protocol
        return str(protocol if isinstance(protocol, str) else protocol[0])

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
        self._data = None


def register_model_loader(loader: Callable[[Checkpoint], Any]) -> None:
    """Add a way for :meth:`Checkpoint.load_model` to recognise a model (lockstep.train
    registers its own: a layer below it cannot import the frameworks' predictors)."""
    if loader not in _model_loaders:
        _model_loaders.append(loader)


def preprocessor_metadata(preprocessor: Any) -> str:
    """``preprocessor`` as it is stored in checkpoint metadata."""
    import cloudpickle

    return bytes(cloudpickle.dumps(preprocessor)).hex()
