"""``lockstep status`` on runs whose ranks are not the driver's children: on the Ray
executor (Ray's actors), and across two hosts (a torchrun agent on each, one worker on
each host, the driver on the first). Rank 1 is stuck in its own code until the test says
stop; rank 0 waits for it in report().
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lockstep import train
from tests.integration.test_schedulers import finish, start_on_hosts, torchrun_on_two_hosts

pytestmark = pytest.mark.slow

LOCKSTEP = os.path.join(os.path.dirname(sys.executable), "lockstep")
HERE = os.path.basename(__file__)


def wait_for(stop: str) -> None:
    while not os.path.exists(stop):
        time.sleep(0.05)  # the rank is stuck here until the test makes the file


def stuck_rank(config):  # type: ignore[no-untyped-def]
    rank = train.get_context().get_world_rank()
    train.report({"step": 1})
    if rank == 1:
        wait_for(config["stop"])
    train.report({"step": 2})


WAIT_AT = f"wait_for() at {HERE}:{inspect.getsourcelines(wait_for)[1] + 2}"

DRIVER = """\
import sys
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
from tests.integration.test_status_nodes import stuck_rank
{setup}
DataParallelTrainer(stuck_rank, train_loop_config={{'stop': sys.argv[2]}},
    scaling_config=ScalingConfig(num_workers=2{executor}),
    run_config=RunConfig(name='stuck', storage_path=sys.argv[1], verbose=0)).fit()
"""


def status(ask: Callable[[list[str]], subprocess.CompletedProcess[str]], storage: Path, *args: str):  # type: ignore[no-untyped-def]
    done = ask([LOCKSTEP, "status", "stuck", "--storage-path", str(storage), *args])
    assert done.returncode == 0, done.stderr
    return done.stdout


def until_stuck(ask, storage: Path) -> dict:  # type: ignore[no-untyped-def]
    """Ask until rank 0 waits in report() for step 2 and rank 1 has been in its own code
    for a while (the run starts, then gets there)."""
    deadline = time.monotonic() + 120
    answer: dict = {}
    while time.monotonic() < deadline:
        done = ask([LOCKSTEP, "status", "stuck", "--storage-path", str(storage), "--json"])
        if done.returncode == 0:
            answer = json.loads(done.stdout)
            ranks = answer.get("ranks", [])
            if [r["phase"] for r in ranks] == ["report", "training"] and WAIT_AT in (
                ranks[1]["detail"]
            ):
                return answer
        time.sleep(0.2)
    raise AssertionError(f"the ranks never showed where they are: {answer}")


def ask_while_stuck(ask, storage: Path) -> tuple[dict, dict, str]:  # type: ignore[no-untyped-def]
    """Once the run is stuck: its status as JSON, with the stacks, and as text."""
    answer = until_stuck(ask, storage)
    stacks = json.loads(status(ask, storage, "--json", "--stacks"))
    return answer, stacks, status(ask, storage)


def check_stuck(answer: dict, nodes: list[str]) -> None:
    """Rank 1 named with its pid, node and where it is; rank 0 waiting for it."""
    ranks = answer["ranks"]
    assert answer["state"] == "running"
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["node"] for r in ranks] == nodes
    assert [r["steps"] for r in ranks] == [2, 1]
    assert all(isinstance(r["pid"], int) for r in ranks), ranks
    assert ranks[0]["detail"] == "waits for the others in report() for step 2"
    assert ranks[1]["detail"] == f"in {WAIT_AT}"
    assert ranks[1]["seconds_in_phase"] > 1.0
    assert all(r["since_last_report_s"] > 0 for r in ranks)
    pid, node = ranks[1]["pid"], ranks[1]["node"]
    assert answer["summary"].startswith(
        f"rank 1 (pid {pid}, node {node}) has been in its own code for "
    ), answer["summary"]
    assert answer["summary"].endswith(f" in {WAIT_AT}; rank 0 waits in report() for step 2")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_status_of_a_run_on_the_ray_executor(ray_cluster, tmp_path):  # type: ignore[no-untyped-def]
    from tests.ray_cluster import ray_env

    stop = tmp_path / "stop"
    script = tmp_path / "driver.py"
    setup = f"import ray; ray.init(address={ray_cluster.address!r}, log_to_driver=False)"
    script.write_text(DRIVER.format(setup=setup, executor=", executor='ray'"))
    hosts = ray_cluster.hosts
    driver = hosts.popen(
        "node1",
        [sys.executable, str(script), str(tmp_path), str(stop)],
        env={**ray_env(), "PYTHONPATH": os.getcwd()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def ask(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    try:
        answer, stacks, text = ask_while_stuck(ask, tmp_path)
    finally:
        stop.touch()
        _, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, err
    address = hosts.address("node1")
    check_stuck(answer, [address, address])
    assert "in stuck_rank" in stacks["ranks"][0]["stack"]  # in report()
    assert "in wait_for" in stacks["ranks"][1]["stack"], stacks["ranks"][1]
    assert "in stuck_rank" in stacks["ranks"][1]["stack"]
    check_text(text, answer, address)


@pytest.mark.timeout(300)
def test_status_of_a_run_across_two_hosts_from_the_drivers_host(hosts, tmp_path):  # type: ignore[no-untyped-def]
    """A torchrun agent on node1 and node2, a worker on each; ``lockstep status`` run on
    node1, where the driver is."""
    stop = tmp_path / "stop"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(setup="", executor=""))
    argv = [sys.executable, str(script), str(tmp_path), str(stop)]
    env = {"env": {"PYTHONPATH": os.getcwd()}}
    started = start_on_hosts(
        hosts, torchrun_on_two_hosts(hosts, argv, nproc_per_node=1), node1=env, node2=env
    )

    def ask(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return hosts.run("node1", argv, timeout=60, check=False)

    try:
        answer, stacks, text = ask_while_stuck(ask, tmp_path)
    finally:
        stop.touch()
        outputs = finish(started, timeout=120)
    for host, proc in started.items():
        assert proc.returncode == 0, f"{host}: {outputs[host][-3000:]}"
    check_stuck(answer, [hosts.address("node1"), hosts.address("node2")])
    # the second host's worker: its pid there, its stack read by its node's process
    assert "in wait_for" in stacks["ranks"][1]["stack"], stacks["ranks"][1]
    assert "in stuck_rank" in stacks["ranks"][0]["stack"]
    check_text(text, answer, hosts.address("node2"))


def check_text(text: str, answer: dict, node: str) -> None:  # type: ignore[type-arg]
    """The text form: rank 1 (on ``node``) named first, then a row per rank."""
    lines = text.splitlines()
    who = f"rank 1 (pid {answer['ranks'][1]['pid']}, node {node})"
    assert lines[0].startswith(f"{who} has been in its own code for "), text
    rows = {line.split()[0]: line.split()[3] for line in lines[3:5]}
    assert rows == {"0": "report", "1": "training"}, text
