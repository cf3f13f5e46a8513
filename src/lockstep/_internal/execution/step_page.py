"""The workers of a local group end their steps among themselves: the step page.

A step of ``report()`` without a checkpoint needs nothing of the driver but its row in
result.json, durable before any worker returns. Going through the driver costs every
step a message to it from each worker, the driver's wake-up, its bookkeeping and its
release, all on the workers' way (about twice the bare barrier's time). Instead the
workers of a local process group share one page of memory: each counts itself in under
a lock (``fcntl.lockf``: the kernel drops the lock of a worker that dies holding it),
rank 0 leaves its metrics there, and the last to arrive appends the step's row to
result.json (one ``os.write``, ``O_APPEND``: the line is whole, and in the kernel's
hands before anyone returns, as the driver's) and signals the release line. The
workers' reports still go to the driver, after they counted themselves in: it takes
the row from result.json (:meth:`StepPage.released`), and keeps its ledger, hang
watch and report counts as before, off the workers' way.

The driver keeps the steps it must see first: any rank's checkpoint, metrics rank 0
cannot put in the page (too long, not JSON), and every step once it holds the page
(:meth:`StepPage.hold`: a run whose listeners decide at each step, rows that must be
fsync'd, a preemption notice to deliver at a known step). The last rank to arrive at
such a step leaves it to the driver, which records it and releases the line as before.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

# The header: 8-byte fields, each read and written whole through a memoryview (one
# aligned load or store: the driver reads ``released`` without the lock, and struct's
# pack_into zeroes what it packs before writing it). The step being counted, how many
# ranks counted themselves in, how many steps are released, what makes a row's
# training_iteration and time_total_s, rank 0's time.time() of the step, the flags, whether
# the step needs the driver, and the lengths of the metrics and the path below.
_STEP, _ARRIVED, _RELEASED, _ITERATION_BASE, _TIME_BASE, _TIMESTAMP = range(6)
_FLAGS, _NEEDS_DRIVER, _METRICS_LEN, _PATH_LEN = range(6, 10)
_HEADER_SIZE = 80
_PATH_AT = 128
_PATH_MAX = 4096
_METRICS_AT = _PATH_AT + _PATH_MAX
SIZE = 64 * 1024
METRICS_MAX = SIZE - _METRICS_AT

_HOLD = 1  # the driver ends every step from now on
_ROWS = 2  # the path of result.json is set: the workers may append rows to it


class StepPage:
    """One attempt's page, over the descriptor ``fd`` (made by :meth:`create`, or handed
    to a worker), for ``world_size`` workers."""

    def __init__(self, fd: int, world_size: int) -> None:
        self.fd = fd
        self._world_size = world_size
        self._map = mmap.mmap(fd, SIZE)
        header = memoryview(self._map)[:_HEADER_SIZE]
        self._ints = header.cast("q")
        self._floats = header.cast("d")
        header.release()
        self._rows_fd: int | None = None  # a worker's result.json, opened at its first row

    @classmethod
    def create(cls, world_size: int) -> StepPage:
        fd = os.memfd_create("lockstep-steps", os.MFD_CLOEXEC)
        os.ftruncate(fd, SIZE)
        return cls(fd, world_size)

    # -- the driver's side --------------------------------------------------------

    def share_rows(self, path: str, iteration_base: int, time_base: float) -> None:
        """Let the workers append the rows of their steps to result.json at ``path``:
        step k's ``training_iteration`` is ``iteration_base + k + 1``, its
        ``time_total_s`` ``time_base + time.monotonic()`` when the row is written."""
        encoded = os.fsencode(path)
        if len(encoded) > _PATH_MAX:
            return  # (the driver keeps ending the steps)
        ints = self._ints
        with self._locked():
            self._map[_PATH_AT : _PATH_AT + len(encoded)] = encoded
            ints[_PATH_LEN] = len(encoded)
            ints[_ITERATION_BASE] = iteration_base
            self._floats[_TIME_BASE] = time_base
            ints[_FLAGS] |= _ROWS

    def hold(self) -> int:
        """End every step from now on in the driver; returns the first of them (the
        steps before it are released, their rows written)."""
        with self._locked():
            self._ints[_FLAGS] |= _HOLD
            return int(self._ints[_RELEASED])

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
        encoded = b""
        if rank == 0 and not needs_driver:
            try:
                encoded = json.dumps(metrics).encode()
            except (TypeError, ValueError):
                needs_driver = True  # the driver says why the row cannot be written
            if len(encoded) > METRICS_MAX:
                encoded, needs_driver = b"", True
        ints = self._ints
        with self._locked():
            arrived = ints[_ARRIVED] + 1
            if needs_driver:
                ints[_NEEDS_DRIVER] = 1
            if rank == 0:
                self._map[_METRICS_AT : _METRICS_AT + len(encoded)] = encoded
                ints[_METRICS_LEN] = len(encoded)
                self._floats[_TIMESTAMP] = timestamp
            if arrived < self._world_size:
                ints[_ARRIVED] = arrived
                return False
            sharing = ints[_FLAGS] == _ROWS
            ended = (
                sharing
                and not ints[_NEEDS_DRIVER]
                and ints[_STEP] == step
                and self._write_row(step)
            )
            if ended:
                ints[_RELEASED] = step + 1
                release(step)
            ints[_STEP], ints[_ARRIVED], ints[_NEEDS_DRIVER] = step + 1, 0, 0
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

    def _locked(self) -> _Lock:
        return _Lock(self.fd)

    def close(self) -> None:
        self._ints.release()
        self._floats.release()
        self._map.close()
        if self._rows_fd is not None:
            os.close(self._rows_fd)
            self._rows_fd = None


class _Lock:
    """The page's lock: a POSIX record lock, which the kernel drops with its process (a
    semaphore in the page would stay taken by a worker killed holding it)."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN)
