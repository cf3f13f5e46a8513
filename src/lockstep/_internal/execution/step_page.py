"""The workers of a local group end their steps among themselves: the step page.

A step of ``report()`` without a checkpoint needs nothing of the driver but its row in
result.json, durable before any worker returns. Going through the driver costs every
step a message to it from each worker, the driver's wake-up, its bookkeeping and its
release, all on the workers' way (about twice the bare barrier's time). Instead the
workers of a local process group share a page of memory and a pipe of tokens, world
size less one of them for each step: an arriving rank takes one (a one-byte read, which
the kernel gives to one reader only), and the one that finds none is the last to arrive
(no lock all ranks queue for: 128 workers arriving at once would convoy behind one that
was preempted holding it). The last puts the next step's tokens in, appends the step's
row to result.json (one ``os.write``, ``O_APPEND``: the line is whole, and in the
kernel's hands before anyone returns, as the driver's) from what rank 0 left in the page
(its metrics, its time stamp), and signals the release line. The workers' reports still
go to the driver, after they arrived: it takes the row from result.json
(:meth:`StepPage.released`), and keeps its ledger, hang watch and report counts as
before, off the workers' way.

The driver keeps the steps it must see first: any rank's checkpoint, metrics rank 0
cannot put in the page (too long, not JSON), and every step once it holds the page
(:meth:`StepPage.hold`: a run whose listeners decide at each step, rows that must be
fsync'd, a preemption notice to deliver at a known step). The last rank to arrive at
such a step leaves it to the driver, which records it and releases the line as before.
The last rank decides under a lock it shares with the driver alone (a semaphore in the
page), so that a hold lands between two decisions.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import time
from collections.abc import Callable, Mapping
from errno import EINTR, ETIMEDOUT
from typing import Any

from lockstep._core import flags

# The header: 8-byte fields, each read and written whole through a memoryview (one
# aligned load or store: the driver reads ``released`` without the lock, and struct's
# pack_into zeroes what it packs before writing it). How many steps are released, what
# makes a row's training_iteration and time_total_s, rank 0's time.time() of the step,
# the flags, whether the step needs the driver, the lengths of the metrics and the path.
_RELEASED, _ITERATION_BASE, _TIME_BASE, _TIMESTAMP, _FLAGS = range(5)
_NEEDS_DRIVER, _METRICS_LEN, _PATH_LEN = range(5, 8)
_HEADER_SIZE = 64
_LOCK_AT = 96  # the semaphore (32 bytes on Linux x86-64 and aarch64)
_PATH_AT = 128
_PATH_MAX = 4096
_METRICS_AT = _PATH_AT + _PATH_MAX
SIZE = 64 * 1024
METRICS_MAX = SIZE - _METRICS_AT

# How long the driver waits for the page's lock (a worker holds it for microseconds,
# unless its row's write is stuck or it died holding it).
DRIVER_WAIT_S = 10.0

_HOLD = 1  # the driver ends every step from now on
_ROWS = 2  # the path of result.json is set: the workers may append rows to it


class StepPage:
    """One attempt's page for ``world_size`` workers, over its descriptors ``fds`` (made
    by :meth:`create`, or handed to a worker): the page's memfd, then the token pipe's
    ends, reading (non-blocking) and writing."""

    def __init__(self, fds: list[int], world_size: int) -> None:
        self.fds = fds
        fd, self._tokens, self._refill = fds
        self._next_tokens = b"t" * (world_size - 1)
        self._world_size = world_size
        self._map = mmap.mmap(fd, SIZE)
        header = memoryview(self._map)[:_HEADER_SIZE]
        self._ints = header.cast("q")
        self._floats = header.cast("d")
        header.release()
        self._lock = _Lock(self._map)
        self._rows_fd: int | None = None  # a worker's result.json, opened at its first row

    @classmethod
    def create(cls, world_size: int) -> StepPage:
        fd = os.memfd_create("lockstep-steps", os.MFD_CLOEXEC)
        os.ftruncate(fd, SIZE)
        tokens, refill = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(tokens, False)
        page = cls([fd, tokens, refill], world_size)
        page._lock.init()
        os.write(refill, page._next_tokens)  # step 0's
        return page

    # -- the driver's side --------------------------------------------------------

    def share_rows(self, path: str, iteration_base: int, time_base: float) -> None:
        """Let the workers append the rows of their steps to result.json at ``path``:
        step k's ``training_iteration`` is ``iteration_base + k + 1``, its
        ``time_total_s`` ``time_base + time.monotonic()`` when the row is written."""
        encoded = os.fsencode(path)
        if len(encoded) > _PATH_MAX:
            return  # (the driver keeps ending the steps)
        ints = self._ints
        if not self._lock.acquire_within(DRIVER_WAIT_S):
            return  # a worker died holding it: the attempt ends (the driver ends its steps)
        try:
            self._map[_PATH_AT : _PATH_AT + len(encoded)] = encoded
            ints[_PATH_LEN] = len(encoded)
            ints[_ITERATION_BASE] = iteration_base
            self._floats[_TIME_BASE] = time_base
            ints[_FLAGS] |= _ROWS
        finally:
            self._lock.__exit__()

    def hold(self) -> int:
        """End every step from now on in the driver; returns the first of them (the
        steps before it are released, their rows written)."""
        ints = self._ints
        if not self._lock.acquire_within(DRIVER_WAIT_S):
            # A worker holds it that long (its row's write stuck, or it died): the step
            # under way may still be the workers'; the one after it is the driver's.
            ints[_FLAGS] |= _HOLD
            return int(ints[_RELEASED]) + 1
        try:
            ints[_FLAGS] |= _HOLD
            return int(ints[_RELEASED])
        finally:
            self._lock.__exit__()

    @property
    def held(self) -> bool:
        return bool(self._ints[_FLAGS] & _HOLD)

    @property
    def sharing(self) -> bool:
        """Whether the workers end the steps they can (the rows shared, no hold): then
        a worker that needs the driver at once rings its bell (see ``ReleaseLine``)."""
        return self._ints[_FLAGS] == _ROWS

    def released(self, step: int) -> bool:
        """Whether step ``step`` is released already: by the workers, when the driver has
        every rank's report of a step it has not released (each rank counts itself in
        before it sends its report, so the last one's decision is made by then)."""
        return int(self._ints[_RELEASED]) > step

    def set_released(self, step: int) -> None:
        """The driver released ``step`` (every rank waits on it: nobody counts)."""
        self._ints[_RELEASED] = step + 1

    # -- a worker's side ----------------------------------------------------------

    def arrive(
        self,
        step: int,
        rank: int,
        metrics: Mapping[str, Any],
        timestamp: float,
        *,
        needs_driver: bool,
        release: Callable[[int], None],
    ) -> bool:
        """Count this rank in at ``step``; the last rank to arrive writes the step's row
        and calls ``release(step)``, unless the driver ends the step. Returns True where
        this rank is the last and left the step to a driver that waits for the bell."""
        ints = self._ints
        if rank == 0:
            encoded = b""
            if not needs_driver:
                try:
                    encoded = json.dumps(metrics).encode()
                except (TypeError, ValueError):
                    needs_driver = True  # the driver says why the row cannot be written
                if len(encoded) > METRICS_MAX:
                    encoded, needs_driver = b"", True
            self._map[_METRICS_AT : _METRICS_AT + len(encoded)] = encoded
            ints[_METRICS_LEN] = len(encoded)
            self._floats[_TIMESTAMP] = timestamp
        if needs_driver:
            ints[_NEEDS_DRIVER] = 1
        # All before taking a token: the last rank, which takes none after every other
        # rank took its own (the pipe's lock orders them), sees what they left.
        if self._world_size > 1:
            try:
                os.read(self._tokens, 1)
                return False  # another rank is still to come
            except BlockingIOError:
                pass
        with self._lock:
            os.write(self._refill, self._next_tokens)  # before anyone can reach the next
            sharing = ints[_FLAGS] == _ROWS
            ended = sharing and not ints[_NEEDS_DRIVER] and self._write_row(step)
            ints[_NEEDS_DRIVER] = 0
            if ended:
                ints[_RELEASED] = step + 1
                release(step)
        if ended:
            flags.fault_point("step_ended")  # its row is written, its report not yet sent
        return sharing and not ended

    def _write_row(self, step: int) -> bool:
        """Append step ``step``'s row as the driver writes it (``RunRecord``): rank 0's
        metrics and the run's own columns. False where it cannot: the driver then writes
        it, and says why if it cannot either."""
        page, ints, floats = self._map, self._ints, self._floats
        if self._rows_fd is None:
            path = os.fsdecode(page[_PATH_AT : _PATH_AT + ints[_PATH_LEN]])
            try:
                self._rows_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except OSError:
                return False
        own = json.dumps(
            {
                "training_iteration": ints[_ITERATION_BASE] + step + 1,
                "timestamp": floats[_TIMESTAMP],
                "time_total_s": floats[_TIME_BASE] + time.monotonic(),
                "checkpoint_dir_name": None,
            }
        ).encode()
        metrics = page[_METRICS_AT : _METRICS_AT + ints[_METRICS_LEN]]
        line = metrics[:-1] + b", " + own[1:] if len(metrics) > 2 else own
        try:
            return os.write(self._rows_fd, line + b"\n") == len(line) + 1
        except OSError:
            return False

    def close(self) -> None:
        """Unmap the page (its descriptors are the owner's to close)."""
        self._ints.release()
        self._floats.release()
        self._lock.release()
        self._map.close()
        if self._rows_fd is not None:
            os.close(self._rows_fd)
            self._rows_fd = None


