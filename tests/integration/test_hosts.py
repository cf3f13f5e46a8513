"""The hosts and the schedulers on them, tested themselves: separate networks that reach
each other and nothing else, real SLURM, MPI, torchrun, SageMaker's toolkit, Kubeflow's
pods, and a `down` that leaves nothing."""

from __future__ import annotations

import functools
import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.cluster import kubeflow, launchers, sagemaker
from tests.cluster.fixtures import require
from tests.cluster.hosts import Hosts
from tests.helpers import worker_processes

ALLREDUCE = str(Path(__file__).resolve().parents[1] / "cluster" / "allreduce.py")


def machine_addresses() -> set[str]:
    """This machine's own IPv4 addresses, loopback aside."""
    return {
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    }


def test_hosts_reach_each_other_by_name_and_nothing_else(hosts):
    done = hosts.run("node1", ["ping", "-c", "1", "-W", "5", "node2"])
    assert "1 received" in done.stdout
    assert hosts.run("node2", ["hostname"]).stdout.strip() == "node2"
    # no route out: the machine's own addresses are not even tried
    for address in machine_addresses():
        route = hosts.run("node1", ["ip", "route", "get", address], check=False)
        assert route.returncode != 0 and "unreachable" in route.stderr
    routes = hosts.run("node1", ["ip", "-4", "route"]).stdout.splitlines()
    assert [r.split()[0] for r in routes] == [f"{hosts.subnet}.0/24"]


SERVE = """
import socket, sys
with socket.create_server((sys.argv[1], 0)) as s:
    print(s.getsockname()[1], flush=True)
    conn, peer = s.accept()
    with conn:
        conn.sendall(f"{socket.gethostname()} saw {peer[0]}: ".encode() + conn.recv(100))
"""
CONNECT = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as c:
    c.sendall(b"hello")
    print(c.recv(100).decode())
"""


def test_a_tcp_connection_crosses_hosts(hosts):
    server = hosts.popen(
        "node2", [sys.executable, "-c", SERVE, hosts.address("node2")], stdout=subprocess.PIPE
    )
    try:
        port = server.stdout.readline().strip()
        done = hosts.run("node1", [sys.executable, "-c", CONNECT, "node2", port], timeout=60)
    finally:
        server.wait(timeout=30)
        server.stdout.close()
    assert done.stdout.strip() == f"node2 saw {hosts.address('node1')}: hello"


def test_srun_runs_on_both_nodes_with_their_ranks(slurm):
    assert not worker_processes()  # the daemons are no children of the tests (init's)
    done = slurm.srun(["-N2", "--ntasks-per-node=1", "hostname"])
    assert sorted(done.stdout.split()) == ["node1", "node2"]
    line = "echo $SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID $(hostname) $SLURM_JOB_NODELIST"
    done = slurm.srun(["-N2", "--ntasks-per-node=2", "sh", "-c", line])
    assert sorted(done.stdout.splitlines()) == [
        "0 0 0 node1 node[1-2]",
        "1 0 1 node1 node[1-2]",
        "2 1 0 node2 node[1-2]",
        "3 1 1 node2 node[1-2]",
    ]


def test_openmpi_starts_ranks_on_both_hosts(hosts):
    require(launchers.OPEN_MPI)
    line = "echo $(hostname) $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE"
    line += " $OMPI_COMM_WORLD_LOCAL_RANK $OMPI_COMM_WORLD_LOCAL_SIZE"
    argv = launchers.openmpi(hosts, ["node1", "node2"], 2, ["sh", "-c", line])
    done = hosts.run("node1", argv, timeout=60)
    assert sorted(done.stdout.splitlines()) == [
        "node1 0 4 0 2",
        "node1 1 4 1 2",
        "node2 2 4 0 2",
        "node2 3 4 1 2",
    ]


def test_mpich_starts_ranks_on_both_hosts(hosts):
    require(launchers.MPICH)
    line = "echo $(hostname) $PMI_RANK $PMI_SIZE $MPI_LOCALRANKID $MPI_LOCALNRANKS"
    argv = launchers.mpich(hosts, ["node1", "node2"], 1, ["sh", "-c", line])
    done = hosts.run("node1", argv, timeout=60)
    assert sorted(done.stdout.splitlines()) == ["node1 0 2 0 1", "node2 1 2 0 1"]


def test_mpirun_inside_an_sbatch_allocation(slurm, tmp_path):
    require(launchers.OPEN_MPI, launchers.MPICH)
    out = tmp_path / "job.out"
    openmpi = "echo openmpi $(hostname) $OMPI_COMM_WORLD_RANK $SLURM_PROCID $SLURM_NTASKS"
    mpich = "echo mpich $(hostname) $PMI_RANK $SLURM_PROCID"
    lines = [
        launchers.openmpi_in_allocation(slurm.hosts, ["sh", "-c", openmpi]),
        launchers.mpich_in_allocation(["sh", "-c", mpich]),
    ]
    script = f"#!/bin/sh\n#SBATCH -N2 --ntasks-per-node=2 -o {out}\n"
    script += "".join(shlex.join(line) + "\n" for line in lines)
    job = slurm.sbatch(script)
    assert slurm.wait(job, timeout=120) == "COMPLETED", out.read_text()
    # Open MPI's ranks all see SLURM_PROCID=0, and SLURM_NTASKS differs between the nodes
    assert sorted(line for line in out.read_text().splitlines() if "openmpi" in line) == [
        "openmpi node1 0 0 4",
        "openmpi node1 1 0 4",
        "openmpi node2 2 0 1",
        "openmpi node2 3 0 1",
    ]
    assert sorted(line for line in out.read_text().splitlines() if "mpich" in line) == [
        "mpich node1 0 0",
        "mpich node1 1 0",
        "mpich node2 2 1",
        "mpich node2 3 1",
    ]


def run_on_each(hosts, commands, timeout: float = 240) -> dict[str, str]:
    """Start each host's command at once (``host: (argv, popen options)``), wait for all to
    succeed; each host's standard output."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    started = {
        host: hosts.popen(host, argv, **pipes, **options)
        for host, (argv, options) in commands.items()
    }
    outputs = {host: proc.communicate(timeout=timeout) for host, proc in started.items()}
    for host, proc in started.items():
        assert proc.returncode == 0, f"{host}: {outputs[host][0][-2000:]}{outputs[host][1][-3000:]}"
    return {host: out for host, (out, _) in outputs.items()}


