"""The WorkerGroup interface, and the part shared by every group that talks over connections.

A group starts N workers, reports what they send (reports, results, failures), tells them
about committed checkpoints, and shuts them down. Collective calls are answered inside the
group, by the relay; the controller never sees them.

Besides start / poll / shutdown the interface has ``notify``: ``report()`` is a barrier, so a
worker that reported waits until the controller has every worker's report of that step (and
has committed its checkpoint, if any), and every worker's ``get_checkpoint()`` follows the
commits, so the controller must be able to tell them. Two more calls answer the
controller's policies: ``preemption_notice`` (a node of the group is going away) and
``collect_stacks`` (every worker's stacks, for a hang).

Where each rank runs, how it starts and reaches the driver and which GPUs it gets are the
execution plan's (``execution/plan.py``): a group carries the plan out.
"""

from __future__ import annotations

import abc
import dataclasses
import pickle
import socket
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.errors import WorkerFailure
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.storage import STAGING_DIR, StorageDir
from lockstep._internal.backends.base import Backend, WorkerGroupInfo
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    CollectiveReply,
    CollectiveRequest,
    Failed,
    FrameReader,
    Heartbeat,
    LocalFunction,
    Preempted,
    ReleaseLine,
    Report,
    Returned,
    StepDone,
    WorkerEvent,
    WorkerStart,
    send_frame,
)
from lockstep._internal.execution.plan import ExecutionPlan, Topology
from lockstep._internal.execution.step_page import StepPage
from lockstep._internal.execution.worker import phases
from lockstep._internal.execution.worker_group import stacks
from lockstep._internal.execution.worker_group.readiness import Key, Readiness
from lockstep._internal.execution.worker_group.relay import CollectiveRelay


@dataclass(frozen=True, kw_only=True)
class WorkerGroupSpec:
    """What to run on every worker of one attempt."""

    num_workers: int
    experiment_name: str
    train_fn: bytes | LocalFunction
    backend: Backend
    run_dir: StorageDir
    checkpoint: Checkpoint | None = None
    staging_dir: str = STAGING_DIR
    score_attribute: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    datasets: list[dict[str, Any]] = field(default_factory=list)
    sys_path: tuple[str, ...] = ()
    reported: tuple[tuple[str, dict[str, Any]], ...] = ()
    trial: dict[str, Any] = field(default_factory=dict)  # a Tune trial's context fields

    def worker_start(self, context: TrainContext) -> WorkerStart:
        rank = context.world_rank
        return WorkerStart(
            context=dataclasses.replace(context, **self.trial) if self.trial else context,
            train_fn=self.train_fn,
            backend=ByValue(self.backend),
            run_dir=self.run_dir,
            checkpoint=self.checkpoint,
            staging_dir=self.staging_dir,
            score_attribute=self.score_attribute,
            datasets=self.datasets[rank] if self.datasets else {},
            sys_path=self.sys_path,
            reported=self.reported,
            driver_host=socket.gethostname(),
        )


# How long what the workers send may wait for the driver while they end their steps
# themselves (what needs it at once rings its bell): the driver's view of their reports
# (the hang watch, `lockstep status`, the time ledger) is at most this much behind.
BATCH_S = 0.01


class WorkerGroup(Protocol):
    """N workers running one training function.

    ``poll`` returns what the workers sent since the last call (waiting up to ``timeout``
    seconds for something), ``notify`` tells every worker a step is complete (StepDone), its
    checkpoint was committed (CheckpointCommitted), or the run is being stopped (Preempted).
    ``preemption_notice`` says, once, that a node of the group is going away (None while
    none is); ``collect_stacks`` gives every running worker's stacks by rank, with its pid.
    """

    def start(self, spec: WorkerGroupSpec) -> None: ...

    def poll(self, timeout: float) -> list[WorkerEvent]: ...

    def notify(self, message: StepDone | CheckpointCommitted | Preempted) -> None: ...

    def preemption_notice(self) -> PreemptionInfo | None: ...

    @property
    def step_page(self) -> StepPage | None: ...

    def collect_stacks(self, timeout: float = 2.0) -> dict[int, tuple[int, str]]: ...

    def worker_places(self) -> dict[int, WorkerPlace]: ...

    def shutdown(self) -> None: ...


@dataclass(frozen=True)
class WorkerPlace:
    """Where a running worker is, for ``lockstep status``: its pid (None where it cannot
    be known), its node, and what its phase page says (None where it cannot be read: a
    worker on another node, one that has not started its function)."""

    pid: int | None
    node: str
    phase: phases.Phase | None


