"""The WorkerGroup interface, and the part shared by every group that talks over connections.

A group starts N workers, reports what they send (reports, results, failures), tells them
about committed checkpoints, and shuts them down. Collective calls are answered inside the
group, by the relay; the controller never sees them.

Besides start / poll / shutdown the interface has ``notify``: a worker that reported a
checkpoint waits until the controller has committed it, and every worker's
``get_checkpoint()`` follows the commits, so the controller must be able to tell them.
"""

from __future__ import annotations

import abc
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.errors import WorkerFailure
from lockstep._core.storage import StorageDir
from lockstep._internal.backends.base import Backend
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    CollectiveReply,
    CollectiveRequest,
    Failed,
    Report,
    Returned,
    WorkerEvent,
    WorkerStart,
)
from lockstep._internal.execution.relay import CollectiveRelay


@dataclass(frozen=True, kw_only=True)
class WorkerGroupSpec:
    """What to run on every worker of one attempt."""

    num_workers: int
    experiment_name: str
    train_fn: bytes
    backend: Backend
    run_dir: StorageDir
    checkpoint: Checkpoint | None = None
    step_offset: int = 0
    score_attribute: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    datasets: list[dict[str, Any]] = field(default_factory=list)
    num_cpus_per_worker: float = 1.0
    num_gpus_per_worker: float = 0.0
    sys_path: tuple[str, ...] = ()

    def worker_start(self, context: TrainContext) -> WorkerStart:
        rank = context.world_rank
        return WorkerStart(
            context=context,
            train_fn=self.train_fn,
            backend=self.backend,
            run_dir=self.run_dir,
            checkpoint=self.checkpoint,
            step_offset=self.step_offset,
            score_attribute=self.score_attribute,
            datasets=self.datasets[rank] if self.datasets else {},
            sys_path=self.sys_path,
        )


class WorkerGroup(Protocol):
    """N workers running one training function.

    ``poll`` returns what the workers sent since the last call (waiting up to ``timeout``
    seconds for something), ``notify`` tells every worker a checkpoint was committed.
    """

    def start(self, spec: WorkerGroupSpec) -> None: ...

    def poll(self, timeout: float) -> list[WorkerEvent]: ...

    def notify(self, message: CheckpointCommitted) -> None: ...

    def shutdown(self) -> None: ...


