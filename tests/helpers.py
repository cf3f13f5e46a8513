"""Small helpers shared by the tests."""

from __future__ import annotations

import psutil

from lockstep._internal.execution import forkserver


def worker_processes() -> list[psutil.Process]:
    """This process's descendants but the fork server, which stays warm by design."""
    server = forkserver.server_pid()
    return [p for p in psutil.Process().children(recursive=True) if p.pid != server]


def listening_addresses() -> set[str]:
    """``ip:port`` of every TCP socket this process and its descendants listen on."""
    me = psutil.Process()
    found = set()
    for proc in [me, *me.children(recursive=True)]:
        try:
            connections = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                found.add(f"{conn.laddr.ip}:{conn.laddr.port}")
    return found
