"""ProcessWorkerGroup: workers as local processes, no daemon.

Each worker is forked from the fork server (warm: nothing to import) or, where forking is
unsafe, started as ``python -m lockstep._internal.execution.worker.main``. Either way it
runs in its own process group (so Ctrl-C reaches only the driver, which then stops it),
talks to the driver over a socket pair, and its output is forwarded line by line with the
rank in front.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from multiprocessing.connection import Connection

from lockstep._core import flags
from lockstep._core.context import TrainContext
from lockstep._core.errors import WorkerFailure
from lockstep._internal.execution.messages import ReleaseLine, WorkerEvent, WorkerStart
from lockstep._internal.execution.plan import ExecutionPlan, Launcher, RankPlacement
from lockstep._internal.execution.worker_group import forkserver
from lockstep._internal.execution.worker_group.base import (
    ConnectedWorkerGroup,
    WorkerGroupSpec,
    lost_connection,
)
from lockstep._internal.execution.worker_group.output import OutputPump
from lockstep._internal.execution.worker_group.process import shared_tables
from lockstep._internal.execution.worker_group.process.memory import MemoryWatch
from lockstep._internal.execution.worker_group.threads import set_threads

WORKER_MODULE = "lockstep._internal.execution.worker.main"
SPAWN_BATCH = 32  # workers asked of the fork server at once
OUTPUT_WAIT_S = 0.5  # at most, for a failed worker's last output to be read


class ProcessWorkerGroup(ConnectedWorkerGroup):
    """Runs each rank in a local process started for this attempt, as the plan says:
    forked from the fork server or spawned fresh, with the GPUs the plan gives its rank."""

    def __init__(self, plan: ExecutionPlan) -> None:
        super().__init__(plan)
        self._procs: dict[int, forkserver.WorkerProcess] = {}
        self._pidfds: dict[int, int] = {}
        self._pump: OutputPump | None = None
        self._memory: MemoryWatch | None = None
        self._table_files: list[str] = []  # sent to workers in shared memory

    def _launch(
        self, spec: WorkerGroupSpec, starts: dict[int, WorkerStart]
    ) -> dict[int, Connection]:
        self._pump = OutputPump()
        self._memory = MemoryWatch()
        conns: dict[int, Connection] = {}
        ranks = list(starts)
        try:
            # in batches: each holds both ends of its descriptors until its workers start
            for at in range(0, len(ranks), SPAWN_BATCH):
                batch = {rank: starts[rank].context for rank in ranks[at : at + SPAWN_BATCH]}
                conns.update(self._spawn_all(spec, batch))
        except BaseException:
            for conn in conns.values():
                conn.close()
            self._stop_workers(frozenset())
            raise
        self._pump.start()
        threads = max(1, int(self._plan.num_cpus_per_worker))
        allowed = driver_cpus()
        if self._line is not None:
            self._line.close()  # (an attempt's workers are stopped before the next starts)
        self._line = ReleaseLine(len(starts))
        starts = {
            rank: replace(
                start,
                cpus=worker_cpus(start.context.local_rank, start.context.local_world_size, threads)
                if spec.backend.pin_cpus and flags.PIN_WORKERS.get()
                else None,
                allowed_cpus=allowed,
                release_line=True,
            )
            for rank, start in starts.items()
        }
        self._send_starts(conns, starts)
        return conns

    def _spawn_all(
        self, spec: WorkerGroupSpec, contexts: dict[int, TrainContext]
    ) -> dict[int, Connection]:
        """A process per rank, each with a socket to the driver and its stdout and stderr
        piped to the output pump; forked ones are asked of the fork server all at once."""
        assert self._pump is not None
        ends = {rank: _WorkerEnds() for rank in contexts}
        num_threads = max(1, int(self._plan.num_cpus_per_worker))
        try:
            starts = [
                (ends[rank].theirs(), self._env(rank, spec, context, num_threads, len(contexts)))
                for rank, context in contexts.items()
            ]
            fork = self._plan.launcher is Launcher.FORK_SERVER
            started = _start_all(starts, num_threads, spec.backend.worker_imports, fork=fork)
            for rank, proc in zip(contexts, started, strict=True):
                self._procs[rank] = proc  # stopped by the caller if a later one fails
        except BaseException:
            for end in ends.values():
                end.close_ours()
            raise
        finally:
            for end in ends.values():
                end.close_theirs()
        conns: dict[int, Connection] = {}
        for rank in contexts:
            conns[rank] = ends[rank].adopt(rank, self._pump)
            if hasattr(os, "pidfd_open"):
                # Seen as soon as the process ends, even if a child it forked holds the socket.
                self._pidfds[rank] = os.pidfd_open(self._procs[rank].pid)
        return conns

    def _env(
        self,
        rank: int,
        spec: WorkerGroupSpec,
        context: TrainContext,
        num_threads: int,
        num_workers: int,
    ) -> dict[str, str]:
        assert self._topology is not None
        env = worker_env(self._topology.placements[rank], num_threads, num_workers)
        env.update(spec.backend.worker_env(context))
        return env

    def _send_start(self, conn: Connection, start: WorkerStart) -> None:
        assert self._line is not None
        try:
            conn.send_bytes(shared_tables.dumps(start, self._table_files))
            self._line.send(conn)
        except OSError:
            pass  # that worker is gone; its end shows up as a lost connection

    def poll(self, timeout: float) -> list[WorkerEvent]:
        events = super().poll(timeout)
        memory = self._memory
        if memory is not None and memory.due():  # for the error of a worker the kernel kills
            memory.sample({r: p.pid for r, p in self._procs.items() if r not in self._done})
        return events

    def _lost(self, rank: int) -> WorkerFailure:
        proc = self._procs[rank]
        try:
            returncode = proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            return self._explain(lost_connection(rank, proc.pid))
        died = getattr(proc, "server_died", None)
        if died is not None:
            return self._explain(helper_failure(rank, proc.pid, died))
        kind, summary = WorkerFailure.describe_exit(rank, proc.pid, returncode)
        if returncode == -signal.SIGKILL and self._memory is not None:
            kind, summary = self._memory.explain_kill(rank, proc.pid)
        failure = WorkerFailure(
            rank=rank,
            pid=proc.pid,
            kind=kind,
            summary=summary,
            exit_code=returncode,
        )
        return self._explain(failure)

    def _explain(self, failure: WorkerFailure) -> WorkerFailure:
        if self._pump is None:
            return failure
        # What it wrote before it failed is in its pipes: wait, briefly, until the
        # pump has read it, so that its last words are in the error.
        return replace(failure, output=self._pump.tail(failure.rank, wait=OUTPUT_WAIT_S))

    def _worker_pids(self) -> dict[int, int]:
        return {rank: proc.pid for rank, proc in self._procs.items() if proc.poll() is None}

    def _exit_waitables(self) -> dict[int, int]:
        return {fd: rank for rank, fd in self._pidfds.items()}

    def _stop_workers(self, finished: frozenset[int]) -> None:
        # A KeyboardInterrupt (a second Ctrl-C) while the workers are given their grace
        # ends it: they are killed at once, and their files are still removed.
        try:
            self._ask_workers_to_stop(finished)
        finally:
            self._kill_workers()

    def _ask_workers_to_stop(self, finished: frozenset[int]) -> None:
        grace = flags.WORKER_SHUTDOWN_GRACE_S.get()
        # Workers whose function returned are tearing their backend down: let them finish.
        _wait_all([p for r, p in self._procs.items() if r in finished], grace)
        running = [p for p in self._procs.values() if p.poll() is None]
        for proc in running:
            _signal_group(proc, signal.SIGTERM)
        _wait_all(running, grace)

    def _kill_workers(self) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            # Whatever the worker forked (data loader processes, say) goes with it.
            _signal_group(proc, signal.SIGKILL)
        if self._pump is not None:
            self._pump.join()
            self._pump = None
        self._memory = None
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds = {}
        if self._line is not None:
            self._line.close()
            self._line = None
        self._procs = {}
        shared_tables.remove(self._table_files)


def worker_env(placement: RankPlacement, num_threads: int, num_workers: int = 1) -> dict[str, str]:
    """A local worker's environment, one of ``num_workers``: the driver's, with its threads
    (as Ray: one per CPU the worker asked for, unless the user chose) and its GPUs."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    set_threads(env, num_threads, num_workers)
    # Like Ray: a worker sees only its own GPUs, and none when it was given none.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(placement.gpus or ())
    return env


