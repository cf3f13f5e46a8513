"""Where a rank is, for ``lockstep status``: a small shared page each worker writes.

A worker keeps its phase (training, waiting for data, in ``report()`` for step k,
persisting a checkpoint), since when, and what it concerns (the dataset and its slowest
stage, the checkpoint's size and where it goes) in a page of memory with a descriptor
but no name (``memfd_create``), mapped into its memory. Writing a phase is a copy of a
few bytes, no system call; the driver maps the same page (``/proc/PID/fd/N``, readable
by the run's own user only) and reads it when ``lockstep status`` asks. Nothing is left
behind: the page has no name.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from typing import IO

from lockstep._internal.execution.worker.unnamed import unnamed_file

# The phases a worker writes; the driver adds what only it knows (dead, restarting, a
# collective seen in the stack).
STARTING, TRAINING, DATA_WAIT, REPORT, CHECKPOINT = range(5)
NAMES = ("starting", "training", "data_wait", "report", "checkpoint")

_HEAD = struct.Struct("<iid")  # phase, step, since (time.monotonic())
_SIZE = struct.Struct("<d")  # the checkpoint's bytes, after the head
_DATA = struct.Struct("<d")  # seconds waited for data since the last report, after that
_DATA_AT = _HEAD.size + _SIZE.size
_TEXT = 120  # bytes for each of the two texts
_WHAT_AT = _DATA_AT + _DATA.size
_DETAIL_AT = _WHAT_AT + _TEXT
PAGE_SIZE = _DETAIL_AT + _TEXT


@dataclass(frozen=True)
class Phase:
    """What a rank's page says.

    Attributes:
        phase: One of :data:`NAMES`.
        step: The report (within the attempt) it is in, for ``report`` and ``checkpoint``.
        since: When it entered the phase (``time.monotonic()`` of its machine).
        size: The checkpoint's size in bytes, while persisting one.
        what: The dataset it waits for, or where the checkpoint is written (relative to
            the run directory).
        detail: The dataset's slowest stage so far.
        data_s: The seconds it waited for data since its last report (which the driver
            counts when the attempt ends before the next).
    """

    phase: str
    step: int
    since: float
    size: float = 0.0
    what: str = ""
    detail: str = ""
    data_s: float = 0.0


class PhasePage:
    """The worker's side: writes its phase into the shared page."""

    def __init__(self, page: mmap.mmap, file: IO[bytes]) -> None:
        self._page = page
        self._file = file  # open while the worker runs: its descriptor finds the page
        self.fd = file.fileno()
        self._what = ""
        self._detail = ""
        self.set(STARTING)

    @classmethod
    def create(cls) -> PhasePage | None:
        """A page of memory with a descriptor and no name (``memfd_create``: never written
        back to a disk, which would stall a write to the page while it is; an unlinked
        temporary file where there is no such call); None where none can be made."""
        try:
            file = unnamed_file("lockstep-phase")
            os.ftruncate(file.fileno(), PAGE_SIZE)
            page = mmap.mmap(file.fileno(), PAGE_SIZE)
        except OSError:
            return None
        return cls(page, file)

    def set(self, phase: int, step: int = -1) -> None:
        _HEAD.pack_into(self._page, 0, phase, step, time.monotonic())

    def set_with(
        self, phase: int, what: str, detail: str = "", step: int = -1, size: float = 0.0
    ) -> None:
        """Enter ``phase`` about ``what``; the texts are written only when they change."""
        if what != self._what:
            self._what = what
            self._page[_WHAT_AT : _WHAT_AT + _TEXT] = _text(what)
        if detail != self._detail:
            self._detail = detail
            self._page[_DETAIL_AT : _DETAIL_AT + _TEXT] = _text(detail)
        _SIZE.pack_into(self._page, _HEAD.size, size)
        self.set(phase, step)

    def waited_for_data(self, seconds: float) -> None:
        """Since the last report, the rank waited ``seconds`` for data (0 after one)."""
        _DATA.pack_into(self._page, _DATA_AT, seconds)

    def close(self) -> None:
        """The worker is done (one in the driver's process closes its page)."""
        self._page.close()
        self._file.close()


def _text(value: str) -> bytes:
    return value.encode("utf-8", "replace")[:_TEXT].ljust(_TEXT, b"\0")


def read(page: bytes | mmap.mmap) -> Phase:
    """What a page says."""
    phase, step, since = _HEAD.unpack_from(page, 0)
    (size,) = _SIZE.unpack_from(page, _HEAD.size)
    (data_s,) = _DATA.unpack_from(page, _DATA_AT)
    what = bytes(page[_WHAT_AT : _WHAT_AT + _TEXT]).rstrip(b"\0").decode("utf-8", "replace")
    detail = bytes(page[_DETAIL_AT : _DETAIL_AT + _TEXT]).rstrip(b"\0")
    name = NAMES[phase] if 0 <= phase < len(NAMES) else "training"
    return Phase(name, step, since, size, what, detail.decode("utf-8", "replace"), data_s)


def open_page(pid: int, fd: int) -> mmap.mmap | None:
    """The page of the worker ``pid`` whose page file is its descriptor ``fd``, mapped
    read-only; None when it cannot be read (the worker is gone)."""
    try:
        with open(f"/proc/{pid}/fd/{fd}", "rb") as file:
            return mmap.mmap(file.fileno(), PAGE_SIZE, prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
