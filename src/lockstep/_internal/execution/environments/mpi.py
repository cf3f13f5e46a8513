"""MPI's ``mpirun``: Open MPI's ``OMPI_COMM_WORLD_*``, or MPICH's and Intel MPI's PMI
variables (``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``).

MPI's variables win over SLURM's: under ``mpirun`` inside an ``sbatch`` allocation every
rank sees ``SLURM_PROCID=0``. No MPI launcher names the nodes or a master address; MPICH
gives no job id either. Open MPI's ``OMPI_COMM_WORLD_NODE_RANK`` is a rank among the
processes of a node, not a node's number.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep._internal.execution.environments.base import Launch, integer, read

OPEN_MPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
OPEN_MPI_VARIABLES = (
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid",
)
PMI_VARIABLES = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def detect(env: Mapping[str, str]) -> Launch | None:
    """This process under ``mpirun``, or None when MPI did not start it.

    Example:
        >>> launch = detect({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0",
        ...                  "MPI_LOCALNRANKS": "2"})
        >>> launch.launcher, launch.process_rank, launch.num_nodes, launch.node_rank
        ('MPICH mpirun', 2, 2, None)
    """
    if "OMPI_COMM_WORLD_RANK" in env:
        return _open_mpi(env)
    if "PMI_RANK" in env:
        return _pmi(env)
    return None


def _open_mpi(env: Mapping[str, str]) -> Launch:
    launcher = "Open MPI mpirun"
    size = integer(env, "OMPI_COMM_WORLD_SIZE", launcher)
    local_size = integer(env, "OMPI_COMM_WORLD_LOCAL_SIZE", launcher)
    job = env.get("OMPI_MCA_ess_base_jobid") or env.get("PMIX_NAMESPACE", "")
    return Launch(
        name="mpi",
        launcher=launcher,
        process_rank=integer(env, "OMPI_COMM_WORLD_RANK", launcher),
        num_processes=size,
        local_process_rank=integer(env, "OMPI_COMM_WORLD_LOCAL_RANK", launcher),
        processes_per_node=local_size,
        num_nodes=_nodes(size, local_size),
        launch_id=f"openmpi-{job}",
        variables=read(env, *OPEN_MPI_VARIABLES),
    )


def _pmi(env: Mapping[str, str]) -> Launch:
    launcher = "MPICH mpirun"
    size = integer(env, "PMI_SIZE", launcher)
    local_size = integer(env, "MPI_LOCALNRANKS", launcher)
    return Launch(
        name="mpi",
        launcher=launcher,
        process_rank=integer(env, "PMI_RANK", launcher),
        num_processes=size,
        local_process_rank=integer(env, "MPI_LOCALRANKID", launcher),
        processes_per_node=local_size,
        num_nodes=_nodes(size, local_size),
        launch_id="mpich",  # MPICH names no job: a stale driver's key fails its check
        variables=read(env, *PMI_VARIABLES),
    )


def _nodes(size: int, local_size: int) -> int:
    """The nodes, where each runs as many processes as this one (MPI does not say)."""
    return max(1, -(-size // max(1, local_size)))
