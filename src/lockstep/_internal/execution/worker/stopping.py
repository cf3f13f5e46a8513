"""How a worker process takes a stop (SIGTERM): it unwinds the user's code, so that its
``with`` blocks and ``finally`` clauses clean up, but it never cuts a clean-up short.

A stop is taken once, and not while a clean-up runs: while an exception already unwinds
the code (the function failed, or the stop was taken), or while a ``with`` block exits (a
``TemporaryDirectory`` removing its files, say). There it waits: a thread of the worker's
own signals the process again every :data:`STOP_AGAIN_S` until the stop is taken, so it
lands at the first point past the clean-up. The grace's SIGKILL bounds it all. A stop that
is taken at once (the common case) is the only signal the worker gets.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half (no stubs)
import _thread
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

# How often a worker whose stop waits for a clean-up is signalled again (the stop lands at
# most this long past it).
STOP_AGAIN_S = 0.1

_EXITS = frozenset({"__exit__", "__aexit__"})


class WorkerStopped(BaseException):
    """The driver asked this worker to stop (SIGTERM); raised in its main thread."""


class _Run:
    """The stop of the running function: whether it was taken, whether the function is
    over (no stop is taken, and none is asked for again, past that)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken = False
        self.over = False


_run = _Run()
_waiting_fd: int | None = None  # written by the handler when a stop waits (see install())


def install(handler: Callable[[int, FrameType | None], None] | None = None) -> Any:
    """Take SIGTERM as a stop in this process (with :func:`stop_handler`, or ``handler``,
    which calls it), and start the thread that signals it again while a stop waits for a
    clean-up (once per process: a Ray actor runs one function after another). Returns the
    handler it replaced."""
    global _waiting_fd
    previous = signal.signal(signal.SIGTERM, handler or stop_handler)
    if _waiting_fd is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the handler never blocks on it
        _waiting_fd = write_fd
        # it takes no signal (it inherits this mask): each goes to the thread meant for it
        # (the stack signal to its own thread, a stop to the main thread)
        # (_signal's own calls: signal's wrappers make an enum of each of the 64 signals,
        # a third of a forked worker's Python before its function starts)
        mask = _signal.pthread_sigmask(signal.SIG_BLOCK, _signal.valid_signals())
        try:
            # not a threading.Thread: the first one a forked worker starts costs 0.5 ms
            # more of its start (threading's own objects copied), and nothing joins it
            _thread.start_new_thread(_again, (read_fd,))
        finally:
            _signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return previous


def begin_run() -> None:
    """A function starts in this process."""
    global _run
    _run = _Run()


def end_run() -> None:
    """The function is over: no stop is taken from now on, and none is asked for again."""
    with _run.lock:
        _run.over = True


def stop_handler(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler in a worker: raise :class:`WorkerStopped` where that cuts no
    clean-up short (see the module's docstring); elsewhere ask for the signal again."""
    run = _run
    if run.taken or run.over:
        return
    if sys.exc_info()[1] is not None or _in_a_with_exit(frame):
        if _waiting_fd is not None:
            try:
                os.write(_waiting_fd, b"\0")
            except BlockingIOError:
                pass  # asked already, many times
        return
    run.taken = True
    raise WorkerStopped()


def _in_a_with_exit(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name in _EXITS:
            return True
        frame = frame.f_back
    return False


def _again(read_fd: int) -> None:
    """The thread that signals a waiting stop again, every :data:`STOP_AGAIN_S` until it
    is taken or the function is over (from here: a signal handler takes no lock)."""
    while True:
        os.read(read_fd, 4096)  # a stop waits
        while True:
            time.sleep(STOP_AGAIN_S)
            run = _run
            with run.lock:  # never after end_run(): a Ray actor restores Ray's handler then
                if run.taken or run.over:
                    break
                os.kill(os.getpid(), signal.SIGTERM)
        os.set_blocking(read_fd, False)  # what the handler wrote meanwhile is answered
        try:
            while os.read(read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        os.set_blocking(read_fd, True)