def ranks_seen(outputs: dict[str, str]) -> list[dict]:
    """What each process of ``allreduce.py`` printed, by rank."""
    seen = [json.loads(line) for out in outputs.values() for line in out.splitlines()]
    return sorted(seen, key=lambda s: s["rank"])


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_torchrun_agents_on_two_hosts_all_reduce(hosts, rendezvous):
    endpoint = f"{hosts.address('node1') if rendezvous == 'static' else 'node1'}:29400"
    agent = functools.partial(
        launchers.torchrun, [ALLREDUCE], nnodes=2, nproc_per_node=2, endpoint=endpoint
    )
    if rendezvous == "static":
        commands = {h: (agent(node_rank=r), {}) for r, h in enumerate(["node1", "node2"])}
    else:
        commands = {h: (agent(rdzv_id="allreduce"), {}) for h in ["node1", "node2"]}
    seen = ranks_seen(run_on_each(hosts, commands))
    assert [s["rank"] for s in seen] == [0, 1, 2, 3]
    assert {s["sum"] for s in seen} == {10.0}  # 1 + 2 + 3 + 4, on every rank
    # a node's ranks are contiguous (which node is rank 0's under c10d is the agents' race)
    assert [s["host"] for s in seen] in (
        ["node1"] * 2 + ["node2"] * 2,
        ["node2"] * 2 + ["node1"] * 2,
    )
    assert [s["env"]["LOCAL_RANK"] for s in seen] == ["0", "1", "0", "1"]
    assert {s["env"]["WORLD_SIZE"] for s in seen} == {"4"}


ENTRY_POINT = """
import json, os, sys
seen = {k: os.environ[k] for k in ("SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_CPUS", "SM_MODEL_DIR")}
seen["data"] = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "rows.csv")).read()
seen["args"] = sys.argv[1:]
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
"""


