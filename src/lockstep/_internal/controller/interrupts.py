"""Ctrl-C or SIGTERM during a run: the first stops it gracefully, the second at once.

The graceful stop is the controller's ``request_preemption``: the workers are told
(``get_preemption_info()``), may report one more checkpoint, and are stopped; the
committed checkpoints stay and the run can be continued.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

CTRL_C = "Ctrl-C"
SIGTERM = "SIGTERM"


@contextlib.contextmanager
def stop_on_sigint(request_stop: Callable[[str], None]) -> Iterator[None]:
    """While inside, the first SIGINT calls ``request_stop("Ctrl-C")`` and the second
    raises KeyboardInterrupt. Outside the main thread (signals go there only), or when the
    program ignores SIGINT, nothing changes."""
    with _stop_on(signal.SIGINT, CTRL_C, request_stop):
        yield


@contextlib.contextmanager
def stop_on_sigterm(request_stop: Callable[[str], None]) -> Iterator[None]:
    """As :func:`stop_on_sigint`, for SIGTERM (a scheduler's, a spot reclaim's): the first
    calls ``request_stop("SIGTERM")``, the second raises KeyboardInterrupt."""
    with _stop_on(signal.SIGTERM, SIGTERM, request_stop):
        yield


@contextlib.contextmanager
def _stop_on(
    signum: signal.Signals, reason: str, request_stop: Callable[[str], None]
) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signum)
    if previous is signal.SIG_IGN:
        yield
        return
    presses = 0

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            request_stop(reason)
            return
        signal.signal(signum, previous)
        raise KeyboardInterrupt

    signal.signal(signum, on_signal)
    try:
        yield
    finally:
        signal.signal(signum, previous)
