"""A real Ray cluster for the tests, started with `ray start`, each node on a host of its own
(tests/cluster: a network namespace, so the cluster listens on the hosts' addresses and
loopback only, never on the machine's own interface).

A node dies as a machine does: every process on its host is killed (raylet, log monitor,
agents, workers), so nothing of it outlives the test. The cluster's processes are also
found by the temp dir they share, so stop() ends exactly them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time

import psutil

from tests.cluster.hosts import Hosts

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


def _ray() -> list[str]:
    """Ray's command line, run by this interpreter (a virtualenv may have no ``ray`` script)."""
    return [sys.executable, "-m", "ray.scripts.scripts"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CLUSTER_MARK = "LOCKSTEP_TEST_RAY_CLUSTER"
_STARTED: list[str] = []  # every cluster's temp dir, for the suite's end-of-session check


def started_temp_dirs() -> list[str]:
    """The temp directories of the clusters this session created (stop() removes them)."""
    return list(_STARTED)


class LocalRayCluster:
    """A head node on ``head`` and, on demand, more nodes on other hosts."""

    def __init__(self, hosts: Hosts, head: str = "node1") -> None:
        # short: Ray's unix socket paths under it must stay below 108 characters
        self.temp_dir = f"/tmp/lsray-{secrets.token_hex(3)}"
        self.hosts = hosts
        self.head = head
        self.address = ""
        _STARTED.append(self.temp_dir)

    def env(self) -> dict[str, str]:
        """The environment of this cluster's ``ray start`` commands: every process they
        start inherits the mark, so that stop() finds even those whose command line does
        not name the temp dir (the Ray client server's does not)."""
        return {**ray_env(), CLUSTER_MARK: self.temp_dir}

    def free_port(self, host: str) -> int:
        """A port free on ``host``."""
        with self.hosts.inside(host):
            return free_port()

    def node_ports(self, host: str) -> list[str]:
        """Free ports on ``host`` for a node's agents: Ray's defaults are fixed, and two
        nodes on one host (of two clusters) would fight over them."""
        names = ("dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent")
        return [f"--{name}-port={self.free_port(host)}" for name in (*names, "metrics-export")]

    def start_head(self, num_cpus: int = 4) -> str:
        """Start the head; return its address (``ray.init`` it from the head's host)."""
        port = self.free_port(self.head)
        self.ray_start(
            self.head,
            "--head",
            f"--port={port}",
            f"--ray-client-server-port={self.free_port(self.head)}",
            f"--num-cpus={num_cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--system-config={json.dumps(SYSTEM_CONFIG)}",
        )
        self.address = f"{self.hosts.address(self.head)}:{port}"
        return self.address

    def add_node(self, host: str, num_cpus: int, resources: dict[str, float]) -> str:
        """Start a node on ``host``; return the host (the node's name here)."""
        assert host != self.head, "the head's host is the head's"
        self.ray_start(
            host,
            f"--address={self.address}",
            f"--num-cpus={num_cpus}",
            f"--resources={json.dumps(resources)}",
            "--disable-usage-stats",
        )
        return host

    def kill_node(self, host: str) -> None:
        """Kill every process on ``host``, as when the machine dies (a host that runs a
        node of this cluster runs nothing else)."""
        assert host != self.head, "the tests never kill the head's host"
        self.hosts.kill(host)

    def stop(self) -> None:
        for proc in self._processes():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(self._processes(), timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def ray_start(self, host: str, *args: str) -> None:
        """``ray start ARGS`` on ``host``, with this cluster's temp dir and address."""
        where = [f"--temp-dir={self.temp_dir}", f"--node-ip-address={self.hosts.address(host)}"]
        self.hosts.run(
            host,
            [*_ray(), "start", *where, *args],
            env=self.env(),
            timeout=120,
        )

    def _processes(self) -> list[psutil.Process]:
        """The cluster's processes, and their children: a raylet's agents rename themselves
        (``ray::DashboardAgent``), which overwrites their command line and environment."""
        found = set()
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(self.temp_dir in part for part in proc.info["cmdline"] or ()) or (
                    proc.environ().get(CLUSTER_MARK) == self.temp_dir
                ):
                    found |= {proc, *proc.children(recursive=True)}
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return list(found)

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
