"""Pickling a worker's start with its in-memory tables handed over in shared memory.

A shard of an in-memory dataset (``from_pandas``, ``from_items``) would otherwise travel in
the pickle: copied into it, through the socket, and out of it again. Instead the tables of
one start are written once, in Arrow's stream format, into an anonymous shared memory file
(``memfd_create``); the pickle holds its ``/proc/<driver pid>/fd/<fd>`` path and each
table's place in it, and the worker maps the file, so its tables are read without a copy.

The file has no name in ``/dev/shm``: it lives while the driver holds its descriptor or a
worker maps it, so nothing is left behind whatever ends the driver (SIGTERM, SIGKILL, the
OOM killer) or the workers. Where there is no ``memfd_create`` (not Linux) the rows go in
the pickle as before. Local workers only: a worker on another machine could not open it.
"""

from __future__ import annotations

import io
import os
import sys
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from lockstep.data._sources import TableSource

_ALIGNMENT = 64  # each table starts at a multiple of this, as Arrow aligns its buffers
_NAME = "lockstep-table"


def dumps(obj: Any, written: list[str]) -> bytes:
    """``obj`` pickled as ``Connection.send`` would, its in-memory tables put in shared memory.

    The shared memory file's path is appended to ``written``: the driver keeps it open until
    :func:`remove`, so that the worker can open it meanwhile.
    """
    buffer = io.BytesIO()
    # Only a run whose datasets loaded lockstep.data (and pyarrow) can hold a table; the
    # others never import them.
    sources = sys.modules.get("lockstep.data._sources")
    pickler = _Pickler(buffer, getattr(sources, "TableSource", None))
    try:
        pickler.dump(obj)
    finally:
        path = pickler.finish()
        if path is not None:
            written.append(path)
    return buffer.getvalue()


def remove(written: list[str]) -> None:
    """Close the driver's shared memory files; the memory goes when no worker maps it."""
    for path in written:
        try:
            os.close(int(path.rsplit("/", 1)[1]))
        except OSError:
            pass
    written.clear()


class _Pickler(ForkingPickler):
    def __init__(self, file: io.BytesIO, table_type: type[TableSource] | None) -> None:
        super().__init__(file)
        self._table_type = table_type
        self._fd: int | None = None
        self._sink: Any = None

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is self._table_type and hasattr(os, "memfd_create"):
            place = self._write(obj.table)
            if place is not None:
                return _open, place
        return NotImplemented  # pickled as usual, the rows in the pickle

    def _write(self, table: pa.Table) -> tuple[str, int, int] | None:
        """Append ``table`` to this start's shared memory file: ``(path, offset, length)``."""
        import pyarrow as pa

        try:
            if self._fd is None:
                self._fd = os.memfd_create(_NAME, os.MFD_CLOEXEC)
                self._sink = pa.OSFile(f"/proc/self/fd/{self._fd}", "wb")
            offset = self._sink.tell()
            # the stream format writes only a sliced table's own rows (pickling a slice
            # would carry its whole parent's buffers)
            with pa.ipc.new_stream(self._sink, table.schema) as writer:
                writer.write_table(table)
            length = self._sink.tell() - offset
            self._sink.write(b"\0" * (-self._sink.tell() % _ALIGNMENT))
        except OSError:
            return None  # no memory for it: the rows go in the pickle
        return f"/proc/{os.getpid()}/fd/{self._fd}", offset, length

    def finish(self) -> str | None:
        """The file's path once every table is written, or None when none was."""
        if self._sink is not None:
            self._sink.close()
        return None if self._fd is None else f"/proc/{os.getpid()}/fd/{self._fd}"


# In the worker: the mapped file of each path (one per start), shared by its tables.
_mapped: dict[tuple[str, int], Any] = {}


def _open(path: str, offset: int, length: int) -> TableSource:
    """In the worker: the table at ``offset`` of ``path``, mapped, not copied."""
    import pyarrow as pa

    from lockstep.data._sources import TableSource

    key = (path, os.stat(path).st_ino)
    if key not in _mapped:
        _mapped.clear()  # a new start: the tables of an earlier one keep their own map
        with pa.memory_map(path) as mapped:
            _mapped[key] = mapped.read_buffer()
    piece = _mapped[key].slice(offset, length)
    return TableSource(pa.ipc.open_stream(piece).read_all())  # the buffers keep the map
