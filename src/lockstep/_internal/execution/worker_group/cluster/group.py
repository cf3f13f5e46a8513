"""ClusterWorkerGroup: the workers of a run across the processes a launcher started.

Each attempt: the plan places the ranks on the processes that joined (contiguous per node,
the driver's node first), every process starts its share (the driver's own agent here,
the members when told), and each worker connects back to the driver over TCP with the
run's key, on the driver's node address, while the attempt starts. A worker that ends is
seen as its connection closing; its member says how it ended.
"""

from __future__ import annotations

from dataclasses import replace
from multiprocessing.connection import Connection

from lockstep._core import flags
from lockstep._core.errors import WorkerFailure
from lockstep._internal.execution.messages import Stop, WorkerStart
from lockstep._internal.execution.plan import ExecutionPlan, Topology, torchrun_env
from lockstep._internal.execution.worker_group.base import (
    ConnectedWorkerGroup,
    WorkerGroupSpec,
    lost_connection,
)
from lockstep._internal.execution.worker_group.cluster.driver import DriverSession
from lockstep._internal.execution.worker_group.cluster.messages import (
    CollectStacks,
    Stacks,
    StartWorkers,
    StopWorkers,
    WorkerExited,
    WorkerLaunch,
)
from lockstep._internal.execution.worker_group.listener import Listener

_CONNECT_TIMEOUT_S = 300.0  # for every worker to start (import its modules) and connect
_EXIT_WAIT_S = 5.0  # for a member to say how a worker whose connection closed ended


class ClusterWorkerGroup(ConnectedWorkerGroup):
    """Runs each rank in a process that its node's launched process starts."""

    def __init__(self, plan: ExecutionPlan, session: DriverSession) -> None:
        super().__init__(plan)
        self._session = session
        self._listener: Listener | None = None

    def _place(self, spec: WorkerGroupSpec) -> Topology:
        topology = self._plan.joined(self._session.members)
        assert topology.world_size == spec.num_workers, (topology.world_size, spec.num_workers)
        return topology

    def _launch(
        self, spec: WorkerGroupSpec, starts: dict[int, WorkerStart]
    ) -> dict[int, Connection]:
        assert self._topology is not None
        self._session.new_attempt()
        self._listener = Listener(self._plan.listen_host, self._session.key)
        try:
            for process_rank, workers in self._launches(spec, starts).items():
                if process_rank == 0:
                    self._session.agent.start(self._listener.address, self._session.key, workers)
                else:
                    message = StartWorkers(self._listener.address, tuple(workers))
                    self._session.send(process_rank, message)
            conns = self._listener.accept(
                len(starts), timeout=_CONNECT_TIMEOUT_S, check=self._raise_if_ended
            )
        finally:
            self._listener.close()  # nothing listens once every worker is in
            self._listener = None
        self._send_starts(conns, starts)
        return conns

    def _launches(
        self, spec: WorkerGroupSpec, starts: dict[int, WorkerStart]
    ) -> dict[int, list[WorkerLaunch]]:
        """Each launched process's workers: their ranks and variables (torchrun's, and
        the backend's)."""
        assert self._topology is not None
        threads = max(1, int(self._plan.num_cpus_per_worker))
        launches: dict[int, list[WorkerLaunch]] = {}
        for placement in self._topology.placements:
            env = torchrun_env(placement, self._topology)
            env.update(spec.backend.worker_env(starts[placement.world_rank].context))
            launch = WorkerLaunch(placement.world_rank, env, threads, spec.backend.worker_imports)
            launches.setdefault(placement.process_rank, []).append(launch)
        return launches

    def _raise_if_ended(self, connected: dict[object, Connection]) -> None:
        """A worker ended before it connected: fail the start with how it ended."""
        self._session.check_members()
        ends = {**self._session.exits(), **self._local_ends(connected)}
        for rank, end in sorted(ends.items()):
            if rank not in connected:
                raise RuntimeError(f"{self._failure(end).summary} before it connected; its "
                                   f"last output:\n" + "\n".join(end.output))  # fmt: skip

    def _local_ends(self, connected: dict[object, Connection]) -> dict[int, WorkerExited]:
        ends = {}
        for rank in self._session.agent.exit_fds():
            if rank not in connected and (end := self._session.agent.reap(rank, 0.0)):
                ends[rank] = end
        return ends

    def _lost(self, rank: int) -> WorkerFailure:
        end = self._end_of(rank)
        if end is None:
            return lost_connection(rank, None)
        return self._failure(end)

    def _end_of(self, rank: int) -> WorkerExited | None:
        if rank in self._session.agent.exit_fds():
            return self._session.agent.reap(rank, _EXIT_WAIT_S)
        assert self._topology is not None
        process_rank = self._topology.placements[rank].process_rank
        return self._session.exit_of(rank, process_rank, _EXIT_WAIT_S)

    @staticmethod
    def _failure(end: WorkerExited) -> WorkerFailure:
        kind, summary = WorkerFailure.describe_exit(end.rank, end.pid, end.returncode)
        return WorkerFailure(
            rank=end.rank,
            pid=end.pid,
            kind=kind,
            summary=f"{summary} on {end.host}",
            exit_code=end.returncode,
            output=end.output,
        )

    def _explain(self, failure: WorkerFailure) -> WorkerFailure:
        """A failure a worker sent, with its last output (its member reads it)."""
        end = self._end_of(failure.rank)
        return replace(failure, output=end.output) if end is not None else failure

    def _exit_waitables(self) -> dict[int, int]:
        return {fd: rank for rank, fd in self._session.agent.exit_fds().items()}

    def _worker_pids(self) -> dict[int, int]:
        return self._session.agent.pids()

    def collect_stacks(self, timeout: float = 2.0) -> dict[int, tuple[int, str]]:
        """Every running worker's stacks: this node's read here, each other node's by its
        launched processes."""
        found = super().collect_stacks(timeout)
        assert self._topology is not None
        running = [p for p in self._topology.placements if p.world_rank not in self._done]
        for process_rank in self._session.member_ranks():
            ranks = [p.world_rank for p in running if p.process_rank == process_rank]
            if ranks:
                fds = {rank: self._stack_fds.get(rank) for rank in ranks}
                self._session.send(process_rank, CollectStacks(fds, timeout))
                answer = self._session.reply(process_rank, timeout + 15.0)
                if isinstance(answer, Stacks):
                    found.update(answer.stacks)
        return found

    def _stop_workers(self, finished: frozenset[int]) -> None:
        grace = flags.WORKER_SHUTDOWN_GRACE_S.get()
        self._send_running(Stop())
        members = self._session.member_ranks()
        for process_rank in members:
            self._session.send(process_rank, StopWorkers(grace))
        self._session.agent.stop(grace)
        for process_rank in members:
            self._session.reply(process_rank, grace + 15.0)  # WorkersStopped
        if self._listener is not None:
            self._listener.close()
            self._listener = None
