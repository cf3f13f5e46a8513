"""Messages between the driver and its workers, one connection per worker.

Worker to driver: Report, Heartbeat, CollectiveRequest, Returned, Failed.
Driver to worker: WorkerStart (first), StepDone, CheckpointCommitted, CollectiveReply, Stop,
Preempted.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.errors import WorkerFailure
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.storage import StorageDir, write_all
from lockstep._internal.execution.step_page import StepPage

_M = TypeVar("_M")


def _pickled_by_fields(cls: type[_M]) -> type[_M]:
    """Pickle ``cls`` as its constructor and field values: a frozen slots dataclass's own
    pickling looks up its fields on every call, which costs more than a small message's
    trip (these are sent once per report)."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    values = attrgetter(*names)

    def __reduce__(self: _M) -> tuple[type[_M], tuple[Any, ...]]:
        got = values(self)
        return cls, got if len(names) > 1 else (got,)

    cls.__reduce__ = __reduce__  # type: ignore[method-assign,assignment]
    return cls


# The signal on which a worker writes its threads' stacks to its stack file: the
# handler is faulthandler's, in C, so it answers even while Python code cannot run (a
# rank blocked in a C collective).
STACK_SIGNAL = signal.SIGUSR1


class LocalFunction(NamedTuple):
    """The training function of a worker that runs in the driver's process (inline)."""

    fn: Callable[..., Any]
    config: dict[str, Any]
    takes_config: bool


@dataclass(frozen=True, slots=True)
class WorkerStart:
    """Everything one worker needs to run the training function.

    Attributes:
        context: The worker's ranks and run information.
        train_fn: ``cloudpickle.dumps((function, config, takes_config))``, or, for a
            worker in the driver's process, the :class:`LocalFunction` itself (never
            pickled: a function given large objects shares them).
        backend: The framework backend, set up before the function runs.
        run_dir: The run directory, where checkpoints are staged.
        checkpoint: The checkpoint to resume from, or None.
        staging_dir: Where this attempt stages checkpoints, named by the driver's run record:
            the part of step k from rank r goes to ``staging_dir_name(k, r, root=staging_dir)``.
        score_attribute: ``CheckpointConfig.checkpoint_score_attribute``, checked at report.
        datasets: This worker's dataset shards by name.
        sys_path: The driver's ``sys.path``, so that the function's modules import.
        cpus: The CPUs the training function's threads are bound to, or None.
        allowed_cpus: The CPUs the worker may run on, the driver's own when it started the
            worker (a local worker forked from a server made earlier would otherwise keep
            that server's), or None to keep what it has.
        reported: ``(dir_name, metrics)`` of each retained checkpoint, for
            ``get_all_reported_checkpoints()``.
        driver_host: The driver's host name: a worker on the same host hands ASYNC
            checkpoint uploads to the driver.
        release_line: The driver ends this worker's reports with its :class:`ReleaseLine`
            rather than with StepDone; the line's descriptors follow this message.
    """

    context: TrainContext
    train_fn: bytes | LocalFunction
    backend: Any
    run_dir: StorageDir
    checkpoint: Checkpoint | None
    staging_dir: str
    score_attribute: str | None
    datasets: dict[str, Any] = field(default_factory=dict)
    sys_path: tuple[str, ...] = ()
    cpus: tuple[int, ...] | None = None
    allowed_cpus: tuple[int, ...] | None = None
    reported: tuple[tuple[str, dict[str, Any]], ...] = ()
    driver_host: str = ""
    release_line: bool = False


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Heartbeat:
    """``train.heartbeat()``: the worker is alive and making progress inside a long step.

    ``started``: sent once, when the worker's backend is set up and its function starts,
    with ``stack_fd``, the descriptor of the file with no name where the worker writes its
    stacks on :data:`STACK_SIGNAL` (read as ``/proc/PID/fd/N``: it leaves nothing behind,
    even when the driver is killed), or None, and ``phase_fd``, that of the page where
    it keeps its phase (``worker/phases.py``), or None, and ``pid``, its process id on
    its own node (the driver knows no other of a worker on another node).
    """

    rank: int
    started: bool = False
    stack_fd: int | None = None
    phase_fd: int | None = None
    pid: int | None = None