class _Lock:
    """The page's lock: a process-shared POSIX semaphore in the page (``sem_init``), taken
    and given by libc's futex calls. A waiter sleeps until the holder gives it to it alone:
    a record lock (``fcntl``) wakes every waiter at each unlock, which with 128 workers
    arriving at once cost more than the step. A worker that dies holding it leaves it
    taken: the attempt ends then anyway (its driver stops the group), and the driver's own
    waits for it are bounded (:meth:`acquire_within`)."""

    __slots__ = ("_address", "_anchor")

    def __init__(self, page: mmap.mmap) -> None:
        self._anchor = ctypes.c_char.from_buffer(page, _LOCK_AT)  # (holds the page mapped)
        self._address = ctypes.addressof(self._anchor)

    def init(self) -> None:
        if _libc.sem_init(self._address, 1, 1) != 0:
            raise OSError(ctypes.get_errno(), "sem_init failed")

    def __enter__(self) -> None:
        while _libc.sem_wait(self._address) != 0:
            errno = ctypes.get_errno()
            if errno != EINTR:  # (a signal: its handler runs as this loop goes on)
                raise OSError(errno, "sem_wait failed")

    def __exit__(self, *exc: object) -> None:
        _libc.sem_post(self._address)

    def acquire_within(self, seconds: float) -> bool:
        """Take the lock, waiting at most ``seconds``; False if it stayed taken."""
        deadline = time.time() + seconds
        spec = _Timespec(int(deadline), int((deadline % 1) * 1e9))
        while _libc.sem_timedwait(self._address, ctypes.byref(spec)) != 0:
            errno = ctypes.get_errno()
            if errno == ETIMEDOUT:
                return False
            if errno != EINTR:
                raise OSError(errno, "sem_timedwait failed")
        return True

    def release(self) -> None:
        del self._anchor


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)
for _name in ("sem_init", "sem_wait", "sem_post", "sem_timedwait"):
    getattr(_libc, _name).argtypes = [ctypes.c_void_p] + (
        [ctypes.c_int, ctypes.c_uint]
        if _name == "sem_init"
        else [ctypes.c_void_p]
        if _name == "sem_timedwait"
        else []
    )
