"""The driver's side of a cluster run: the other launched processes join it once, and it
keeps their connections for the whole run.

How a member finds the driver: the driver listens on its node's address (a port the kernel
picks) and writes where, with a key of this run's own, to a file in ``storage_path``
(``.lockstep/join-LAUNCH.json``, readable by its owner only), which every node must see
anyway: checkpoints are written there. A member that cannot see the file cannot join, and
says that storage_path is not shared. Once every member is in, the file is removed and
nothing listens until the workers of an attempt connect.
"""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from lockstep._core import flags, storage
from lockstep._internal.execution.plan import ExecutionPlan, Launcher, Member
from lockstep._internal.execution.worker_group.cluster.agent import NodeAgent
from lockstep._internal.execution.worker_group.cluster.messages import (
    EndRun,
    Joined,
    Signalled,
    WorkerExited,
)
from lockstep._internal.execution.worker_group.listener import Listener, keep_alive

JOIN_DIR = ".lockstep"
logger = logging.getLogger(__name__)


def join_file(launch_id: str) -> str:
    """The file, under storage_path, that tells the members of launch ``launch_id`` where
    the driver is."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in launch_id)
    return f"{JOIN_DIR}/join-{safe}.json"


class DriverSession:
    """The members' connections, this node's agent, and what the members report."""

    def __init__(self, plan: ExecutionPlan, storage_root: storage.StorageDir) -> None:
        assert plan.launch is not None
        self.plan = plan
        self.launch = plan.launch
        self.key = secrets.token_bytes(32)
        self.agent = NodeAgent(fork=plan.node_workers is Launcher.FORK_SERVER)
        self.members: list[Member] = []
        self.on_signal: Callable[[str], None] = lambda reason: None
        # a launched process gone (with its node?) where the launcher starts the run
        # again without it (torchrun's elastic rendezvous): the run stops, to go on there
        self.on_member_lost: Callable[[str], None] | None = None
        self._root = storage_root
        self._conns: dict[int, Connection] = {}
        self._replies: dict[int, queue.Queue[Any]] = {}
        self._exits: dict[int, WorkerExited] = {}
        self._gone: dict[int, str] = {}  # members whose connection closed, with their host
        self._changed = threading.Condition()
        self._readers: list[threading.Thread] = []

    # joining

    def open(self) -> None:
        """Wait for every other launched process to join (``LOCKSTEP_JOIN_TIMEOUT_S``)."""
        here = Member(0, self.agent.host, self.plan.listen_host, _gpus())
        self.members = [here]
        expected = self.launch.num_processes - 1
        with Listener(self.plan.listen_host, self.key) as listener:
            name = join_file(self.launch.launch_id)
            self._write_join_file(name, listener.address)
            try:
                peers = listener.accept(
                    expected, timeout=flags.JOIN_TIMEOUT_S.get(), what="launched processes"
                )
            except TimeoutError:
                raise self._missing(name) from None
            finally:
                self._root.remove(name)
        for joined, conn in peers.items():
            self._add(joined, conn)

    def _write_join_file(self, name: str, address: tuple[str, int]) -> None:
        content = {"address": address[0], "port": address[1], "key": self.key.hex()}
        content["launch"] = self.launch.launch_id
        self._root.makedirs(JOIN_DIR)
        write_private(self._root, name, json.dumps(content).encode())

    def _add(self, joined: Any, conn: Connection) -> None:
        assert isinstance(joined, Joined), joined
        keep_alive(conn)
        self.members.append(Member(joined.process_rank, joined.host, joined.address, joined.gpus))
        self._conns[joined.process_rank] = conn
        self._replies[joined.process_rank] = queue.Queue()
        reader = threading.Thread(
            target=self._read,
            args=(joined.process_rank, conn),
            name=f"lockstep-member-{joined.process_rank}",
            daemon=True,
        )
        reader.start()
        self._readers.append(reader)

    def _missing(self, name: str) -> RuntimeError:
        joined = {m.process_rank for m in self.members} | set(self._conns)
        missing = [r for r in range(self.launch.num_processes) if r not in joined]
        return RuntimeError(
            f"launched processes {missing} of {self.launch.num_processes} ({self.launch.launcher}"
            f") did not join the run within {flags.JOIN_TIMEOUT_S.get():g} s. Each runs this "
            f"script and reads where the driver is from {self._root.join(name)}: "
            "storage_path must be a path every node sees (a shared file system, s3://, "
            "gs://). HINT: put storage_path on shared storage; look at the other processes' "
            "output for their error; LOCKSTEP_JOIN_TIMEOUT_S sets how long to wait"
        )

    # what members say

    def _read(self, process_rank: int, conn: Connection) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = None
            if isinstance(message, WorkerExited):
                with self._changed:
                    self._exits[message.rank] = message
                    self._changed.notify_all()
            elif isinstance(message, Signalled):
                self.on_signal(f"{message.signal_name} on {message.host}")
            else:
                self._replies[process_rank].put(message)
                if message is None:
                    self._member_gone(process_rank)
                    return

    def _member_gone(self, process_rank: int) -> None:
        host = next(m.host for m in self.members if m.process_rank == process_rank)
        if self.on_member_lost is not None:
            # before it is seen gone: its workers' failures are the stop's doing
            self.on_member_lost(
                f"launched process {process_rank} on {host} was lost (its node left the "
                f"{self.launch.launcher} rendezvous); the launcher starts the run again "
                "without it, from the latest checkpoint"
            )
        with self._changed:
            self._gone[process_rank] = host
            self._changed.notify_all()

    def exit_of(self, rank: int, process_rank: int, timeout: float) -> WorkerExited | None:
        """How worker ``rank`` ended, waiting up to ``timeout`` for its member (launched
        process ``process_rank``) to say; None at once when the member is gone too."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while rank not in self._exits and process_rank not in self._gone:
                if (left := deadline - time.monotonic()) <= 0:
                    break
                self._changed.wait(left)
            return self._exits.get(rank)

    def exits(self) -> dict[int, WorkerExited]:
        with self._changed:
            return dict(self._exits)

    def check_members(self) -> None:
        """Raise when a launched process is gone: its workers cannot start again."""
        with self._changed:
            gone = dict(self._gone)
        if gone:
            rank, host = min(gone.items())
            raise RuntimeError(
                f"launched process {rank} on {host} ended (or its node did) before the run "
                "did: its node's workers cannot start. HINT: look at its output; the "
                "scheduler may restart the job, which then continues from the latest "
                "checkpoint"
            )

    def new_attempt(self) -> None:
        with self._changed:
            self._exits.clear()

    def send(self, process_rank: int, message: object) -> None:
        try:
            self._conns[process_rank].send(message)
        except OSError:
            pass  # it is gone: its workers' connections say so

    def reply(self, process_rank: int, timeout: float) -> Any:
        """The member's next answer (None: it is gone or did not answer in time)."""
        with self._changed:
            if process_rank in self._gone and self._replies[process_rank].empty():
                return None
        try:
            return self._replies[process_rank].get(timeout=timeout)
        except queue.Empty:
            return None

    def member_ranks(self) -> list[int]:
        return sorted(self._conns)

    def end(self, exit_code: int) -> None:
        """The run is over: every member exits with ``exit_code``."""
        self.on_member_lost = None  # they leave now
        self.agent.close()
        for process_rank, conn in self._conns.items():
            self.send(process_rank, EndRun(exit_code))
            conn.close()
        self._conns = {}
        for reader in self._readers:
            reader.join(timeout=5.0)


def write_private(root: storage.StorageDir, rel: str, data: bytes) -> None:
    """Write ``data`` readable by its owner only, where the file system has owners."""
    if root.is_local:
        import os

        path = root.join(rel)
        tmp = f"{path}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    else:
        root.write_atomic(rel, data)


def _gpus() -> tuple[str, ...]:
    from lockstep._core.accelerators import visible_gpus

    return tuple(visible_gpus())