# Not frozen: a frozen dataclass sets each field through object.__setattr__ (four times
# the cost of this one's 12), and a Report is made, and unpickled, for every report.
@_pickled_by_fields
@dataclass(slots=True)
class Report:
    """The ``step``-th report of one worker (0-based within the attempt).

    With a checkpoint, ``upload`` says how its files reach storage: ``"sync"`` (staged
    before the report), ``"async"`` (staged, or left at ``handoff`` for the driver to
    upload; committed without the worker waiting) or ``"none"`` (already in storage at
    ``persisted``). ``dir_name`` is the user's ``checkpoint_dir_name``.
    ``staged`` echoes where the worker staged its part of the step's checkpoint (the
    step's directory under ``WorkerStart.staging_dir``), so the driver commits exactly that.
    ``data_positions`` (with a checkpoint) is where the worker's dataset shards and data
    loaders are, ``{"datasets": {name: position}, "loaders": {key: position}}``, kept with
    the checkpoint so that a restart continues the data from there.
    ``timings`` is, for the run's time ledger, ``(user_s, data_s, persist_s, source)``:
    the seconds since the previous report returned (or the function started), those of
    them spent waiting for data (most of it for ``source``), and the seconds this report
    took to persist its checkpoint before it was sent.
    """

    rank: int
    step: int
    metrics: dict[str, Any]
    checkpointed: bool
    time: float
    upload: str = "sync"
    handoff: str | None = None
    persisted: Checkpoint | None = None
    dir_name: str | None = None
    staged: str | None = None
    data_positions: dict[str, Any] | None = None
    timings: tuple[float, float, float, str] | None = None


@dataclass(frozen=True, slots=True)
class CheckpointCommitted:
    """The checkpoint reported at ``step`` (as numbered in the Report) is committed.

    ``reported`` lists ``(dir_name, metrics)`` of every retained checkpoint after it.
    """

    step: int
    checkpoint: Checkpoint
    reported: tuple[tuple[str, dict[str, Any]], ...] = ()


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class StepDone:
    """Every worker reported ``step`` (as numbered in the Report), and its checkpoint, if
    any, is committed or on its way (ASYNC).

    ``report()`` is a barrier: each worker's call returns when this (or the step's
    CheckpointCommitted) arrives; a worker on a :class:`ReleaseLine` takes the line's
    signal for it instead.
    """

    step: int


@dataclass(frozen=True, slots=True)
class Preempted:
    """The run is being stopped. Every worker shows ``info`` from the release of step
    ``from_step`` on (the first the driver releases after telling them), whenever it reads
    this: a worker on a release line may read it together with an earlier step's release
    it has not taken yet."""

    info: PreemptionInfo
    from_step: int = 0


@dataclass(frozen=True, slots=True)
class CollectiveRequest:
    """A worker entered its ``seq``-th collective operation."""

    rank: int
    seq: int
    op: str
    payload: Any


@dataclass(frozen=True, slots=True)
class CollectiveReply:
    """The outcome of collective number ``seq``: a value, or an error message."""

    seq: int
    value: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop now: unwind the training function (used where no signal can be sent)."""


@dataclass(frozen=True, slots=True)
class Returned:
    """The training function returned ``cloudpickle.dumps(value)`` after ``num_reports``;
    ``dropped`` says why the value was replaced by None (it could not be pickled)."""

    rank: int
    return_value: bytes
    num_reports: int
    dropped: str | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The worker failed; sent before it exits."""

    failure: WorkerFailure


WorkerEvent = Report | Heartbeat | Returned | Failed


