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

import contextlib
import errno
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

PARAMS_FILE = "params.json"
TRAINER_FILE = "trainer.pkl"
RESULTS_FILE = "result.json"
PROGRESS_FILE = "progress.csv"
STATE_FILE = "run_state.json"
ERROR_FILE = "error.txt"
ERRORS_DIR = "errors"  # errors/attempt_N.txt: every rank's stacks when attempt N hung
MARKER_FILE = ".lockstep_run"
DRIVER_FILE = ".driver.json"  # the process that drives (or last drove) the run
STAGING_DIR = ".staging"
CHECKPOINT_PREFIX = "checkpoint_"

# An object store that fails a write is tried this many times in all, waiting
# WRITE_BACKOFF_S, then twice that, and so on, in between (a throttled or restarting endpoint).
WRITE_ATTEMPTS = 4
WRITE_BACKOFF_S = 0.2

# Keys lockstep adds to each line of result.json and progress.csv; metric names may not use them.
RESULT_AUTO_KEYS = ("training_iteration", "timestamp", "time_total_s", "checkpoint_dir_name")


def checkpoint_dir_name(index: int) -> str:
    """The directory name of the checkpoint with this index: ``checkpoint_000012``."""
    return f"{CHECKPOINT_PREFIX}{index:06d}"


def attempt_staging_dir(attempt: int) -> str:
    """Where the workers of one attempt stage their checkpoints: ``.staging/attempt_000002``.

    The driver names it and sends it to the workers; a worker of an attempt that was given
    up (a Ray actor still writing, say) writes where nothing will be committed.
    """
    return posixpath.join(STAGING_DIR, f"attempt_{attempt:06d}")


