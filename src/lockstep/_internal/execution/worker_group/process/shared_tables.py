"""Pickling a worker's start with its in-memory tables handed over in shared memory.

A shard of an in-memory dataset (``from_pandas``, ``from_items``) would otherwise travel in
the pickle: copied into it, through the socket, and out of it again. Instead each table is
written once, in Arrow's file format, to a file in shared memory (``/dev/shm``); the worker
maps the file, so its table is read without a copy, and removes the name at once (the
mapping keeps the memory until the table is freed). Without room in shared memory the rows
go in the pickle as before. Local workers only: a worker on another machine could not open
the file.
"""

from __future__ import annotations

import io
import os
import uuid
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pyarrow as pa

from lockstep.data._sources import TableSource

_SHM = "/dev/shm"


def dumps(obj: Any, written: list[str]) -> bytes:
    """``obj`` pickled as ``Connection.send`` would, its in-memory tables put in files.

    The files' paths are appended to ``written``: the worker removes each one it opens,
    and :func:`remove` the rest (those of a worker that died first).
    """
    buffer = io.BytesIO()
    _Pickler(buffer, written).dump(obj)
    return buffer.getvalue()


def remove(written: list[str]) -> None:
    """Remove the files of ``written`` that no worker opened."""
    for path in written:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    written.clear()


class _Pickler(ForkingPickler):
    def __init__(self, file: io.BytesIO, written: list[str]) -> None:
        super().__init__(file)
        self._written = written

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is TableSource:
            path = _write(obj.table)
            if path is not None:
                self._written.append(path)
                return _open, (path,)
        return NotImplemented  # pickled as usual, the rows in the pickle


def _write(table: pa.Table) -> str | None:
    """The path of a new shared memory file holding ``table``; None when there is no
    shared memory, or too little of it (containers often have 64 MiB)."""
    if not os.access(_SHM, os.W_OK):
        return None
    free = os.statvfs(_SHM)
    if table.nbytes * 2 > free.f_bavail * free.f_frsize:
        return None
    path = os.path.join(_SHM, f"lockstep-table-{os.getpid()}-{uuid.uuid4().hex}.arrow")
    try:
        # Readable by this user only (the rows are the user's data, /dev/shm is shared by
        # every user of the machine); O_EXCL: never through a file someone put there.
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        # Arrow's file format writes only a sliced table's own rows (pickling a slice
        # would carry its whole parent's buffers).
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    except OSError:
        remove([path])  # filled up meanwhile
        return None
    return path


def _open(path: str) -> TableSource:
    """In the worker: the table of ``path``, mapped, not copied; the name is removed."""
    table = pa.ipc.open_file(pa.memory_map(path)).read_all()  # the buffers keep the map
    os.unlink(path)
    return TableSource(table)
