"""Command lines of the real launchers across the hosts: Open MPI's and MPICH's ``mpirun``
and ``torchrun``. An ``mpirun`` runs as the first host named (``hosts.run(nodes[0], argv)``)
or, ``*_in_allocation``, inside a SLURM job (which starts the ranks with ``srun``); a
``torchrun`` runs on every host (one agent each)."""

from __future__ import annotations

from collections.abc import Sequence

from tests.cluster.hosts import Hosts

OPEN_MPI = "mpirun.openmpi"
MPICH = "mpirun.mpich"


def openmpi(hosts: Hosts, nodes: Sequence[str], per_node: int, argv: Sequence[str]) -> list[str]:
    """Open MPI's ``mpirun`` with ``per_node`` ranks on each of ``nodes``: started on remote
    nodes by the hosts' rsh agent, talking on the hosts' subnet only (by default it would
    advertise every interface of the machine)."""
    subnet = f"{hosts.subnet}.0/24"
    return [
        OPEN_MPI,
        "--allow-run-as-root",
        "--oversubscribe",  # the hosts share this machine's cores
        "--mca", "plm_rsh_agent", hosts.rsh,
        "--mca", "oob_tcp_if_include", subnet,
        "--mca", "btl_tcp_if_include", subnet,
        "-H", ",".join(f"{n}:{per_node}" for n in nodes),
        "-np", str(per_node * len(nodes)),
        *argv,
    ]  # fmt: skip


def openmpi_in_allocation(hosts: Hosts, argv: Sequence[str]) -> list[str]:
    """Open MPI's ``mpirun`` in an ``sbatch`` script: one rank per task of the allocation,
    started through SLURM. Every rank then sees ``SLURM_PROCID=0``, and ``SLURM_NTASKS``
    differs between nodes: MPI's variables are the ones that hold."""
    subnet = f"{hosts.subnet}.0/24"
    return [
        OPEN_MPI,
        "--allow-run-as-root",
        "--mca", "oob_tcp_if_include", subnet,
        "--mca", "btl_tcp_if_include", subnet,
        *argv,
    ]  # fmt: skip


def mpich_in_allocation(argv: Sequence[str]) -> list[str]:
    """MPICH's ``mpirun`` in an ``sbatch`` script: one rank per task, started through SLURM."""
    return [MPICH, "-iface", "host0", *argv]


def mpich(hosts: Hosts, nodes: Sequence[str], per_node: int, argv: Sequence[str]) -> list[str]:
    """MPICH's ``mpirun`` (Hydra) with ``per_node`` ranks on each of ``nodes``, started on
    remote nodes by the hosts' rsh agent, on the hosts' interface."""
    return [
        MPICH,
        "-launcher", "rsh",
        "-launcher-exec", hosts.rsh,
        "-iface", "host0",
        "-hosts", ",".join(f"{n}:{per_node}" for n in nodes),
        "-np", str(per_node * len(nodes)),
        *argv,
    ]  # fmt: skip


def torchrun(
    argv: Sequence[str],
    *,
    nnodes: int,
    nproc_per_node: int,
    endpoint: str,
    node_rank: int | None = None,
    rdzv_id: str = "",
) -> list[str]:
    """One ``torchrun`` agent's command line. With ``node_rank``: static rendezvous at
    ``endpoint`` (``host:port`` of node rank 0); without: c10d rendezvous ``rdzv_id`` hosted
    at ``endpoint`` (every host's hostname must resolve: it does on the hosts)."""
    host, port = endpoint.rsplit(":", 1)
    common = ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc_per_node)]
    if node_rank is not None:
        rendezvous = ["--node-rank", str(node_rank), "--master-addr", host, "--master-port", port]
    else:
        assert rdzv_id, "c10d rendezvous needs an id"
        rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    return [*common, *rendezvous, *argv]
