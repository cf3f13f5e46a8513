"""The threads trials run in, each kept for the next trial once its own has ended.

A thread started per trial costs a start (the runner waits until the new thread runs)
and a join at its end; with thousands of short trials that is much of a trial's cost.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class TrialThreads:
    """Runs each job in a daemon thread of its own while it runs; an idle thread takes
    the next job, and a new thread is started only when none is idle.

    Daemon threads, as a trial's were: a function that never returns (stuck in user code
    when a second Ctrl-C ends the experiment) does not keep the process alive.

    Example:
        >>> threads = TrialThreads()
        >>> done = queue.SimpleQueue()
        >>> for n in range(3):
        ...     threads.run(lambda n=n: done.put(n))
        >>> sorted(done.get() for _ in range(3))
        [0, 1, 2]
        >>> threads.close()
    """

    def __init__(self, name: str = "lockstep-trial") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a job (or about to)

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a thread of its own (it must not raise: nobody would hear)."""
        with self._lock:
            reuse = self._idle > 0
            if reuse:
                self._idle -= 1
        if not reuse:
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._jobs.put(job)

    def close(self, *, wait: bool = True) -> None:
        """End every thread once its job is done; ``wait`` for them (not when a job may
        never end: a trial left running by an interrupted experiment ends with the
        process)."""
        for _ in self._threads:
            self._jobs.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
        self._threads = []

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            with self._lock:
                self._idle += 1
