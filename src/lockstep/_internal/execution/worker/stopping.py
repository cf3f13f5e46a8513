"""How a worker process takes a stop (SIGTERM): it unwinds the user's code, so that its
``with`` blocks and ``finally`` clauses clean up, but it never cuts a clean-up short.

A stop is taken once, and not while a clean-up runs: while an exception already unwinds
the code (the function failed, or the stop was taken), or while a ``with`` block exits (a
``TemporaryDirectory`` removing its files, say). There it waits: whoever stops a worker
signals it again every :data:`STOP_AGAIN_S` until it has ended (the worker group, the
cluster agent, or the worker's own reader thread when the driver's ``Stop`` comes over the
connection), so the stop lands at the first point past the clean-up. The grace's SIGKILL
bounds it all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any

# How often a worker that has not ended is signalled again (a deferred stop waits this long
# at most past the clean-up it waited for).
STOP_AGAIN_S = 0.1

_EXITS = frozenset({"__exit__", "__aexit__"})


class WorkerStopped(BaseException):
    """The driver asked this worker to stop (SIGTERM); raised in its main thread."""


class _Run:
    """The stop of the running function: whether it was taken, whether the function is
    over (no stop is taken, and nobody signals again, past that)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken = False
        self.over = False


_run = _Run()


def begin_run() -> None:
    """A function starts in this process (a Ray actor runs one after another)."""
    global _run
    _run = _Run()


def end_run() -> None:
    """The function is over: no stop is taken from now on, and none is sent again."""
    with _run.lock:
        _run.over = True


def stop_handler(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler in a worker: raise :class:`WorkerStopped` where that cuts no
    clean-up short (see the module's docstring); elsewhere the next signal does."""
    run = _run
    if run.taken or run.over or sys.exc_info()[1] is not None or _in_a_with_exit(frame):
        return
    run.taken = True
    raise WorkerStopped()


def _in_a_with_exit(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name in _EXITS:
            return True
        frame = frame.f_back
    return False


def signal_until_stopped() -> None:
    """Signal this process SIGTERM now and every :data:`STOP_AGAIN_S` until its function
    is over (from a thread of its own: never from a signal handler)."""

    def again(run: _Run) -> None:
        while True:
            with run.lock:  # never after end_run(): a Ray actor restores Ray's handler then
                if run.over:
                    return
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(STOP_AGAIN_S)

    threading.Thread(target=again, args=(_run,), name="lockstep-stop", daemon=True).start()


def wait_stopping(procs: list[Any], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``procs`` (each with ``pid``, ``poll()`` and
    ``wait(timeout)``), told to stop already, to end; signal each one still running
    SIGTERM again every :data:`STOP_AGAIN_S` (itself only: what it started got the first)."""
    deadline = time.monotonic() + grace_s
    while True:
        running = [p for p in procs if p.poll() is None]
        now = time.monotonic()
        if not running or now >= deadline:
            return
        until = min(deadline, now + STOP_AGAIN_S)
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in running:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
