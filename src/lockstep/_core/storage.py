"""The run directory on a filesystem: its layout and the few operations lockstep needs.

Local paths and fsspec URLs (``s3://``, ``gs://``, ``memory://``) go through fsspec, imported
on first use so that a worker which never checkpoints does not pay for the import.

Layout of ``{storage_path}/{name}/``::

    params.json          the configs, for people to read
    trainer.pkl          the trainer's arguments, for Trainer.restore
    result.json          one JSON line per step (rank 0's metrics plus bookkeeping)
    progress.csv         the same, as a table
    run_state.json       committed checkpoints and counters, rewritten atomically
    checkpoint_000000/   exactly the user's files
    .staging/            checkpoints being written; never visible as checkpoints
    error.txt            the failure, when the run failed
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

PARAMS_FILE = "params.json"
TRAINER_FILE = "trainer.pkl"
RESULTS_FILE = "result.json"
PROGRESS_FILE = "progress.csv"
STATE_FILE = "run_state.json"
ERROR_FILE = "error.txt"
MARKER_FILE = ".lockstep_run"
STAGING_DIR = ".staging"
CHECKPOINT_PREFIX = "checkpoint_"

# Keys lockstep adds to each line of result.json and progress.csv; metric names may not use them.
RESULT_AUTO_KEYS = ("training_iteration", "timestamp", "time_total_s", "checkpoint_dir_name")


def checkpoint_dir_name(index: int) -> str:
    """The directory name of the checkpoint with this index: ``checkpoint_000012``."""
    return f"{CHECKPOINT_PREFIX}{index:06d}"


def staging_dir_name(step: int, rank: int | None = None) -> str:
    """Where the workers write their parts of the checkpoint reported at ``step``.

    Each rank writes into its own subdirectory, so that two ranks writing a file of the same
    name never interleave; the commit merges them.
    """
    step_dir = posixpath.join(STAGING_DIR, f"step_{step:09d}")
    return step_dir if rank is None else posixpath.join(step_dir, f"rank_{rank:05d}")


def is_uri(path: str) -> bool:
    """Whether ``path`` is a URL such as ``s3://bucket/key`` rather than a local path."""
    return "://" in path and not path.startswith("file://")


def local_filesystem() -> AbstractFileSystem:
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem()


def resolve(path: str | os.PathLike[str]) -> tuple[AbstractFileSystem | None, str]:
    """Split a path or URL into ``(filesystem, path)``; the filesystem is None when local."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if not is_uri(text):
        return None, os.path.abspath(os.path.expanduser(text))
    if "?" in text:  # pyarrow's query options: region, endpoint_override, scheme, ...
        from lockstep._core.pyarrow_fs import from_uri_with_options

        return from_uri_with_options(text)
    from fsspec.core import url_to_fs

    fs, stripped = url_to_fs(text)
    return fs, stripped


def display_uri(fs: AbstractFileSystem | None, path: str) -> str:
    """``path`` as a user would type it: a local path, or ``protocol://path``."""
    if fs is None or _is_local(fs):
        return path
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return f"{protocol}://{path.lstrip('/')}" if protocol != "memory" else f"memory://{path}"