class ReleaseLine:
    """Ends ``report()`` of a step on every worker of a local group with one write.

    Answering each worker with a StepDone costs the driver a write per worker per step,
    and each write wakes a worker that then takes the CPU from the driver before it has
    written to the next one (128 workers: half a report's time). Instead every worker
    waits on one of two eventfds, ``fds[k % 2]`` for step k, which is signalled once for
    all (:func:`signal_step`): by the last worker to reach a step the workers end among
    themselves (see ``step_page``), else by the driver.

    The line is the only release of the workers on it: what else the driver tells them
    (a commit, a preemption notice) still comes over each worker's connection, written
    before the line is signalled and read by the worker before it takes the signal
    (:class:`LineWaiter`), so that it is seen at the same step as before.

    While the workers end their steps themselves, the driver takes what they send in
    batches rather than at every message (see ``ConnectedWorkerGroup.poll``): a worker
    that needs it at once (a step it must end, a collective, the function's end) rings
    its ``bell``, another eventfd, after sending.
    """

    def __init__(self, world_size: int) -> None:
        flags = os.EFD_NONBLOCK | os.EFD_CLOEXEC
        self.fds = (os.eventfd(0, flags), os.eventfd(0, flags))
        self.bell = os.eventfd(0, flags)
        self.page = StepPage.create(world_size)

    def release(self, step: int) -> None:
        """Every worker may return from ``report()`` of ``step`` (steps in order)."""
        self.page.set_released(step)
        signal_step(self.fds, step)

    def send(self, conn: Any) -> None:
        """Hand the line to the worker at the other end of ``conn`` (a local socket)."""
        sock = socket.socket(fileno=conn.fileno())
        try:
            socket.send_fds(sock, [b"L"], [*self.fds, *self.page.fds, self.bell])
        finally:
            sock.detach()

    def answer_bell(self) -> None:
        """The driver takes what rang the bell: it rings again for what comes next."""
        try:
            os.eventfd_read(self.bell)
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.page.close()
        for fd in (*self.fds, *self.page.fds, self.bell):
            os.close(fd)


def signal_step(fds: Sequence[int], step: int) -> None:
    """Signal the line's release of ``step``, after clearing the other eventfd: step
    k-1's signal, which no worker still waits for, as every worker has reported step k
    since."""
    try:
        os.eventfd_read(fds[(step + 1) % 2])
    except BlockingIOError:
        pass  # not signalled yet: step 0
    os.eventfd_write(fds[step % 2], 1)


def receive_line(conn: Any) -> list[int]:
    """The descriptors of the release line the driver sent after the WorkerStart (see
    :meth:`ReleaseLine.send`): its two eventfds, its step page's three (see
    ``StepPage``) and the driver's bell."""
    sock = socket.socket(fileno=conn.fileno())
    try:
        _, fds, _, _ = socket.recv_fds(sock, 1, 6)
    finally:
        sock.detach()
    if len(fds) != 6:
        raise EOFError("the driver went away while handing over its release line")
    for fd in fds:
        os.set_inheritable(fd, False)  # (a program the function starts has no use for it)
    return fds


class LineWaiter:
    """A worker's end of the driver's :class:`ReleaseLine` (its descriptors ``fds``),
    watched together with its connection to the driver (``conn_fd``)."""

    def __init__(self, fds: list[int], conn_fd: int) -> None:
        self._fds = fds
        self._polls = []
        for fd in fds:
            poll = select.poll()
            # The line first: poll() looks at the descriptors in this order, so once it
            # sees the signal it also sees every message the driver wrote before it.
            poll.register(fd, select.POLLIN)
            poll.register(conn_fd, select.POLLIN)
            self._polls.append(poll)

    def wait(self, step: int, timeout: float | None = None) -> tuple[bool, bool]:
        """Wait until step ``step`` is released or a message comes (at most ``timeout``
        seconds; None: for as long as it takes); whether each did."""
        line = self._fds[step % 2]
        released = message = False
        wait_ms = None if timeout is None else timeout * 1000
        for fd, _ in self._polls[step % 2].poll(wait_ms):
            if fd == line:
                released = True
            else:
                message = True
        return released, message

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)


