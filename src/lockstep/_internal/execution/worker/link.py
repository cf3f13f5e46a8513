"""A worker's link to the driver: what it sends, and the answers it waits for.

The answers are read in one of two ways:

- inline (a worker process, a worker in the driver's process): the thread that waits for
  an answer (``report()``, a collective) reads the connection itself, taking whatever
  else comes first (a commit, a preemption notice) on the way. ``report()`` is then one
  send and one receive in its own thread, as a bare round trip is: no hand-off to another
  thread, which costs as much as the round trip. A process whose driver dies is killed by
  the kernel (``PR_SET_PDEATHSIG``); a thread of the worker's watches the connection for
  a hang-up (:meth:`DriverLink.watch_hangup`: not for data, it never wakes on an
  answer) so that a worker whose driver closed the connection stops at once;
- by a reader thread (a Ray actor, where the driver also sends ``Stop`` while the
  function runs, and nothing kills the actor with the driver).

A local worker's ``report()`` ends with the driver's release line rather than a message
(``messages.ReleaseLine``): while a step is awaited, the reading thread watches the line
and the connection together, and takes what the connection holds before the release.
"""

from __future__ import annotations

import os
import pickle
import select
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from lockstep._internal.execution.messages import (
    FrameReader,
    Heartbeat,
    LineWaiter,
    Report,
    StepDone,
    send_frame,
    signal_step,
)
from lockstep._internal.execution.step_page import StepPage


class DriverLostError(RuntimeError):
    """The driver went away; the worker cannot go on."""


