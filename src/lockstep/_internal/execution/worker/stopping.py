"""How a stop (SIGTERM) ends a worker's code: by an exception, raised where it cuts no
clean-up short.

An exception raised by a signal handler lands wherever the main thread is: between a
``tempfile.TemporaryDirectory()``'s mkdtemp and its ``with``, or inside the ``rmtree`` of
its exit, and the directory stays behind. So the stop is raised at once only where the
worker waits for the driver (``report()``, a collective); elsewhere it is noted, and
raised at the worker's next call into lockstep, or after ``UNWIND_AFTER_S`` of code that
makes none. It is never raised while an exception is already unwinding the code (the
function failed, or an earlier stop): that one ends the worker anyway. The grace's SIGKILL
still bounds it all.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# Long enough that code between two calls into lockstep reaches the next one first, short
# against the grace (flags.WORKER_SHUTDOWN_GRACE_S) the worker has to end.
UNWIND_AFTER_S = 0.1


class WorkerStopped(BaseException):
    """The driver asked this worker to stop (SIGTERM); raised in its main thread."""


_waiting = 0  # the main thread waits for the driver (nested waits count)
_requested_at: float | None = None


def on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM's handler in a worker process (in its main thread, as Python runs them)."""
    global _requested_at
    now = time.monotonic()
    first = _requested_at is None
    if first:
        _requested_at = now
    if _waiting:
        raise WorkerStopped()
    if first:
        # Code that makes no call into lockstep is unwound after a moment: the signal again.
        timer = threading.Timer(UNWIND_AFTER_S, os.kill, (os.getpid(), signal.SIGTERM))
        timer.daemon = True
        timer.start()
        return
    assert _requested_at is not None
    # (the timer's signal: a clock's tick early is still the timer's)
    if sys.exc_info()[1] is None and now - _requested_at >= UNWIND_AFTER_S / 2:
        raise WorkerStopped()


def raise_if_requested() -> None:
    """At a call into lockstep: a stop noted meanwhile ends the worker's code here."""
    if _requested_at is not None:
        raise WorkerStopped()


def begin_wait() -> bool:
    """The calling thread waits for the driver from now: in the main thread, a stop may
    end the wait at once. Returns whether :func:`end_wait` is due."""
    global _waiting
    if threading.current_thread() is not threading.main_thread():
        return False
    raise_if_requested()
    _waiting += 1
    return True


def end_wait() -> None:
    global _waiting
    _waiting -= 1


def reset() -> None:
    """Forget a stop (a Ray actor's process runs one worker after another)."""
    global _requested_at
    _requested_at = None