def staging_dir_name(step: int, rank: int | None = None, *, root: str = STAGING_DIR) -> str:
    """Where the workers write their parts of the checkpoint reported at ``step``.

    Each rank writes into its own subdirectory, so that two ranks writing a file of the same
    name never interleave; the commit merges them.
    """
    step_dir = posixpath.join(root, f"step_{step:09d}")
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
    if text.startswith("mock://"):
        # pyarrow's in-memory test filesystem, which Ray's tests write runs to: this
        # process's in-memory filesystem (memory://), the same one at every resolve
        from fsspec.implementations.memory import MemoryFileSystem

        return MemoryFileSystem(), "/" + text[len("mock://") :].split("?", 1)[0].lstrip("/")
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
    """A directory on a local or fsspec filesystem, addressed by paths relative to it.

    The one interface for everything that writes a run directory (run log, run state,
    checkpoints, fault counters). Two implementations: :class:`LocalDir` (plain files:
    renames are atomic, files can be appended to) and :class:`FsspecDir` (object stores:
    whole-object uploads, no append). ``StorageDir(fs, path)`` picks the right one, as
    ``pathlib.Path(...)`` picks the flavour of path. A new filesystem subclasses it and
    implements every method that raises NotImplementedError here (the storage contract
    tests in ``tests/unit/_core/test_storage.py`` say whether it did).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     run = StorageDir.from_uri(d)
        ...     run.write_atomic("state.json", b"{}")
        ...     (type(run).__name__, run.listdir(), run.can_append)
        ('LocalDir', ['state.json'], True)
    """

    can_append: ClassVar[bool]
    """Whether a file can be appended to in place (an object store rewrites it whole)."""

    fsync_writes: bool = True
    """Whether :meth:`write_atomic` puts the file on the disk (fsync) before it returns, so
    that a crash of the machine cannot lose it. Without it the file is still replaced
    atomically and is in the kernel's hands, which a killed process cannot lose; it
    reaches the disk when its owner syncs the whole filesystem (:meth:`sync_all`), as a
    Tuner does for its function trials before each snapshot of the experiment."""

    def __new__(cls, fs: AbstractFileSystem | None = None, path: str = "") -> StorageDir:
        if cls is StorageDir:
            cls = LocalDir if fs is None or _is_local(fs) else FsspecDir
        return super().__new__(cls)

    def __init__(self, fs: AbstractFileSystem | None, path: str) -> None:
        self._fs = fs
        self.path = path.rstrip("/") if len(path) > 1 else path

    @classmethod
    def from_uri(cls, uri: str | os.PathLike[str]) -> StorageDir:
        fs, path = resolve(uri)
        return StorageDir.of(fs, path)

    @staticmethod
    def of(fs: AbstractFileSystem | None, path: str) -> StorageDir:
        """``StorageDir(fs, path)``, typed as the interface (the class itself is abstract)."""
        kind = LocalDir if fs is None or _is_local(fs) else FsspecDir
        return kind(fs, path)

    @property
    def is_local(self) -> bool:
        return isinstance(self, LocalDir)

    @property
    def fs(self) -> AbstractFileSystem:
        if self._fs is None:
            self._fs = local_filesystem()
        return self._fs

    @property
    def uri(self) -> str:
        return display_uri(self._fs, self.path)

    def child(self, *parts: str) -> StorageDir:
        child = type(self)(self._fs, self.join(*parts))
        child.fsync_writes = self.fsync_writes
        return child

    def without_fsync(self) -> StorageDir:
        """This directory, whose :meth:`write_atomic` does not fsync unless told to."""
        copy = type(self)(self._fs, self.path)
        copy.fsync_writes = False
        return copy

    def sync_all(self) -> None:
        """Put every file written so far on this directory's filesystem on the disk (an
        object store's uploads are there already)."""

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open(self.join(rel), "rb") as f:
            data: bytes = f.read()
        return data

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def merge_into(self, src_rel: str, dst_rel: str) -> None:
        """Move every file under ``src_rel`` into ``dst_rel``, replacing same-named ones."""
        for rel in self._files(src_rel):
            self._move_file(f"{src_rel}/{rel}", f"{dst_rel}/{rel}")
        self.remove(src_rel)

    def upload_dir(self, local_dir: str, dst_rel: str) -> None:
        """Copy every file under the local ``local_dir`` into ``dst_rel``, merging."""
        self.makedirs(dst_rel)  # an empty checkpoint is still a checkpoint
        for rel in _walk_files(local_dir):
            self.put_file(os.path.join(local_dir, rel), f"{dst_rel}/{rel.replace(os.sep, '/')}")

    def join(self, *parts: str) -> str:
        """The full path of ``parts`` under this directory."""
        raise NotImplementedError

    def exists(self, rel: str = "") -> bool:
        raise NotImplementedError

    def makedirs(self, rel: str = "") -> None:
        raise NotImplementedError

    def listdir(self) -> list[str]:
        """Names (not paths) of the entries in this directory; empty if it does not exist."""
        raise NotImplementedError

    def write_atomic(self, rel: str, data: bytes, *, fsync: bool | None = None) -> None:
        """Replace the file ``rel`` with ``data`` so that readers see the old or new bytes;
        on the disk when this returns if ``fsync`` (by default: :attr:`fsync_writes`)."""
        raise NotImplementedError

    def open_append(self, rel: str) -> IO[str]:
        """The text file ``rel`` opened for appending; only where :attr:`can_append`."""
        raise NotImplementedError

    def move(self, src_rel: str, dst_rel: str) -> None:
        """Move a file or directory; a local directory moves atomically (one rename)."""
        raise NotImplementedError

    def remove(self, rel: str) -> None:
        """Delete a file or a directory tree; missing is fine."""
        raise NotImplementedError

    def put_file(self, local_path: str, rel: str) -> None:
        """Copy the local file ``local_path`` to ``rel``, creating its parents."""
        raise NotImplementedError

    def download(self, rel: str, local_dir: str) -> None:
        """Copy every file under ``rel`` into the local directory ``local_dir``."""
        raise NotImplementedError

    def _files(self, rel: str) -> list[str]:
        """Paths, relative to ``rel`` and with ``/``, of every file under ``rel``."""
        raise NotImplementedError

    def _move_file(self, src_rel: str, dst_rel: str) -> None:
        """Move one file, replacing ``dst_rel``, creating its parents."""
        raise NotImplementedError

    def append_text(self, rel: str, text: str) -> None:
        """Append to a file. Object stores cannot append: use :meth:`write_atomic`."""
        with self.open_append(rel) as f:
            f.write(text)


