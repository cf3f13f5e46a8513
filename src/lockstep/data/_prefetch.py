"""Producing items on a background thread, so the training step does not wait on I/O.

Reading parquet, decoding and converting to tensors release the GIL for most of their time,
so a producer thread runs them while the training loop computes. The thread is always
stopped and joined: at the end of the stream, on an error, when the consumer breaks out of
its loop, and when the iterator is garbage-collected (``close()`` of the generator).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from lockstep._core.data_wait import DataWaitSink
    from lockstep.data._stats import StageTimes

T = TypeVar("T")

THREAD_NAME = "lockstep-prefetch"
_POLL_S = 0.05


class _Done:
    """The end of the stream."""


class _Failed:
    """The producer raised; the consumer re-raises the same exception."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class WaitTimer:
    """Seconds the consumer spent waiting for the producer; each wait is also told to
    ``sink`` (a training function's, for the run's time ledger) as a wait for ``source``,
    whose slowest stage ``stages`` knows."""

    def __init__(
        self,
        sink: DataWaitSink | None = None,
        source: object = None,
        stages: StageTimes | None = None,
    ) -> None:
        self.wait_s = 0.0
        self._sink = sink
        self._source = source
        self._stages = stages

    def begin(self) -> float:
        """A wait begins; returns when."""
        if self._sink is not None:
            stage = self._stages.slowest() if self._stages is not None else None
            self._sink.data_wait_begin(self._source, stage)
        return time.perf_counter()

    def end(self, started: float) -> None:
        """The wait that began at ``started`` is over."""
        waited = time.perf_counter() - started
        self.wait_s += waited
        if self._sink is not None:
            self._sink.data_wait_end(self._source, waited)


def prefetch(
    produce: Callable[[], Iterator[T]], depth: int, timer: WaitTimer | None = None
) -> Iterator[T]:
    """Iterate ``produce()`` with up to ``depth`` items made ahead on a thread.

    ``depth=0`` iterates in the caller's thread. Nothing starts until the first item is
    asked for.
    """
    if depth <= 0:
        yield from _timed(produce(), timer)
        return
    items: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    thread = threading.Thread(
        target=_produce, args=(produce, items, stop), name=THREAD_NAME, daemon=True
    )
    thread.start()
    try:
        while True:
            started = timer.begin() if timer is not None else 0.0
            item = items.get()
            if timer is not None:
                timer.end(started)
            if isinstance(item, _Done):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        _drain(items, thread)


def _timed(items: Iterator[T], timer: WaitTimer | None) -> Iterator[T]:
    while True:
        started = timer.begin() if timer is not None else 0.0
        try:
            item = next(items)
        except StopIteration:
            return
        finally:
            if timer is not None:
                timer.end(started)
        yield item


def _produce(
    produce: Callable[[], Iterator[Any]], items: queue.Queue[Any], stop: threading.Event
) -> None:
    try:
        stream = produce()
        try:
            for item in stream:
                if not _put(items, item, stop):
                    return
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        _put(items, _Done(), stop)
    except BaseException as error:  # handed to the consumer, who re-raises it
        _put(items, _Failed(error), stop)


def _put(items: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Put ``item``, waiting for room; False once the consumer has stopped listening."""
    while not stop.is_set():
        try:
            items.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _drain(items: queue.Queue[Any], thread: threading.Thread) -> None:
    """Empty the queue until the producer notices the stop and ends, then join it."""
    while thread.is_alive():
        try:
            items.get(timeout=_POLL_S)
        except queue.Empty:
            pass
    thread.join()
