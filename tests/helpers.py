"""Small helpers shared by the tests."""

from __future__ import annotations

import psutil

from lockstep._internal.execution.worker_group.process import forkserver


def worker_processes() -> list[psutil.Process]:
    """This process's descendants but the fork server, which stays warm by design."""
    server = forkserver.server_pid()
    return [p for p in psutil.Process().children(recursive=True) if p.pid != server]