class Reply:
    """One awaited answer from the driver."""

    __slots__ = ("done", "error", "event", "value")

    def __init__(self, threaded: bool) -> None:
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.event = threading.Event() if threaded else None

    def set(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error, self.done = value, error, True
        if self.event is not None:
            self.event.set()


class DriverLink:
    """Sends to the driver and waits for its answers over ``conn``.

    Args:
        conn: The connection to the driver.
        dispatch: Called with every message the driver sends (in the thread that read it).
        on_lost: Called once the driver is gone while the worker still expects it.
        threaded: Read with a thread of its own rather than in the waiting thread.
        line: The descriptors of the driver's release line, which ends each step (read
            inline only), of its step page and of the driver's bell; without them, a
            StepDone message does.
        world_size: How many workers share the line.
    """

    def __init__(
        self,
        conn: Connection,
        dispatch: Callable[[object], None],
        *,
        on_lost: Callable[[], None] | None = None,
        threaded: bool = False,
        name: str = "lockstep-session",
        line: list[int] | None = None,
        world_size: int = 1,
    ) -> None:
        assert line is None or not threaded, "a release line is read inline"
        self._conn = conn
        self._awaited_step: int | None = None  # a report waiting for its step's release
        self._reader = FrameReader(conn)  # every read of the connection goes through it
        self._line = None if line is None else LineWaiter(line[:2], self._reader.fileno())
        self._line_fds = None if line is None else line[:2]
        self._page = None if line is None else StepPage(line[2:5], world_size)
        self._bell = None if line is None else line[5]
        self._dispatch = dispatch
        self._on_lost = on_lost
        self._threaded = threaded
        self._send_lock = threading.Lock()
        # inline: one thread at a time reads; the others wait to be told a message came
        self._turn = threading.Condition(threading.Lock())
        self._reading = False
        self._sleeping = 0  # threads waiting for the reader's word (most often none)
        self._lock = threading.Lock()
        self._replies: dict[tuple[str, int], Reply] = {}
        self._lost = False
        self.closing = False  # the function ended: a closed connection is expected
        self._name = name

    def start(self) -> None:
        """Start the reader thread of a link that reads with one."""
        if self._threaded:
            threading.Thread(target=self._read_loop, name=self._name, daemon=True).start()

    def send(self, message: object) -> None:
        """Send ``message``; on a line whose driver takes messages in batches, ring its
        bell after anything but a report or a heartbeat (a report that needs the driver
        at once rings it itself: :meth:`arrive`)."""
        # pickle's own dumps: multiprocessing's builds a pickler of its own per message
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            try:
                send_frame(self._conn, data)
            except OSError as exc:
                raise DriverLostError(f"the driver went away: {exc}") from exc
        if self._bell is not None and not isinstance(message, Report | Heartbeat):
            self.ring()

    def ring(self) -> None:
        """Ring the driver's bell, if it waits for it (see ``messages.ReleaseLine``)."""
        page, bell = self._page, self._bell
        try:
            if page is not None and bell is not None and page.sharing:
                os.eventfd_write(bell, 1)
        except (OSError, ValueError):
            pass  # (closed meanwhile: the worker ended)

    def arrive(self, report: Report) -> bool:
        """On a line with a step page, count this rank in at the report's step before
        sending the report (see ``step_page``): the last rank to arrive may end the step.
        True where this rank must :meth:`ring` once it sent the report."""
        if self._page is None:
            return False
        fds = self._line_fds
        assert fds is not None
        return self._page.arrive(
            report.step,
            report.rank,
            report.metrics,
            report.time,
            needs_driver=report.checkpointed,
            release=lambda step: signal_step(fds, step),
        )

    @property
    def on_line(self) -> bool:
        """Whether the driver's release line, not a message, ends each step."""
        return self._line is not None

    def expect(self, kind: str, key: int) -> Reply:
        """Be ready for the answer ``(kind, key)`` (before sending what it answers)."""
        reply = Reply(self._threaded)
        with self._lock:
            if self._lost:
                raise DriverLostError("the driver went away")
            self._replies[(kind, key)] = reply
            if kind == "step":
                self._awaited_step = key
        return reply

    def expecting(self, kind: str, key: int) -> bool:
        with self._lock:
            return (kind, key) in self._replies

    def resolve(self, kind: str, key: int, value: Any = None) -> None:
        """The answer ``(kind, key)`` came (from :attr:`dispatch`)."""
        with self._lock:
            reply = self._replies.pop((kind, key), None)
            if kind == "step" and key == self._awaited_step:
                self._awaited_step = None
        if reply is not None:
            reply.set(value)

    def wait(self, reply: Reply) -> Any:
        """The answer's value, once it came; raises DriverLostError if it never will."""
        if reply.event is not None:
            reply.event.wait()
        else:
            with self._turn:
                while not reply.done and not self._lost:
                    if self._reading:
                        self._sleeping += 1  # another thread reads; it wakes us per message
                        try:
                            self._turn.wait()
                        finally:
                            self._sleeping -= 1
                    else:
                        self._read_in_turn()
        if reply.error is not None:
            raise reply.error
        if not reply.done:
            raise DriverLostError("the driver went away")
        return reply.value

    def take_arrived(self) -> None:
        """Take what the driver sent so far without waiting (inline: a commit that came
        while the function ran), unless another thread is reading."""
        if self._threaded:
            return
        with self._turn:
            if self._reading or self._lost or self.closing:
                return
            self._take_available()

    def _take_available(self) -> bool:
        """Dispatch the messages that have arrived; False once the driver is gone."""
        try:
            messages = self._reader.available()
        except (EOFError, OSError):
            self._driver_lost()
            return False
        for message in messages:
            self._dispatch(message)
        return True

    def _read_in_turn(self) -> None:
        """Read one message, outside the turn's lock (held on entry and on return)."""
        self._reading = True
        self._turn.release()
        try:
            self._read_one()
        finally:
            self._turn.acquire()
            self._reading = False
            if self._sleeping:
                self._turn.notify_all()

    def _read_one(self) -> None:
        step, line = self._awaited_step, self._line
        if line is not None and step is not None and not self._reader.buffered():
            self._read_until_released(line, step)
            return
        try:
            message = self._reader.next()
        except (EOFError, OSError):
            self._driver_lost()
            return
        self._dispatch(message)

    def _read_until_released(self, line: LineWaiter, step: int) -> None:
        """Wait for the line's release of ``step`` or a message; take the messages first
        (the driver wrote them before it signalled the line)."""
        released, message = line.wait(step)
        if message and not self._take_available():
            return
        if released:
            self._dispatch(StepDone(step))

    def close(self) -> None:
        """The function ended: nothing more is read, and a closed connection is expected."""
        self.closing = True
        with self._turn:
            if not self._threaded:
                self._reader.close()
            if self._line is not None:
                self._line.close()
                self._line = None

    def end(self) -> None:
        """The last message is sent: close the step page and the bell (after
        :meth:`close`, which leaves them for that message's ring)."""
        with self._lock:
            page, bell, self._page, self._bell = self._page, self._bell, None, None
        if page is not None:
            page.close()
            for fd in page.fds:
                os.close(fd)
        if bell is not None:
            os.close(bell)

    def _read_loop(self) -> None:
        while not self._lost:
            self._read_one()

    def watch_hangup(self) -> None:
        """Wait for the driver's end of the connection to close (never for data): run by
        a worker process's thread of its own, where the function's thread reads inline."""
        poller = select.poll()
        poller.register(self._conn.fileno(), select.POLLRDHUP)
        while True:
            try:
                events = poller.poll()
            except OSError:
                return
            hung_up = select.POLLRDHUP | select.POLLHUP | select.POLLERR
            if any(flags & hung_up for _, flags in events):
                break
            if any(flags & select.POLLNVAL for _, flags in events):
                return  # closed here: the worker is done
        self._driver_lost()

    def _driver_lost(self) -> None:
        with self._lock:
            if self._lost:
                return
            self._lost = True
            pending = list(self._replies.values())
            self._replies.clear()
        for reply in pending:
            reply.set(error=DriverLostError("the driver went away"))
        if not self.closing and self._on_lost is not None:
            self._on_lost()