class ConnectedWorkerGroup(abc.ABC):
    """A worker group whose workers each hold one connection to the driver.

    Subclasses launch the workers and say what a lost connection means.
    """

    def __init__(self) -> None:
        self._conns: dict[int, Connection] = {}
        self._ranks: dict[int, int] = {}  # id(connection) -> rank
        self._done: set[int] = set()
        self._relay = CollectiveRelay(0)
        self._extra_waitables: dict[Any, int] = {}
        self._backend: Backend | None = None  # its driver side runs while the group does

    def start(self, spec: WorkerGroupSpec) -> None:
        self._relay = CollectiveRelay(spec.num_workers)
        self._done = set()
        contexts = self._contexts(spec)
        self._backend = spec.backend
        self._backend.on_group_start([contexts[rank] for rank in sorted(contexts)])
        starts = {rank: spec.worker_start(c) for rank, c in contexts.items()}
        self._conns = self._launch(spec, starts)
        self._ranks = {id(conn): rank for rank, conn in self._conns.items()}

    def poll(self, timeout: float) -> list[WorkerEvent]:
        events: list[WorkerEvent] = []
        waitables = [c for r, c in self._conns.items() if r not in self._done]
        waitables += [w for w, r in self._extra_waitables.items() if r not in self._done]
        if not waitables:
            return events
        for ready in wait(waitables, timeout):
            if ready in self._extra_waitables:
                rank = self._extra_waitables[ready]
                self._drain(rank, events)
            else:
                self._receive(self._ranks[id(ready)], events)
        return events

    def notify(self, message: CheckpointCommitted) -> None:
        for rank, conn in self._conns.items():
            if rank not in self._done:
                self._send(conn, message)

    def shutdown(self) -> None:
        try:
            self._stop_workers()
        finally:
            backend, self._backend = self._backend, None
            if backend is not None:
                backend.on_group_shutdown()
        for conn in self._conns.values():
            conn.close()
        self._conns = {}

    @abc.abstractmethod
    def _contexts(self, spec: WorkerGroupSpec) -> dict[int, TrainContext]:
        """Each rank's context: ranks, node, run information."""

    @abc.abstractmethod
    def _launch(
        self, spec: WorkerGroupSpec, starts: dict[int, WorkerStart]
    ) -> dict[int, Connection]:
        """Start every worker and give it its WorkerStart; return the driver's end of each
        one's connection."""

    @abc.abstractmethod
    def _lost(self, rank: int) -> WorkerFailure:
        """The failure record of a worker whose connection closed before it finished."""

    @abc.abstractmethod
    def _stop_workers(self) -> None:
        """Stop every worker still running and wait until they are gone."""

    def _receive(self, rank: int, events: list[WorkerEvent]) -> None:
        """Take everything the worker has sent so far (not just one message per wait)."""
        conn = self._conns[rank]
        try:
            for _ in range(_MAX_BATCH):
                self._dispatch(rank, conn.recv(), events)
                if rank in self._done or not conn.poll(0):
                    return
        except (EOFError, OSError):
            self._mark_lost(rank, events)

    def _drain(self, rank: int, events: list[WorkerEvent]) -> None:
        """The worker's process ended: take what it sent before, then record its end."""
        conn = self._conns[rank]
        try:
            while rank not in self._done and conn.poll(0):
                self._dispatch(rank, conn.recv(), events)
        except (EOFError, OSError):
            pass
        if rank not in self._done:
            self._mark_lost(rank, events)

    def _mark_lost(self, rank: int, events: list[WorkerEvent]) -> None:
        if rank in self._done:
            return
        self._done.add(rank)
        events.append(Failed(self._lost(rank)))
        self._answer(self._relay.on_finished(rank))

    def _dispatch(self, rank: int, message: object, events: list[WorkerEvent]) -> None:
        if isinstance(message, CollectiveRequest):
            self._answer(self._relay.on_request(message))
        elif isinstance(message, Returned | Failed):
            self._done.add(rank)
            events.append(message)
            self._answer(self._relay.on_finished(rank))
        else:
            assert isinstance(message, Report), message
            events.append(message)

    def _answer(self, outcome: tuple[list[int], CollectiveReply] | None) -> None:
        if outcome is None:
            return
        ranks, reply = outcome
        for rank in ranks:
            if rank in self._conns:
                self._send(self._conns[rank], reply)

    def _send_starts(self, conns: dict[int, Connection], starts: dict[int, WorkerStart]) -> None:
        # A worker that died while starting shows up in poll(), with its exit code. The
        # starts carry each worker's data shards: pickling one while another worker reads
        # its own (both release the GIL) starts them sooner than one after the other.
        senders = [
            threading.Thread(
                target=self._send_start, args=(conn, starts[rank]), name="lockstep-start"
            )
            for rank, conn in conns.items()
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()

    def _send_start(self, conn: Connection, start: WorkerStart) -> None:
        self._send(conn, start)

    @staticmethod
    def _send(conn: Connection, message: object) -> None:
        try:
            conn.send(message)
        except OSError:
            pass  # that worker is gone; its end shows up as a lost connection


_MAX_BATCH = 256  # messages taken from one worker before the others get a turn


def lost_connection(rank: int, pid: int | None) -> WorkerFailure:
    """The record of a worker that vanished without an exit status to explain it."""
    return WorkerFailure(
        rank=rank,
        pid=pid,
        kind="lost",
        summary=f"rank {rank} (pid {pid}) lost its connection to the driver",
        time=time.time(),
    )
