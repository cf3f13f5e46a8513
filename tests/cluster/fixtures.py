"""The session's hosts and schedulers, as pytest fixtures (see ``tests/cluster/__init__.py``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.cluster.hosts import Hosts
from tests.cluster.slurm import Slurm

INSTALL_HINT = "HINT: run `bash scripts/install-schedulers.sh` (Debian packages and PyPI, as root)"


def require(*programs: str) -> None:
    """Fail (never skip) naming the programs missing and how to install them."""
    if missing := [p for p in programs if shutil.which(p) is None]:
        pytest.fail(f"not installed: {', '.join(missing)}. {INSTALL_HINT}", pytrace=False)


@pytest.fixture(scope="session")
def hosts() -> Iterator[Hosts]:
    """Four hosts, ``node1``..``node4`` on 10.231.0.0/24, for the whole session: the
    schedulers use node1 and node2; Ray's test cluster has its head on node1 and its other
    nodes on node3 and node4, which it kills whole (a machine dying), so nothing else runs
    there."""
    if os.geteuid() != 0:
        pytest.fail("the hosts need root (network namespaces). HINT: run as root", pytrace=False)
    require("ip", "nsenter", "unshare", "ping")
    # LOCKSTEP_HOSTS_PREFIX and LOCKSTEP_HOSTS_SUBNET (hosts.sh's) may set others: two
    # test runs on one machine apart
    prefix = f"{os.environ.get('LOCKSTEP_HOSTS_PREFIX', 'lsh')}{os.getpid()}"
    subnet = os.environ.get("LOCKSTEP_HOSTS_SUBNET", "10.231.0")
    with Hosts(["node1", "node2", "node3", "node4"], prefix=prefix, subnet=subnet) as made:
        yield made


@pytest.fixture(scope="session")
def slurm(hosts: Hosts) -> Iterator[Slurm]:
    """SLURM on node1 (controller and a node) and node2, for the whole session."""
    require("slurmctld", "slurmd", "munged", "sbatch", "srun")
    cluster = Slurm(hosts, ["node1", "node2"])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
