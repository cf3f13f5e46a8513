"""InlineWorkerGroup: one worker, a thread of this process; for num_workers=0 and debugging.

The worker talks to the driver over a pipe exactly as a process worker does, so reports,
checkpoints and failures behave the same; a breakpoint in the training function just works.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from lockstep._core.errors import WorkerFailure
from lockstep._internal.execution.messages import WorkerStart
from lockstep._internal.execution.plan import ExecutionPlan, Topology
from lockstep._internal.execution.worker.main import run_worker
from lockstep._internal.execution.worker.stack_text import stacks_text
from lockstep._internal.execution.worker_group.base import (
    ConnectedWorkerGroup,
    WorkerGroupSpec,
    lost_connection,
)


class InlineWorkerGroup(ConnectedWorkerGroup):
    """Runs the single worker in a thread of the driver process."""

    def __init__(self, plan: ExecutionPlan) -> None:
        super().__init__(plan)
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None

    def _place(self, spec: WorkerGroupSpec) -> Topology:
        assert spec.num_workers == 1, "the inline group runs exactly one worker"
        return super()._place(spec)

    def _launch(
        self, spec: WorkerGroupSpec, starts: dict[int, WorkerStart]
    ) -> dict[int, Connection]:
        ours, theirs = Pipe()
        # Handed over as it is, never pickled: the function and its datasets are shared
        # with the driver (a Tune function trial's large objects are not copied).
        start = dataclasses.replace(starts[0], backend=spec.backend)
        self._thread = threading.Thread(
            target=self._run, args=(theirs, start), name="lockstep-inline-rank0", daemon=True
        )
        self._thread.start()
        self._conn = ours
        return {0: ours}

    @staticmethod
    def _run(conn: Connection, start: WorkerStart) -> None:
        # The worker's end is not closed here: the session's reader thread may be about
        # to read it, and a descriptor closed under it is soon another pipe's (the next
        # Tune trial's), whose messages it would take. It is closed when the last
        # reference goes, once the reader has seen the driver's end close.
        run_worker(conn, in_process=True, start=start)

    def _worker_pids(self) -> dict[int, int]:
        thread = self._thread
        return {0: os.getpid()} if thread is not None and thread.is_alive() else {}

    def _lost(self, rank: int) -> WorkerFailure:
        return lost_connection(rank, os.getpid())

    def collect_stacks(self, timeout: float = 2.0) -> dict[int, tuple[int, str]]:
        """The worker thread's stack (with the driver's other threads), for a hang."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread.ident is None:
            return {}
        text = f"main thread 0x{thread.ident:016x}\n"
        return {0: (os.getpid(), text + stacks_text(sys._current_frames(), thread.ident))}

    def _stop_workers(self, finished: frozenset[int]) -> None:
        # A thread cannot be killed: closing the pipe makes its next session call raise.
        if self._conn is not None:
            self._hang_up(0)
            self._conn = None
        if self._thread is not None:
            # A function hung in user code outlives this wait; it is a daemon thread and
            # ends at its next session call or when the process exits.
            self._thread.join(timeout=5.0)
            self._thread = None
