"""What a launcher tells a process about where it runs, read from its variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class LaunchError(ValueError):
    """A launcher's variables are missing or do not agree."""


@dataclass(frozen=True, kw_only=True)
class Launch:
    """This process among the processes a launcher started, as the launcher says.

    Attributes:
        name: The name that ``LOCKSTEP_CLUSTER`` selects it by (``"slurm"``).
        launcher: What started the processes, for messages (``"SLURM srun"``).
        process_rank: This process among all of them, 0 to ``num_processes - 1``.
        num_processes: How many processes the launcher started, on every node.
        local_process_rank: This process among those on its node.
        processes_per_node: How many it started on this node.
        num_nodes: The nodes of the allocation.
        node_rank: This node among them, where the launcher numbers nodes.
        hosts: The nodes' host names in the launcher's order, where it lists them.
        job_id: The job's id, the same across its requeues and restarts (names the run
            when ``RunConfig(name=...)`` is not given), or None.
        launch_id: The same in every process of one launch, and different in the next
            one (a requeue, a restart): which driver a process joins.
        cpus_per_node: The CPUs each node of the allocation has for the job, if said.
        gpus_per_node: The GPUs each node has for the job, if said.
        slurm_job: The SLURM job this process runs in, whatever launched it (``mpirun``
            and ``torchrun`` run inside ``sbatch`` too): what SIGUSR1 and requeueing are.
        resizable: Whether the launcher may start the processes again in another number
            (torchrun's elastic rendezvous, when a node joins or leaves): what
            ``num_workers=(min, max)`` follows.
        variables: The variables it was read from, for ``lockstep doctor``.
    """

    name: str
    launcher: str
    process_rank: int
    num_processes: int
    local_process_rank: int
    processes_per_node: int
    num_nodes: int
    node_rank: int | None = None
    hosts: tuple[str, ...] = ()
    job_id: str | None = None
    launch_id: str = ""
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None
    slurm_job: str | None = None
    resizable: bool = False
    variables: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def is_driver(self) -> bool:
        """Whether this process drives the run: the one of process rank 0."""
        return self.process_rank == 0

    def allocation(self) -> str:
        """The allocation, as an error names it: ``"2 nodes x 2 processes (8 CPUs, 0 GPUs
        per node)"``."""
        per_node = [
            f"{count} {what}"
            for count, what in ((self.cpus_per_node, "CPUs"), (self.gpus_per_node, "GPUs"))
            if count is not None
        ]
        resources = f" ({', '.join(per_node)} per node)" if per_node else ""
        nodes = f"{self.num_nodes} node{'s' if self.num_nodes != 1 else ''}"
        return f"{nodes} x {self.processes_per_node} process(es){resources}"


def integer(env: Mapping[str, str], name: str, launcher: str) -> int:
    """The integer variable ``name`` that ``launcher`` sets; a LaunchError naming it when
    it is missing or not a number."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        raise LaunchError(
            f"{launcher} did not set {name}, which lockstep reads to find this process's "
            f"place. HINT: launch the script with {launcher} as its documentation says, or "
            "set LOCKSTEP_CLUSTER=off to run on this machine only"
        )
    try:
        return int(raw.strip())
    except ValueError:
        raise LaunchError(f"{name}={raw!r} (set by {launcher}) is not a number") from None


def optional_integer(env: Mapping[str, str], name: str) -> int | None:
    """The integer variable ``name``, or None when it is not set or not a number."""
    try:
        return int(env[name].strip())
    except (KeyError, ValueError):
        return None


def read(env: Mapping[str, str], *names: str) -> dict[str, str]:
    """The variables of ``names`` that are set, for ``Launch.variables``."""
    return {name: env[name] for name in names if name in env}


# What a launcher tells each process it starts about that process, which a worker the
# process starts must not take for its own (its ranks are lockstep's).
_OWN_VARIABLES = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_TASK_PID", "MPI_LOCALRANKID",
                  "MPI_LOCALNRANKS")  # fmt: skip
_OWN_PREFIXES = ("OMPI_COMM_WORLD_", "OMPI_MCA_ess", "OMPI_MCA_orte_ess", "PMI_", "PMIX_", "PET_",
                 "TORCHELASTIC_")  # fmt: skip


def without_launch_variables(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without what the launcher said about the launching process itself.

    Example:
        >>> without_launch_variables({"PMI_RANK": "1", "SLURM_JOB_ID": "7", "HOME": "/h"})
        {'SLURM_JOB_ID': '7', 'HOME': '/h'}
    """
    return {
        name: value
        for name, value in env.items()
        if name not in _OWN_VARIABLES and not name.startswith(_OWN_PREFIXES)
    }