def _wait_all(procs: list[forkserver.WorkerProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _signal_group(proc: forkserver.WorkerProcess, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def helper_failure(rank: int, pid: int | None, died: Exception) -> WorkerFailure:
    """The record of a worker that went with a process of lockstep's own (the fork server):
    a failure of the group like a worker's, answered by a restart with a new one."""
    return WorkerFailure(
        rank=rank,
        pid=pid,
        kind="helper",
        summary=f"{died}; rank {rank} (pid {pid}), forked by it, went with it",
    )


class _WorkerEnds:
    """A worker's socket to the driver and its output pipes, both ends of each, until the
    worker holds its ends."""

    def __init__(self) -> None:
        self.ours, self._theirs = socket.socketpair()
        self.out_r, self._out_w = os.pipe()
        self.err_r, self._err_w = os.pipe()

    def theirs(self) -> list[int]:
        """The worker's descriptors: (connection, stdout, stderr)."""
        return [self._theirs.fileno(), self._out_w, self._err_w]

    def close_theirs(self) -> None:
        self._theirs.close()
        for fd in (self._out_w, self._err_w):
            os.close(fd)

    def close_ours(self) -> None:
        self.ours.close()
        for fd in (self.out_r, self.err_r):
            os.close(fd)

    def adopt(self, rank: int, pump: OutputPump) -> Connection:
        pump.add(
            rank, os.fdopen(self.out_r, "rb", buffering=0), os.fdopen(self.err_r, "rb", buffering=0)
        )
        return Connection(self.ours.detach())


def _start_all(
    starts: list[tuple[list[int], dict[str, str]]],
    threads: int,
    imports: tuple[str, ...],
    *,
    fork: bool,
) -> Iterator[forkserver.WorkerProcess]:
    """A process per (descriptors, environment), each as it starts; forked ones are asked
    of the fork server in one go, so that it forks them one after another, once it
    imported ``imports``."""
    server = forkserver.get(threads) if fork else None
    if server is not None:
        requests = [
            (forkserver.SpawnRequest(env=env, num_threads=threads, imports=imports), fds)
            for fds, env in starts
        ]
        yield from (forkserver.ForkedWorker(server, pid) for pid in server.spawn_all(requests))
    else:
        yield from (_popen(fds, env) for fds, env in starts)


def _popen(fds: list[int], env: dict[str, str]) -> forkserver.WorkerProcess:
    conn_fd, out_fd, err_fd = fds
    return subprocess.Popen(
        [sys.executable, "-m", WORKER_MODULE, str(conn_fd), str(os.getpid())],
        pass_fds=(conn_fd,),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out_fd,
        stderr=err_fd,
        start_new_session=True,
    )


def driver_cpus() -> tuple[int, ...] | None:
    """The CPUs this process may run on now, which the workers it starts get too: the fork
    server was forked with the CPUs of its time, and a run that grew counts more now."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return tuple(sorted(os.sched_getaffinity(0)))


def worker_cpus(local_rank: int, local_world_size: int, threads: int) -> tuple[int, ...] | None:
    """The CPUs of local worker ``local_rank`` when the workers, ``threads`` CPUs each, take
    every CPU this process may use; None otherwise.

    Workers that synchronise every step (DDP, xgboost's per-level histogram all-reduce)
    wait for the slowest one: a worker that the kernel moves between CPUs, or that shares
    one with another, slows every step. Binding each to its own CPUs, as MPI launchers do,
    removes that on a machine the run has to itself; only when the run takes the whole
    machine, as runs that leave CPUs free may share it with other runs, which would be
    bound to the same first CPUs. Off unless ``LOCKSTEP_PIN_WORKERS=1`` (the caller
    checks): a bound worker cannot leave a CPU that the driver, or another program, is
    using, and on a shared machine that slows every step more than moving does.

    Example:
        >>> import os
        >>> cpus = sorted(os.sched_getaffinity(0))
        >>> worker_cpus(len(cpus) - 1, len(cpus), 1) == (cpus[-1],)
        True
        >>> worker_cpus(0, len(cpus) + 1, 1) is None
        True
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if local_world_size * threads != len(cpus):
        return None
    return tuple(cpus[local_rank * threads : (local_rank + 1) * threads])