class ConnectedWorkerGroup(abc.ABC):
    """A worker group whose workers each hold one connection to the driver.

    The connections, the ranks that are done, the collective relay and each rank's context
    (from the plan's topology) are this class's alone. A subclass answers the abstract
    hooks: launching the workers, what a lost connection means, stopping them; and,
    optionally, where the workers are placed (:meth:`_place`, when its launcher places
    them), what else shows a worker's end (:meth:`_exit_waitables`).
    """

    def __init__(self, plan: ExecutionPlan) -> None:
        self._plan = plan
        self._topology: Topology | None = None
        self._conns: dict[int, Connection] = {}
        self._readers: dict[int, FrameReader] = {}  # every read of a connection goes here
        self._done: set[int] = set()
        self._relay = CollectiveRelay(0)
        # Kept across polls (report() is a round trip through here): rebuilt only when a
        # worker finishes, so each poll is one system call.
        self._selectors: dict[bool, Readiness] = {}  # all, urgent (see _waiting)
        # how many workers had finished when they were made, and the line they watch
        self._selectors_of: tuple[int, ReleaseLine | None] = (0, None)
        self._backend: Backend | None = None  # its driver side runs while the group does
        self._num_workers = 0
        self._stack_fds: dict[int, int] = {}  # each worker's stack file, as its own fd
        self._phase_fds: dict[int, int] = {}  # each worker's phase page, as its own fd
        self._started_pids: dict[int, int] = {}  # each worker's pid, as it says (any node)
        self._stacks_lock = threading.Lock()
        # Set by a group whose workers all take their steps' ends from it, not StepDone.
        self._line: ReleaseLine | None = None

    def start(self, spec: WorkerGroupSpec) -> None:
        self._relay = CollectiveRelay(spec.num_workers)
        self._done = set()
        self._close_selector()
        self._topology = self._place(spec)
        contexts = self._contexts(spec, self._topology)
        self._backend = spec.backend
        self._ray_hooks(spec.backend, spec.num_workers, "on_start", "on_training_start")
        self._num_workers = spec.num_workers
        self._backend.on_group_start([contexts[rank] for rank in sorted(contexts)])
        self._stack_fds, self._phase_fds, self._started_pids = {}, {}, {}
        starts = {rank: spec.worker_start(c) for rank, c in contexts.items()}
        self._conns = self._launch(spec, starts)
        self._readers = {}

    def _place(self, spec: WorkerGroupSpec) -> Topology:
        """Where the ranks of this attempt run: the plan's topology for its size."""
        return self._plan.topology(spec.num_workers)

    @staticmethod
    def _contexts(spec: WorkerGroupSpec, topology: Topology) -> dict[int, TrainContext]:
        """Each rank's context: its place in ``topology``, and the run's information."""
        return {
            p.world_rank: TrainContext(
                world_rank=p.world_rank,
                world_size=topology.world_size,
                local_rank=p.local_rank,
                local_world_size=p.local_world_size,
                node_rank=p.node_rank,
                experiment_name=spec.experiment_name,
                run_path=spec.run_dir.uri,
                node_ip=topology.address_of(p.world_rank),
                metadata=spec.metadata,
            )
            for p in topology.placements
        }

    def preemption_notice(self) -> PreemptionInfo | None:
        """None: workers on this machine hear of a preemption as the driver does (a
        signal); a group whose nodes can be taken away says so."""
        return None

    def collect_stacks(self, timeout: float = 2.0) -> dict[int, tuple[int, str]]:
        """Every running worker's Python stacks (faulthandler's text), by rank, with its pid.

        Each worker writes them from a thread that takes the signal, under the GIL, so a
        worker stuck in C code that released it answers too. A worker that has not set
        that thread up, or does not answer, is read with py-spy when it is installed; a
        rank on another node is left out.
        """
        with self._stacks_lock:  # the hang watchdog and `lockstep status` may both ask
            pids = {r: pid for r, pid in self._worker_pids().items() if r not in self._done}
            return stacks.collect(pids, self._stack_fds, timeout)

    def _worker_pids(self) -> dict[int, int]:
        """The pid of each worker running on this machine, by rank."""
        return {}

    def worker_places(self) -> dict[int, WorkerPlace]:
        """Every running worker's pid, node and phase (read from its page, on this node
        only: None on another), by rank.

        Safe to call from another thread than the controller's (``lockstep status``
        asks from the driver's status thread): it only reads.
        """
        topology = self._topology
        if topology is None:
            return {}
        pids = self._worker_pids()
        places = {}
        for rank in range(topology.world_size):
            if rank in self._done:
                continue
            pid, fd = pids.get(rank), self._phase_fds.get(rank)
            page = phases.open_page(pid, fd) if pid is not None and fd is not None else None
            phase = None
            if page is not None:
                with page:
                    phase = phases.read(page)
            pid = pid if pid is not None else self._started_pids.get(rank)
            places[rank] = WorkerPlace(pid, topology.address_of(rank), phase)
        return places

    def poll(self, timeout: float) -> list[WorkerEvent]:
        events: list[WorkerEvent] = []
        selector = self._waiting()
        if not selector:
            return events
        ready = selector.ready(timeout)
        line = self._line
        batching = ready and line is not None and line.page.sharing
        if batching and all(kind == "conn" for kind, _ in ready):
            # The workers end their steps themselves: what they sent can wait for the
            # batch (the driver waking at every report takes their CPU on a machine with
            # as many workers as cores), unless a worker rings (a step it must end, a
            # collective, its function's end) or ends meanwhile.
            self._waiting(urgent=True).ready(BATCH_S)
            ready = selector.ready(0)
        self._take_ready(ready, events)
        if events:
            # What came meanwhile (another rank's report of the same step, often): one
            # look more, so that a step's reports are taken in one poll.
            self._take_ready(self._waiting().ready(0), events)
        if any(isinstance(e, Failed) for e in events):
            self._take_everything_sent(events)
        return events

    def _take_ready(self, ready: list[Key], events: list[WorkerEvent]) -> None:
        for kind, rank in ready:
            if kind == "bell":
                assert self._line is not None
                self._line.answer_bell()  # what rang is taken with the rest
            elif rank in self._done:
                continue
            elif kind == "end":
                self._drain(rank, events)
            else:
                self._receive(rank, events)

    def _take_everything_sent(self, events: list[WorkerEvent]) -> None:
        """A worker ended: before the controller acts on it, take what every other worker
        has sent already (a report that completes a step, say), so nothing is lost."""
        for rank in list(self._conns):
            self._receive(rank, events, to_the_end=True)

    def _waiting(self, *, urgent: bool = False) -> Readiness:
        """The readiness of every unfinished worker's connection and end-of-process fd,
        and of the release line's bell; ``urgent``: of the ends and the bell alone."""
        # (the finished ranks only grow within an attempt: their count says whether they did)
        if self._selectors_of != (len(self._done), self._line):
            self._close_selector()
        selector = self._selectors.get(urgent)
        if selector is not None:
            return selector
        selector = self._selectors[urgent] = Readiness()
        self._selectors_of = (len(self._done), self._line)
        unfinished = [rank for rank in self._conns if rank not in self._done]
        if not urgent:
            for rank in unfinished:
                selector.add(self._conns[rank], ("conn", rank))
        for waitable, rank in self._exit_waitables().items():
            if rank not in self._done:
                selector.add(waitable, ("end", rank))
        if unfinished and self._line is not None:
            selector.add(self._line.bell, ("bell", -1))
        return selector

    def _close_selector(self) -> None:
        for selector in self._selectors.values():
            selector.close()
        self._selectors = {}

    @property
    def step_page(self) -> StepPage | None:
        """The page on which the workers end their steps among themselves, if they do
        (a local process group: see ``step_page``)."""
        return None if self._line is None else self._line.page

    def notify(self, message: StepDone | CheckpointCommitted | Preempted) -> None:
        if self._line is not None and isinstance(message, StepDone):
            self._line.release(message.step)  # every worker is on it
            return
        self._send_running(message)

    def shutdown(self) -> None:
        self._close_selector()
        try:
            self._stop_workers(frozenset(self._done))
        finally:
            backend, self._backend = self._backend, None
            if backend is not None:
                backend.on_group_shutdown()
                self._ray_hooks(backend, self._num_workers, "on_shutdown")
        for reader in self._readers.values():
            reader.close()
        for conn in self._conns.values():
            conn.close()
        self._conns, self._readers = {}, {}

    @staticmethod
    def _ray_hooks(backend: Backend, num_workers: int, *names: str) -> None:
        """Ray's driver-side Backend hooks (``on_start``, ``on_training_start`` before the
        workers start, ``on_shutdown`` after they stopped), for backends written for Ray."""
        info = WorkerGroupInfo(num_workers=num_workers)
        config = getattr(backend, "config", None)
        for name in names:
            getattr(backend, name)(info, config)

    def _send_running(self, message: object) -> None:
        """Send ``message`` to every worker that has not finished (pickled once: this is
        every report's reply)."""
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        for rank, conn in self._conns.items():
            if rank not in self._done:
                try:
                    send_frame(conn, data)
                except OSError:
                    pass  # that worker is gone; its end shows up as a lost connection

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
    def _stop_workers(self, finished: frozenset[int]) -> None:
        """Stop every worker still running and wait until they are gone; the ranks in
        ``finished`` returned or failed already."""

    def _explain(self, failure: WorkerFailure) -> WorkerFailure:
        """A failure the worker sent, with what only the group knows added (its output)."""
        return failure

    def _exit_waitables(self) -> dict[Any, int]:
        """Objects (for ``multiprocessing.connection.wait``) that become ready when a
        worker ends, by rank: seen even while a child of the worker holds its connection."""
        return {}

    def _receive(self, rank: int, events: list[WorkerEvent], *, to_the_end: bool = False) -> None:
        """Take everything the worker has sent so far (not just one message per wait);
        ``to_the_end``: its end too, when it closed the connection after its last one."""
        reader = self._reader(rank)
        try:
            while rank not in self._done and reader is not None:
                messages = reader.available()  # until none is left, or the end
                if not messages:
                    return
                self._dispatch_all(rank, messages, events)
                if reader.drained and not to_the_end:
                    return  # a short read took all there was (an end after it: next poll)
        except (EOFError, OSError):
            self._mark_lost(rank, events)

    def _reader(self, rank: int) -> FrameReader | None:
        """The reader of ``rank``'s connection (every read goes through it), or None once
        it is closed."""
        reader = self._readers.get(rank)
        if reader is None and rank in self._conns and not self._conns[rank].closed:
            reader = self._readers[rank] = FrameReader(self._conns[rank])
        return reader

    def _hang_up(self, rank: int) -> None:
        """Close the connection to ``rank``: its next call on it fails (a worker thread,
        which cannot be killed, stops there)."""
        reader = self._readers.pop(rank, None)
        if reader is not None:
            reader.close()
        conn = self._conns.get(rank)
        if conn is not None:
            conn.close()

    def _dispatch_all(self, rank: int, messages: list[Any], events: list[WorkerEvent]) -> None:
        for message in messages:
            if rank in self._done:
                return
            self._dispatch(rank, message, events)

    def _drain(self, rank: int, events: list[WorkerEvent]) -> None:
        """The worker's process ended: take what it sent before, then record its end."""
        self._receive(rank, events, to_the_end=True)
        self._mark_lost(rank, events)  # (a no-op when it returned or failed)

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
            if isinstance(message, Failed):
                message = Failed(self._explain(message.failure))
            events.append(message)
            self._answer(self._relay.on_finished(rank))
        else:
            assert isinstance(message, Report | Heartbeat), message
            if isinstance(message, Heartbeat) and message.started:
                if message.stack_fd is not None:
                    self._stack_fds[rank] = message.stack_fd
                if message.phase_fd is not None:
                    self._phase_fds[rank] = message.phase_fd
                if message.pid is not None:
                    self._started_pids[rank] = message.pid
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
        errors: list[BaseException] = []

        # A few threads take the starts in turn: one per worker costs more than it saves
        # with many workers (each thread is started and scheduled before it sends).
        queue = list(conns.items())

        def send() -> None:
            while queue:
                try:
                    rank, conn = queue.pop()
                except IndexError:
                    return
                try:
                    self._send_start(conn, starts[rank])
                except BaseException as exc:  # a start that cannot be sent: fail, never hang
                    errors.append(exc)

        senders = [
            threading.Thread(target=send, name="lockstep-start")
            for _ in range(min(len(queue), _START_SENDERS))
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        if errors:
            raise errors[0]

    def _send_start(self, conn: Connection, start: WorkerStart) -> None:
        self._send(conn, start)

    @staticmethod
    def _send(conn: Connection, message: object) -> None:
        try:
            conn.send(message)
        except OSError:
            pass  # that worker is gone; its end shows up as a lost connection


class ByValue:
    """Pickles ``obj`` with cloudpickle, so that classes defined in a function or in
    ``__main__`` (a user's Backend, say) reach the workers; unpickles as ``obj`` itself.
    Pickled only when sent (an inline worker is handed ``obj`` as it is)."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        import cloudpickle

        return cloudpickle.loads, (bytes(cloudpickle.dumps(self._obj)),)


_START_SENDERS = 8  # threads that send the workers their starts


def lost_connection(rank: int, pid: int | None) -> WorkerFailure:
    """The record of a worker that vanished without an exit status to explain it."""
    return WorkerFailure(
        rank=rank,
        pid=pid,
        kind="lost",
        summary=f"rank {rank} (pid {pid}) lost its connection to the driver",
    )
