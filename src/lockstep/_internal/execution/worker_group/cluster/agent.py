"""A launched process's workers: started, watched and stopped on its node.

Every process of a cluster run has one agent, the driver too (for the workers on its own
node). A worker is forked from this process's fork server, as a local run's are (nothing to
import again), or where that is not safe a fresh ``python -m
lockstep._internal.execution.worker.remote``; either way it connects to the driver itself.
Its output goes to this process's output, a line at a time with its rank in front, as the
scheduler collects it (SLURM's output file, a pod's log).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from lockstep._internal.execution.environments.base import without_launch_variables
from lockstep._internal.execution.worker_group import forkserver
from lockstep._internal.execution.worker_group import stacks as stack_files
from lockstep._internal.execution.worker_group.cluster.messages import WorkerExited, WorkerLaunch
from lockstep._internal.execution.worker_group.output import OutputPump
from lockstep._internal.execution.worker_group.threads import set_threads

REMOTE_WORKER = "lockstep._internal.execution.worker.remote"
_OUTPUT_WAIT_S = 0.5  # at most, for an ended worker's last output to be read


class NodeAgent:
    """Starts, watches and stops this process's workers: forked from this process's fork
    server when ``fork`` (and a fork is safe here), else started fresh."""

    def __init__(self, *, fork: bool = False) -> None:
        self.host = socket.gethostname()
        self._fork = fork
        self._procs: dict[int, forkserver.WorkerProcess] = {}
        self._pidfds: dict[int, int] = {}
        self._pump: OutputPump | None = None

    def start(self, address: tuple[str, int], key: bytes, workers: Sequence[WorkerLaunch]) -> None:
        """Start ``workers``; each connects to the driver at ``address`` with ``key``."""
        self._pump = OutputPump()
        for worker in workers:
            self._spawn(address, key, worker, len(workers))
        self._pump.start()

    def _spawn(
        self, address: tuple[str, int], key: bytes, worker: WorkerLaunch, num_workers: int
    ) -> None:
        """Start ``worker``, one of this process's ``num_workers``."""
        assert self._pump is not None
        env = without_launch_variables(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        set_threads(env, worker.threads, num_workers)
        env.update(worker.env)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        server = forkserver.get(worker.threads) if self._fork else None
        proc: forkserver.WorkerProcess
        try:
            if server is not None:
                proc = _fork(server, address, key, worker, env, (out_w, err_w))
            else:
                proc = _start_fresh(address, key, worker, env, (out_w, err_w))
        finally:
            os.close(out_w)
            os.close(err_w)
        self._procs[worker.rank] = proc
        self._pidfds[worker.rank] = os.pidfd_open(proc.pid)
        self._pump.add(
            worker.rank, os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)
        )

    def exit_fds(self) -> dict[int, int]:
        """A descriptor per running worker that becomes readable when it ends, by rank."""
        return dict(self._pidfds)

    def pids(self) -> dict[int, int]:
        """The running workers' pids, by rank."""
        return {rank: p.pid for rank, p in self._procs.items() if p.poll() is None}

    def reap(self, rank: int, timeout: float = 5.0) -> WorkerExited | None:
        """The end of worker ``rank`` (waiting up to ``timeout`` for it), reported once."""
        proc = self._procs.get(rank)
        if proc is None:
            return None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        del self._procs[rank]
        os.close(self._pidfds.pop(rank))
        output = self._pump.tail(rank, wait=_OUTPUT_WAIT_S) if self._pump is not None else ()
        return WorkerExited(rank, proc.pid, code, self.host, output)

    def stacks(self, fds: dict[int, int | None], timeout: float) -> dict[int, tuple[int, str]]:
        """The stacks of the running workers among ``fds`` (their stack files), by rank."""
        pids = {rank: pid for rank, pid in self.pids().items() if rank in fds}
        return stack_files.collect(pids, fds, timeout)

    def stop(self, grace_s: float) -> list[WorkerExited]:
        """Stop every worker (they were told to by the driver: SIGTERM unwinds their code,
        SIGKILL after ``grace_s``); the ends not reported before."""
        for proc in self._procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self._procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self._procs.values():
            _signal_group(proc.pid, signal.SIGKILL)  # and whatever it started
        ends = [end for rank in list(self._procs) if (end := self.reap(rank, 5.0)) is not None]
        self.close()
        return ends

    def close(self) -> None:
        """Kill what is left, and let go of the output and descriptors."""
        for proc in self._procs.values():
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        self._procs = {}
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds = {}
        if self._pump is not None:
            self._pump.join()
            self._pump = None


def _fork(
    server: forkserver.ForkServer,
    address: tuple[str, int],
    key: bytes,
    worker: WorkerLaunch,
    env: dict[str, str],
    output: tuple[int, int],
) -> forkserver.ForkedWorker:
    """A worker forked from the fork server; it connects to the driver itself (the key
    goes to the server over their private socket)."""
    to = forkserver.RemoteWorker(address=address, key=key, rank=worker.rank)
    request = forkserver.SpawnRequest(
        env=env, num_threads=worker.threads, imports=worker.imports, remote=to
    )
    return forkserver.ForkedWorker(server, server.spawn(request, list(output)))


def _start_fresh(
    address: tuple[str, int],
    key: bytes,
    worker: WorkerLaunch,
    env: dict[str, str],
    output: tuple[int, int],
) -> subprocess.Popen[bytes]:
    """A worker started from scratch; it connects to the driver itself, with the key
    given on its standard input (a command line is readable by every user of the node)."""
    host, port = address
    argv = [sys.executable, "-m", REMOTE_WORKER, host, str(port), str(worker.rank)]
    proc = subprocess.Popen(
        [*argv, str(os.getpid())],
        env=env,
        stdin=subprocess.PIPE,
        stdout=output[0],
        stderr=output[1],
        start_new_session=True,  # a terminal's Ctrl-C is the driver's to act on
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(key.hex().encode() + b"\n")
        proc.stdin.close()
    except OSError:
        pass  # it died at once: its exit says why
    return proc


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