def _is_local(fs: AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


class StorageDir:
    """A directory on a local or fsspec filesystem, addressed by paths relative to it."""

    def __init__(self, fs: AbstractFileSystem | None, path: str) -> None:
        self._fs = fs
        self.path = path.rstrip("/") if len(path) > 1 else path

    @classmethod
    def from_uri(cls, uri: str | os.PathLike[str]) -> StorageDir:
        fs, path = resolve(uri)
        return cls(fs, path)

    @property
    def is_local(self) -> bool:
        return self._fs is None or _is_local(self._fs)

    @property
    def fs(self) -> AbstractFileSystem:
        if self._fs is None:
            self._fs = local_filesystem()
        return self._fs

    @property
    def uri(self) -> str:
        return display_uri(self._fs, self.path)

    def join(self, *parts: str) -> str:
        if self.is_local:
            return os.path.join(self.path, *parts)
        return posixpath.join(self.path, *parts)

    def child(self, *parts: str) -> StorageDir:
        return StorageDir(self._fs, self.join(*parts))

    def exists(self, rel: str = "") -> bool:
        target = self.join(rel) if rel else self.path
        if self.is_local:
            return os.path.exists(target)
        return bool(self._fresh(target).exists(target))

    def makedirs(self, rel: str = "") -> None:
        target = self.join(rel) if rel else self.path
        if self.is_local:
            os.makedirs(target, exist_ok=True)
        else:
            self.fs.makedirs(target, exist_ok=True)

    def listdir(self) -> list[str]:
        """Names (not paths) of the entries in this directory; empty if it does not exist."""
        if self.is_local:
            try:
                return sorted(os.listdir(self.path))
            except FileNotFoundError:
                return []
        if not self._fresh(self.path).exists(self.path):
            return []
        return sorted(
            posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path, detail=False)
        )

    def _fresh(self, path: str) -> AbstractFileSystem:
        """The filesystem, with what it cached about ``path`` forgotten.

        Workers write into the run directory from other processes, so a listing this
        process cached (s3fs and gcsfs cache them) may be stale.
        """
        self.fs.invalidate_cache(path)
        return self.fs

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open(self.join(rel), "rb") as f:
            data: bytes = f.read()
        return data

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Replace the file ``rel`` with ``data`` so that readers see the old or new bytes.

        Locally: write a temporary file, fsync it, rename it over the old one, fsync the
        directory. Object stores make a single upload visible atomically already.
        """
        target = self.join(rel)
        if not self.is_local:
            self.fs.pipe_file(target, data)
            return
        tmp = f"{target}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(os.path.dirname(target))

    def append_text(self, rel: str, text: str) -> None:
        """Append to a local file. Object stores cannot append: use :meth:`write_atomic`."""
        assert self.is_local, "append_text needs a local directory"
        with open(self.join(rel), "a", encoding="utf-8") as f:
            f.write(text)

    def move(self, src_rel: str, dst_rel: str) -> None:
        """Move a file or directory; a local directory moves atomically (one rename)."""
        src, dst = self.join(src_rel), self.join(dst_rel)
        if self.is_local:
            os.rename(src, dst)
            _fsync_dir(os.path.dirname(dst))
        else:
            # Object by object: fsspec's recursive mv also copies the pseudo-directory key,
            # which does not exist on object stores. An empty upload leaves no object, and
            # then there is nothing to copy.
            prefix = src.rstrip("/") + "/"
            files = self._fresh(src).find(src)
            for path in files:
                self.fs.copy(path, dst.rstrip("/") + "/" + path[len(prefix) :])
            if self._fresh(src).exists(src):
                self.fs.rm(src, recursive=True)
            self.fs.makedirs(dst, exist_ok=True)

    def merge_into(self, src_rel: str, dst_rel: str) -> None:
        """Move every file under ``src_rel`` into ``dst_rel``, replacing same-named ones."""
        src, dst = self.join(src_rel), self.join(dst_rel)
        if self.is_local:
            for rel in _walk_files(src):
                target = os.path.join(dst, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(os.path.join(src, rel), target)
            self.remove(src_rel)
            return
        prefix = src.rstrip("/") + "/"
        for path in self._fresh(src).find(src):
            self.fs.copy(path, dst.rstrip("/") + "/" + path[len(prefix) :])
        self.remove(src_rel)

    def remove(self, rel: str) -> None:
        """Delete a file or a directory tree; missing is fine."""
        target = self.join(rel)
        if self.is_local:
            if os.path.isdir(target):
                import shutil

                shutil.rmtree(target, ignore_errors=True)
            elif os.path.lexists(target):
                os.remove(target)
        elif self._fresh(target).exists(target):
            self.fs.rm(target, recursive=True)

    def upload_dir(self, local_dir: str, dst_rel: str) -> None:
        """Copy every file under the local ``local_dir`` into ``dst_rel``, merging."""
        dst = self.join(dst_rel)
        self.makedirs(dst_rel)  # an empty checkpoint is still a checkpoint
        for rel in _walk_files(local_dir):
            src = os.path.join(local_dir, rel)
            if self.is_local:
                target = os.path.join(dst, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                _copy_file(src, target)
            else:
                target = posixpath.join(dst, rel.replace(os.sep, "/"))
                self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
                self.fs.put_file(src, target)


def _copy_file(src: str, dst: str) -> None:
    import shutil

    # copyfile uses the kernel's copy_file_range/sendfile: no Python-level buffering.
    shutil.copyfile(src, dst)


def _walk_files(root: str) -> Iterator[str]:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            yield os.path.relpath(os.path.join(dirpath, name), root)


def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def download_dir(fs: AbstractFileSystem, src: str, local_dir: str) -> None:
    """Copy every file under ``src`` on ``fs`` into the local directory ``local_dir``."""
    os.makedirs(local_dir, exist_ok=True)
    fs.invalidate_cache(src)
    prefix = src.rstrip("/") + "/"
    files: Any = fs.find(src)
    for remote in files:
        rel = remote[len(prefix) :] if remote.startswith(prefix) else posixpath.basename(remote)
        target = os.path.join(local_dir, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fs.get_file(remote, target)
