"""Where a training function's waits for data are told: the run's time ledger counts them.

``lockstep.data`` iterators and ``prepare_data_loader`` loaders tell the sink installed
for the training function (its worker's session) when they begin and end waiting for a
batch; outside a training function there is none, and they tell nobody.
"""

from __future__ import annotations

import threading
from typing import Protocol


class DataWaitSink(Protocol):
    """Takes the waits of a training function's data iterators."""

    def data_wait_begin(self, source: object, stage: str | None) -> None:
        """The function waits for a batch of ``source`` (an iterator, a loader);
        ``stage`` is its slowest stage so far, when known."""
        ...

    def data_wait_end(self, source: object, seconds: float) -> None:
        """The batch came after ``seconds``."""
        ...


_process_sink: DataWaitSink | None = None
_thread_sink = threading.local()


def install(sink: DataWaitSink | None, *, process_wide: bool) -> None:
    """Make ``sink`` the one of this process, or of this thread only."""
    global _process_sink
    if process_wide:
        _process_sink = sink
    else:
        _thread_sink.sink = sink


def current() -> DataWaitSink | None:
    """The sink of this thread or process, or None outside a training function."""
    return getattr(_thread_sink, "sink", None) or _process_sink
