"""The README's Ray commands, run for real on two hosts (tests/cluster): start a head on
node1, join node2 to it, run the demo on the cluster from node1, and submit it as a Ray job.

The commands are taken from the README; only the head's address, the ports and the storage
path are filled in, and a private temp dir is added so that exactly this cluster is stopped.
"""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

from tests.ray_cluster import LocalRayCluster

pytestmark = pytest.mark.ray

README = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()


def ray_commands() -> list[str]:
    section = README.split("## On a Ray cluster", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_the_readme_shows_the_four_commands():
    commands = ray_commands()
    assert [c.split()[0:2] for c in commands] == [
        ["ray", "start"],
        ["ray", "start"],
        ["RAY_ADDRESS=HEAD_IP:6379", "lockstep"],
        ["ray", "job"],
    ]


# The job server submits through the head node's dashboard agent, which registers itself in
# Ray's key-value store some time after `ray start` returns: wait for that, or a submit
# fails with "No available agent". Run apart, so that this process never joins the cluster.
WAIT_FOR_JOB_AGENT = """
import sys, time, ray
from ray._private.ray_constants import KV_NAMESPACE_DASHBOARD
from ray.dashboard.consts import DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX
from ray.experimental.internal_kv import _internal_kv_get
ray.init(address=sys.argv[1], log_to_driver=False)
head = next(n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"])
key = DASHBOARD_AGENT_ADDR_NODE_ID_PREFIX + head
deadline = time.monotonic() + 120
while not _internal_kv_get(key, namespace=KV_NAMESPACE_DASHBOARD):
    assert time.monotonic() < deadline, "the head's dashboard agent never registered"
    time.sleep(0.2)
"""


@pytest.mark.timeout(600)
def test_readme_ray_commands(hosts, tmp_path):
    cluster = LocalRayCluster(hosts, head="node1")
    head_ip = hosts.address("node1")
    port, dashboard = cluster.free_port("node1"), cluster.free_port("node1")

    def fill(command: str) -> str:
        return (
            command.replace("HEAD_IP:6379", f"{head_ip}:{port}")
            .replace("--port=6379", f"--port={port}")
            # the dashboard listens on the head's loopback (Ray's default): submit from there
            .replace("HEAD_IP:8265", f"127.0.0.1:{dashboard}")
            .replace("/mnt/shared/runs", str(tmp_path / "runs"))
        )

    def run(host: str, command: str, extra: str = "") -> str:
        done = hosts.run(
            host, ["bash", "-c", fill(command) + extra], timeout=600, env=cluster.env()
        )
        return done.stdout + done.stderr

    head, join, demo, submit = ray_commands()

    def private(host: str) -> str:
        return f" --temp-dir={cluster.temp_dir} " + " ".join(cluster.node_ports(host))

    try:
        run(
            "node1",
            head,
            private("node1")
            + f" --num-cpus=2 --dashboard-port={dashboard} --disable-usage-stats"
            + f" --ray-client-server-port={cluster.free_port('node1')}",
        )
        run("node2", join, private("node2") + " --num-cpus=2 --disable-usage-stats")
        out = run("node1", demo, " --epochs 2 --limit 200 --name on-ray")
        assert "Validation accuracy:" in out
        assert (tmp_path / "runs" / "on-ray" / "training_curves.png").exists()
        hosts.run(
            "node1",
            [sys.executable, "-c", WAIT_FOR_JOB_AGENT, f"{head_ip}:{port}"],
            timeout=180,
            env=cluster.env(),
        )
        out = run("node1", submit, " --epochs 1 --limit 100 --name as-job")
        assert "Validation accuracy:" in out and "succeeded" in out
        assert (tmp_path / "runs" / "as-job" / "run_state.json").exists()
    finally:
        cluster.stop()
