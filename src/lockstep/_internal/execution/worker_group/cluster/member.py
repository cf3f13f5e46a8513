"""A launched process other than the driver: it joins the run and serves its node.

Inside ``fit()`` it finds the driver (the join file in storage_path), connects with the
run's key, then starts, stops and inspects its workers as the driver says, and tells it
when one ends. When the run ends it returns the run's outcome, which becomes the
process's exit status, so that the script's code after ``fit()`` runs once: in the driver.

A scheduler's SIGTERM or SIGUSR1 (SLURM's warning before the time limit) is passed on to
the driver, which drains the run; this process goes on until the driver ends it.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection

from lockstep._core import flags, storage
from lockstep._internal.execution.plan import ExecutionPlan, Launcher
from lockstep._internal.execution.worker_group.cluster.agent import NodeAgent
from lockstep._internal.execution.worker_group.cluster.driver import join_file
from lockstep._internal.execution.worker_group.cluster.messages import (
    CollectStacks,
    EndRun,
    Joined,
    Signalled,
    Stacks,
    StartWorkers,
    StopWorkers,
    WorkersStopped,
)
from lockstep._internal.execution.worker_group.listener import keep_alive

# The driver went away without ending the run (its node died, it was killed): retryable,
# as a scheduler's restart policy reads 128-255 (128 + SIGTERM).
DRIVER_LOST_EXIT = 128 + signal.SIGTERM
_FORWARDED = (signal.SIGTERM, signal.SIGUSR1)


class MemberError(RuntimeError):
    """This process could not join the run."""


def serve(plan: ExecutionPlan, storage_root: storage.StorageDir) -> int:
    """Join the run of ``plan`` and serve this process's workers until it ends; return
    the exit status the run's outcome gives."""
    agent = NodeAgent(fork=plan.node_workers is Launcher.FORK_SERVER)
    # Until it has joined, a signal ends this process as usual: there is nothing to drain.
    conn, key = join(plan, storage_root, agent.host)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    previous = {sig: signal.signal(sig, lambda s, f: os.write(wake_w, bytes([s]))) for sig in
                _FORWARDED}  # fmt: skip
    try:
        with conn:
            return _Loop(conn, key, agent, wake_r).run()
    finally:
        agent.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)


def join(plan: ExecutionPlan, root: storage.StorageDir, host: str) -> tuple[Connection, bytes]:
    """Connect to the driver of this launch, once it has said where it is."""
    launch = plan.launch
    assert launch is not None
    name = join_file(launch.launch_id)
    deadline = time.monotonic() + flags.JOIN_TIMEOUT_S.get()
    last_error = ""
    while time.monotonic() < deadline:
        found = _read_join_file(root, name, launch.launch_id)
        if found is not None:
            try:
                return _connect(found, plan, host), found[1]
            except (OSError, EOFError, AuthenticationError) as exc:
                last_error = f" (the last try: {type(exc).__name__}: {exc})"
        time.sleep(0.2)  # the driver writes the file: there is nothing to wait on
    where = root.join(name)
    raise MemberError(
        f"launched process {launch.process_rank} on {host} found no driver to join in "
        f"{flags.JOIN_TIMEOUT_S.get():g} s{last_error}: the driver (process 0) writes where it "
        f"listens to {where}. If the driver's output shows it running, this node does not "
        "see its storage_path. HINT: put storage_path on storage every node sees (a shared "
        "file system, s3://, gs://); LOCKSTEP_JOIN_TIMEOUT_S sets how long to wait"
    )


def _read_join_file(
    root: storage.StorageDir, name: str, launch_id: str
) -> tuple[tuple[str, int], bytes] | None:
    try:
        content = json.loads(root.read_bytes(name))
    except (OSError, ValueError):
        return None
    if content.get("launch") != launch_id:
        return None  # a file of another launch (a stale one of a requeued job)
    return (content["address"], int(content["port"])), bytes.fromhex(content["key"])


def _connect(found: tuple[tuple[str, int], bytes], plan: ExecutionPlan, host: str) -> Connection:
    from lockstep._core.accelerators import visible_gpus

    assert plan.launch is not None
    address, key = found
    conn = Client(address, authkey=key)
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        own_address = sock.getsockname()[0]  # this node's, on the way to the driver
    finally:
        sock.close()
    keep_alive(conn)
    gpus = tuple(visible_gpus())
    conn.send(Joined(plan.launch.process_rank, host, own_address, os.getpid(), gpus))
    return conn


class _Loop:
    """Waits for the driver's requests, the workers' ends and signals; answers each."""

    def __init__(self, conn: Connection, key: bytes, agent: NodeAgent, wake_fd: int) -> None:
        self.conn, self.key, self.agent, self.wake_fd = conn, key, agent, wake_fd
        self.exit_code: int | None = None

    def run(self) -> int:
        while self.exit_code is None:
            with selectors.DefaultSelector() as selector:
                selector.register(self.conn, selectors.EVENT_READ, "driver")
                selector.register(self.wake_fd, selectors.EVENT_READ, "signal")
                for rank, fd in self.agent.exit_fds().items():
                    selector.register(fd, selectors.EVENT_READ, rank)
                for key, _ in selector.select():
                    self._on(key.data)
        return self.exit_code

    def _on(self, what: object) -> None:
        if what == "driver":
            try:
                self._answer(self.conn.recv())
            except (EOFError, OSError):
                self.exit_code = DRIVER_LOST_EXIT
        elif what == "signal":
            for number in os.read(self.wake_fd, 64):
                self._send(Signalled(signal.Signals(number).name, self.agent.host))
        else:
            assert isinstance(what, int)
            end = self.agent.reap(what)
            if end is not None:
                self._send(end)

    def _answer(self, message: object) -> None:
        if isinstance(message, StartWorkers):
            self.agent.start(message.address, self.key, message.workers)
        elif isinstance(message, StopWorkers):
            for end in self.agent.stop(message.grace_s):
                self._send(end)
            self._send(WorkersStopped())
        elif isinstance(message, CollectStacks):
            self._send(Stacks(self.agent.stacks(message.fds, message.timeout_s)))
        elif isinstance(message, EndRun):
            self.exit_code = message.exit_code

    def _send(self, message: object) -> None:
        try:
            self.conn.send(message)
        except OSError:
            self.exit_code = DRIVER_LOST_EXIT