class LocalDir(StorageDir):
    """A directory on the local disk (or a shared mount): plain OS calls, fsync'd renames."""

    can_append = True

    def join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def exists(self, rel: str = "") -> bool:
        return os.path.exists(self.join(rel) if rel else self.path)

    def makedirs(self, rel: str = "") -> None:
        os.makedirs(self.join(rel) if rel else self.path, exist_ok=True)

    def listdir(self) -> list[str]:
        try:
            return sorted(os.listdir(self.path))
        except FileNotFoundError:
            return []

    def write_atomic(self, rel: str, data: bytes, *, fsync: bool | None = None) -> None:
        with self.writing_atomic(rel, fsync=fsync) as f:
            f.write(data)

    @contextlib.contextmanager
    def writing_atomic(self, rel: str, *, fsync: bool | None = None) -> Iterator[IO[bytes]]:
        """:meth:`write_atomic` piece by piece: the file to write, which replaces ``rel``
        when the block ends without an exception (a file too large to hold in memory)."""
        # A temporary file (fsync'd), renamed over the old one, then the directory fsync'd.
        sync = self.fsync_writes if fsync is None else fsync
        target = self.join(rel)
        tmp = f"{target}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                yield f
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            # the old file stays whole; a half-written copy (a full disk) must not stay
            if os.path.lexists(tmp):
                os.remove(tmp)
            raise
        if sync:
            fsync_dir(os.path.dirname(target))

    def sync_all(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            _syncfs(fd)
        finally:
            os.close(fd)

    def open_append(self, rel: str) -> IO[str]:
        return open(self.join(rel), "a", encoding="utf-8", newline="")

    def move(self, src_rel: str, dst_rel: str) -> None:
        dst = self.join(dst_rel)
        os.rename(self.join(src_rel), dst)
        fsync_dir(os.path.dirname(dst))

    def remove(self, rel: str) -> None:
        target = self.join(rel)
        if os.path.isdir(target):
            import shutil

            shutil.rmtree(target, ignore_errors=True)
        elif os.path.lexists(target):
            os.remove(target)

    def put_file(self, local_path: str, rel: str) -> None:
        target = self.join(rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _copy_file(local_path, target)

    def download(self, rel: str, local_dir: str) -> None:
        import shutil

        shutil.copytree(self.join(rel) if rel else self.path, local_dir, dirs_exist_ok=True)

    def _files(self, rel: str) -> list[str]:
        return [p.replace(os.sep, "/") for p in _walk_files(self.join(rel))]

    def _move_file(self, src_rel: str, dst_rel: str) -> None:
        target = self.join(dst_rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(self.join(src_rel), target)


class FsspecDir(StorageDir):
    """A directory on an fsspec filesystem (``s3://``, ``gs://``, ``memory://``).

    Object stores have no rename and no append: a move copies object by object, and a
    single upload is what makes a file visible atomically.
    """

    can_append = False

    def join(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def exists(self, rel: str = "") -> bool:
        target = self.join(rel) if rel else self.path
        return bool(self._fresh(target).exists(target))

    def makedirs(self, rel: str = "") -> None:
        target = self.join(rel) if rel else self.path
        with_retries(self.fs.makedirs, target, True)

    def listdir(self) -> list[str]:
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

    def write_atomic(self, rel: str, data: bytes, *, fsync: bool | None = None) -> None:
        target = self.join(rel)
        with_retries(self.fs.pipe_file, target, data)  # one upload: stored once it returns

    def sync_all(self) -> None:
        pass  # every upload is stored once it returns

    def open_append(self, rel: str) -> IO[str]:
        raise AssertionError(f"{self.uri} is on an object store, which cannot append")

    def move(self, src_rel: str, dst_rel: str) -> None:
        # Object by object: fsspec's recursive mv also copies the pseudo-directory key,
        # which does not exist on object stores. An empty upload leaves no object, and
        # then there is nothing to copy.
        src, dst = self.join(src_rel), self.join(dst_rel)
        for rel in self._files(src_rel):
            self._copy(f"{src}/{rel}", f"{dst}/{rel}")
        if self._fresh(src).exists(src):
            self.fs.rm(src, recursive=True)
        self.fs.makedirs(dst, exist_ok=True)

    def _copy(self, src: str, dst: str) -> None:
        """Copy one file. A filesystem of real directories (a custom pyarrow one over a
        local disk, say) needs the destination's directory first; object stores have none,
        so they pay nothing for it."""

        def copy() -> None:
            try:
                self.fs.copy(src, dst)
            except FileNotFoundError:
                if not self.fs.exists(src):
                    raise
                self.fs.makedirs(posixpath.dirname(dst), exist_ok=True)
                self.fs.copy(src, dst)

        with_retries(copy)

    def remove(self, rel: str) -> None:
        target = self.join(rel)
        if self._fresh(target).exists(target):
            self.fs.rm(target, recursive=True)

    def put_file(self, local_path: str, rel: str) -> None:
        target = self.join(rel)

        def put() -> None:
            self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
            self.fs.put_file(local_path, target)

        with_retries(put)

    def download(self, rel: str, local_dir: str) -> None:
        download_dir(self.fs, self.join(rel) if rel else self.path, local_dir)

    def _files(self, rel: str) -> list[str]:
        src = self.join(rel)
        prefix = src.rstrip("/") + "/"
        return [p[len(prefix) :] for p in self._fresh(src).find(src)]

    def _move_file(self, src_rel: str, dst_rel: str) -> None:
        # The source tree goes as a whole afterwards (merge_into removes it).
        self._copy(self.join(src_rel), self.join(dst_rel))


class CheckpointWriteError(OSError):
    """A checkpoint could not be written to storage: it is not committed, and the
    previous checkpoint stays as it was. The message names the path, the system's reason
    and what to do."""


_WRITE_HINTS = {
    errno.ENOSPC: "free space there, or set RunConfig(storage_path=...) to a filesystem with "
    "room (CheckpointConfig(num_to_keep=...) keeps fewer checkpoints)",
    errno.EDQUOT: "raise the disk quota there, or set RunConfig(storage_path=...) elsewhere",
    errno.EACCES: "make the directory writable by this user, or set "
    "RunConfig(storage_path=...) to one that is",
    errno.EROFS: "the filesystem is read-only: set RunConfig(storage_path=...) to a writable one",
}
_WRITE_HINTS[errno.EPERM] = _WRITE_HINTS[errno.EACCES]
_REMOTE_HINT = (
    "check that the storage endpoint is up and that the bucket and credentials allow "
    "writing (the storage_path's filesystem)"
)


def write_failed(exc: BaseException, what: str, target: str) -> CheckpointWriteError:
    """The error for ``what`` (e.g. ``"checkpoint files"``) that could not be written to
    ``target`` because of ``exc``: the path, the system's reason, and a hint.

    Example:
        >>> err = write_failed(OSError(28, "No space left on device"), "checkpoint files", "/r")
        >>> print(err)  # doctest: +ELLIPSIS
        could not write checkpoint files to /r: [Errno 28] No space left on device; ...
    """
    code = exc.errno if isinstance(exc, OSError) else None
    if isinstance(exc, OSError) and code is not None:
        reason = f"[Errno {code}] {exc.strerror}"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    tries = getattr(exc, "__notes__", None)
    if tries:
        reason += f" ({'; '.join(tries)})"
    hint = _WRITE_HINTS.get(code or 0, _REMOTE_HINT if is_uri(target) else "check the path")
    return CheckpointWriteError(
        f"could not write {what} to {target}: {reason}; the checkpoint was not committed and "
        f"the previous one is intact. HINT: {hint}"
    )


_T = TypeVar("_T")


def with_retries(write: Callable[..., _T], *args: Any, attempts: int = WRITE_ATTEMPTS) -> _T:
    """``write(*args)``, tried again with exponential backoff when it fails; the last
    try's error, with the number of tries in its notes."""
    delay = WRITE_BACKOFF_S
    for attempt in range(1, attempts + 1):
        try:
            return write(*args)
        except Exception as exc:
            if attempt == attempts:
                exc.add_note(f"tried {attempts} times, backing off from {WRITE_BACKOFF_S} s")
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def write_all(fd: int, data: bytes) -> None:
    """``data`` appended to ``fd``: one system call, unless the disk is nearly full."""
    while data:
        data = data[os.write(fd, data) :]


def open_append(path: str) -> int:
    """``path`` opened for appending: every write lands at the end, whole."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _copy_file(src: str, dst: str) -> None:
    import shutil

    # copyfile uses the kernel's copy_file_range/sendfile: no Python-level buffering.
    shutil.copyfile(src, dst)


def _walk_files(root: str) -> Iterator[str]:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            yield os.path.relpath(os.path.join(dirpath, name), root)


def _syncfs(fd: int) -> None:
    """Every file of the filesystem holding ``fd`` on the disk: Linux's ``syncfs``, one
    flush for all of them (a run of ``fsync`` calls would each wait for the disk);
    elsewhere ``sync``, every filesystem."""
    import ctypes

    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is None or syncfs(fd) != 0:
        os.sync()


def fsync_dir(path: str) -> None:
    """Put the names in the local directory ``path`` on the disk (after a create or a
    rename in it)."""
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