@pytest.mark.slow
def test_sagemaker_toolkit_trains_on_two_instances(hosts, tmp_path):
    train = str(Path(sys.executable).parent / "train")  # the toolkit's command
    require(train)
    source, data = tmp_path / "source", tmp_path / "data"
    source.mkdir()
    data.mkdir()
    (source / "entry.py").write_text(ENTRY_POINT)
    (data / "rows.csv").write_text("x,y\n1,2\n")
    names = sagemaker.instances(hosts, ["node1", "node2"])
    commands = {}
    for node, name in zip(["node1", "node2"], names, strict=True):
        env = sagemaker.tree(
            tmp_path / name,
            current_host=name,
            hosts=names,
            entry_point="entry.py",
            source_dir=source,
            hyperparameters={"epochs": 3},
            channels={"train": data},
        )
        commands[node] = ([train], {"as_name": name, "env": env})
    run_on_each(hosts, commands, timeout=120)
    for name in names:
        assert (tmp_path / name / "output" / "success").exists()
        seen = json.loads((tmp_path / name / "model" / "seen.json").read_text())
        assert seen["SM_CURRENT_HOST"] == name
        assert json.loads(seen["SM_HOSTS"]) == names
        assert seen["SM_MODEL_DIR"] == str(tmp_path / name / "model")
        assert seen["data"] == "x,y\n1,2\n"
        assert seen["args"] == ["--epochs", "3"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pytorchjob_pods_join_one_world(hosts):
    pods = kubeflow.pytorchjob("mnist", num_workers=1)
    commands = pod_commands(hosts, pods, [sys.executable, ALLREDUCE])
    seen = ranks_seen(run_on_each(hosts, commands))
    assert [(s["host"], s["rank"], s["sum"]) for s in seen] == [
        ("mnist-master-0", 0, 3.0),
        ("mnist-worker-0", 1, 3.0),
    ]
    assert {s["env"]["MASTER_ADDR"] for s in seen} == {"mnist-master-0"}
    assert [s["env"]["PET_NODE_RANK"] for s in seen] == ["0", "1"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_trainjob_pods_run_a_bare_torchrun(hosts):
    pods = kubeflow.trainjob("tj", num_nodes=2, nproc_per_node=2)
    commands = pod_commands(hosts, pods, ["torchrun", ALLREDUCE])
    seen = ranks_seen(run_on_each(hosts, commands))
    assert [s["rank"] for s in seen] == [0, 1, 2, 3]
    assert {s["sum"] for s in seen} == {10.0}
    assert [s["host"] for s in seen] == ["tj-node-0-0"] * 2 + ["tj-node-0-1"] * 2
    assert [s["env"]["GROUP_RANK"] for s in seen] == ["0", "0", "1", "1"]


def pod_commands(hosts, pods, argv):
    """Each pod on its own host (node1, node2, ...), named as the controller names it."""
    nodes = hosts.names[: len(pods)]
    for node, pod in zip(nodes, pods, strict=True):
        hosts.alias(node, *pod.dns_names)
    return {n: (argv, {"as_name": p.name, "env": p.env}) for n, p in zip(nodes, pods, strict=True)}


def test_down_leaves_nothing(tmp_path):
    links_before = set(psutil.net_if_addrs())
    made = Hosts(["a", "b"], prefix=f"lshdown{os.getpid()}", subnet="10.231.9")
    made.up()
    try:
        # a daemon: it leaves its parent (which exits) and its session, as slurmstepd does
        made.run("b", ["setsid", "--fork", "sh", "-c", "exec sleep 600 >/dev/null 2>&1"])
        (daemon,) = made.pids("b")
        assert psutil.Process(daemon).cmdline() == ["sleep", "600"]
    finally:
        made.down()
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert made.prefix not in namespaces
    assert not made.dir.exists()
    assert set(psutil.net_if_addrs()) == links_before
    assert made.prefix not in Path("/proc/self/mountinfo").read_text()


def test_readme_hosts_commands():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Multi-node tests on one machine", 1)[1]
    commands = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert commands.splitlines()[0] == "scripts/hosts.sh up 2"
    prefix = f"lshreadme{os.getpid()}"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LOCKSTEP_HOSTS_PREFIX": prefix}
    env.pop("LOCKSTEP_HOSTS_SUBNET", None)  # the README's commands use the default subnet
    try:
        done = subprocess.run(
            ["bash", "-e", "-c", commands],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:  # whatever failed, take down what came up
        subprocess.run(["bash", "scripts/hosts.sh", "down"], cwd=root, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node1\t10.231.0.1" in done.stdout and "1 received" in done.stdout
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in namespaces
