"""Ctrl-C during a run: the first press stops it gracefully, the second at once.

The graceful stop is the controller's ``request_stop``, which a preemption notice can call
as well: the workers are stopped, the committed checkpoints stay, the run can be continued.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

CTRL_C = "Ctrl-C"


@contextlib.contextmanager
def stop_on_sigint(request_stop: Callable[[str], None]) -> Iterator[None]:
    """While inside, the first SIGINT calls ``request_stop("Ctrl-C")`` and the second
    raises KeyboardInterrupt. Outside the main thread (signals go there only), or when the
    program ignores SIGINT, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield
        return
    presses = 0

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            request_stop(CTRL_C)
            return
        signal.signal(signal.SIGINT, previous)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