class FrameReader:
    """Reads the messages a :class:`~multiprocessing.connection.Connection` sends (each a
    4-byte big-endian length, or -1 and an 8-byte one, then the pickle) from the socket
    under ``conn``, taking with one ``recv`` every message that has arrived: a report
    costs one system call to read, where ``Connection.recv`` makes two, and a read that
    did not fill the buffer says the socket is empty (:attr:`drained`) without a third.

    Every read of the connection must go through the reader (it keeps what it read
    ahead). Its socket is a duplicate of the connection's descriptor: closing the
    connection still closes the peer's end once the reader is closed too.
    """

    def __init__(self, conn: Any) -> None:
        import socket

        self._socket = socket.socket(fileno=os.dup(conn.fileno()))
        self._buffer = bytearray()
        self._chunk = memoryview(bytearray(_READ_SIZE))  # read into, not allocated per read
        self._dontwait = socket.MSG_DONTWAIT
        # The last read took all the socket held (it did not fill the chunk): what comes
        # next makes the connection readable again, so nobody need ask it until then.
        self.drained = False

    def fileno(self) -> int:
        """The reader's own descriptor of the connection's socket."""
        return self._socket.fileno()

    def buffered(self) -> bool:
        """Whether a message (or part of one) was read ahead."""
        return bool(self._buffer)

    def available(self) -> list[Any]:
        """The messages that have arrived, without waiting for more than the rest of one
        already begun; raises EOFError once the peer closed its end and all is taken."""
        try:
            self._fill(wait=False)
        except BlockingIOError:
            pass
        return self._complete(wait_for_rest=True)

    def next(self) -> Any:
        """The next message, waiting for it; EOFError once the peer closed its end."""
        while True:
            messages = self._complete(wait_for_rest=False, limit=1)
            if messages:
                return messages[0]
            self._fill(wait=True)

    def close(self) -> None:
        self._socket.close()

    def _fill(self, *, wait: bool) -> None:
        self.drained = False
        size = self._socket.recv_into(self._chunk, _READ_SIZE, 0 if wait else self._dontwait)
        if not size:
            raise EOFError("the connection was closed")
        self.drained = size < _READ_SIZE
        self._buffer += self._chunk[:size]

    def _complete(self, *, wait_for_rest: bool, limit: int | None = None) -> list[Any]:
        import pickle

        messages: list[Any] = []
        while self._buffer and (limit is None or len(messages) < limit):
            size, start = _frame(self._buffer)
            if size is None or len(self._buffer) < start + size:
                if not wait_for_rest:
                    break
                self._fill(wait=True)  # a message begun: the rest is on its way
                continue
            messages.append(pickle.loads(memoryview(self._buffer)[start : start + size]))
            del self._buffer[: start + size]
        return messages


def send_frame(conn: Any, data: bytes) -> None:
    """Send ``data`` over ``conn`` as ``conn.send_bytes(data)`` does, the same frame (a
    4-byte big-endian length, then the bytes), with one ``write`` and none of its checks
    in Python, which cost more than a small message's trip (a report, its answer). Raises
    OSError when the peer is gone or ``conn`` is closed."""
    if len(data) > _READ_SIZE:
        conn.send_bytes(data)  # large: not copied behind its header
        return
    write_all(conn.fileno(), _SIZE.pack(len(data)) + data)


_READ_SIZE = 1 << 16
_SIZE = struct.Struct("!i")
_BIG_SIZE = struct.Struct("!Q")


def _frame(buffer: bytearray) -> tuple[int | None, int]:
    """The size of the first message in ``buffer`` and where it starts (None: its length
    is not all there yet)."""
    if len(buffer) < 4:
        return None, 0
    (size,) = _SIZE.unpack_from(buffer)
    if size != -1:
        return size, 4
    if len(buffer) < 12:
        return None, 0
    return _BIG_SIZE.unpack_from(buffer, 4)[0], 12
