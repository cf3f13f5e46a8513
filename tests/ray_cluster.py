"""A real Ray cluster on this machine, started with `ray start` for the tests.

Its processes are found by the temp dir they share, so the tests stop exactly them (and
never another Ray on the machine). A second node can be added, and killed mid-run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

import psutil

# Fast failure detection: a killed node is declared dead in about a second.
SYSTEM_CONFIG = {
    "health_check_period_ms": 200,
    "health_check_failure_threshold": 3,
    "health_check_initial_delay_ms": 0,
}


def ray_env() -> dict[str, str]:
    """This environment, with Ray's token authentication off for the test clusters: a token
    that any ray.init() on this machine left in ~/.ray would otherwise turn it on for the
    nodes but not for the clients."""
    return {**os.environ, "RAY_AUTH_MODE": "disabled"}


def _ray() -> str:
    return os.path.join(os.path.dirname(sys.executable), "ray")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_ports() -> list[str]:
    """Free ports for a node's agents: the defaults are fixed, and two nodes (or two
    clusters) on one machine would fight over them."""
    return [
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]


CLUSTER_MARK = "LOCKSTEP_TEST_RAY_CLUSTER"
_STARTED: list[str] = []  # every cluster's temp dir, for the suite's end-of-session check


def started_temp_dirs() -> list[str]:
    """The temp directories of the clusters this session created (stop() removes them)."""
    return list(_STARTED)


class LocalRayCluster:
    """A head node and, on demand, more nodes, all on this machine."""

    def __init__(self) -> None:
        # short: Ray's unix socket paths under it must stay below 108 characters
        self.temp_dir = f"/tmp/lsray-{secrets.token_hex(3)}"
        self.address = ""
        _STARTED.append(self.temp_dir)

    def env(self) -> dict[str, str]:
        """The environment of this cluster's ``ray start`` commands: every process they
        start inherits the mark, so that stop() finds even those whose command line does
        not name the temp dir (the Ray client server's does not)."""
        return {**ray_env(), CLUSTER_MARK: self.temp_dir}

    def start_head(self, num_cpus: int = 4, dashboard_port: int | None = None) -> str:
        """Start the head; with ``dashboard_port`` also Ray's dashboard (and job server)."""
        port = free_port()
        dashboard = (
            [f"--dashboard-port={dashboard_port}", "--dashboard-host=127.0.0.1"]
            if dashboard_port
            else ["--include-dashboard=false"]
        )
        self._ray_start(
            "--head",
            f"--port={port}",
            f"--ray-client-server-port={free_port()}",  # not 10001: clusters would fight
            f"--num-cpus={num_cpus}",
            *dashboard,
            "--disable-usage-stats",
            f"--system-config={json.dumps(SYSTEM_CONFIG)}",
        )
        self.address = f"127.0.0.1:{port}"
        return self.address

    def add_node(self, num_cpus: int, resources: dict[str, float]) -> int:
        """Start another node; return the port its raylet listens on (its name here)."""
        port = free_port()
        self._ray_start(
            f"--address={self.address}",
            f"--num-cpus={num_cpus}",
            f"--resources={json.dumps(resources)}",
            f"--node-manager-port={port}",
            "--disable-usage-stats",
        )
        return port

    def kill_node(self, node_manager_port: int) -> None:
        """Kill the node's raylet, as when a machine dies."""
        for proc in self._processes():
            try:
                if f"--node_manager_port={node_manager_port}" in " ".join(proc.cmdline()):
                    proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:  # gone, or a zombie not yet reaped by its parent
                continue

    def stop(self) -> None:
        for proc in self._processes():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(self._processes(), timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _ray_start(self, *args: str) -> None:
        subprocess.run(
            [_ray(), "start", f"--temp-dir={self.temp_dir}", *args],
            env=self.env(),
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def _processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(self.temp_dir in part for part in proc.info["cmdline"] or ()) or (
                    proc.environ().get(CLUSTER_MARK) == self.temp_dir
                ):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def wait_for_nodes(self, count: int, timeout: float = 60) -> None:
        import ray

        deadline = time.monotonic() + timeout
        while sum(n["Alive"] for n in ray.nodes()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster never had {count} nodes alive")
            time.sleep(0.2)

    def wait_for_nodes_dead(self, alive: int, timeout: float = 60) -> None:
        import ray

        deadline = time.monotonic() + timeout
        while sum(n["Alive"] for n in ray.nodes()) > alive:
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster still has more than {alive} nodes alive")
            time.sleep(0.2)
