"""A worker of a run across nodes: started by its node's agent, it connects to the driver.

Run as ``python -m lockstep._internal.execution.worker.remote HOST PORT RANK PARENT_PID``
with the run's key, in hex, as the first line of its standard input (a command line is
readable by every user of the node). It connects to the driver at HOST:PORT, proves it
holds the key, says its rank and then runs as any worker. Where the node's process may
fork (as a local run's driver does), its fork server forks the worker instead, which then
does the same (``run_connected``) with nothing to import again.

A scheduler's SIGTERM (``scancel``, a time limit) reaches every process of the job, this
one too: it is the driver's to act on (commit the next report's checkpoint, then stop the
workers), so a worker takes SIGTERM only after the driver's Stop.
"""

from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Client
from typing import Any

from lockstep._internal.execution.worker import main as worker_main
from lockstep._internal.execution.worker import session as session_module
from lockstep._internal.execution.worker import stopping


def _on_sigterm(signum: int, frame: Any) -> None:
    session = session_module.current()
    if isinstance(session, session_module.WorkerSession) and session.stop_requested:
        worker_main.stop_handler(signum, frame)


def main() -> None:
    host, port, rank, parent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    key = bytes.fromhex(sys.stdin.readline().strip())
    run_connected((host, port), key, rank, parent)


def run_connected(address: tuple[str, int], key: bytes, rank: int, parent: int) -> None:
    """Connect to the driver at ``address``, prove it with the run's ``key``, say this is
    worker ``rank`` and run as it; exits the process when done. ``parent`` is the process
    this one dies with (its node's agent, or the fork server that forked it)."""
    stopping.install(_on_sigterm)
    worker_main.die_with_parent(parent)
    conn = Client(address, authkey=key)
    conn.send(rank)
    try:
        # read by a thread of its own: the driver's Stop must be seen while the function
        # runs (the SIGTERM that follows is taken only after it), and nothing kills this
        # process with the driver
        code = worker_main.run_worker(conn, in_process=False, read_inline=False)
    except worker_main.WorkerStopped:  # told to stop while reporting a result or a failure
        code = 128 + signal.SIGTERM
    worker_main.exit_process(code)


if __name__ == "__main__":
    main()
