"""torchrun (TorchElastic): each agent starts ``--nproc-per-node`` processes on its node.

Every process has ``TORCHELASTIC_RUN_ID``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (its agent's node), ``GROUP_WORLD_SIZE`` (the agents)
and ``MASTER_ADDR``/``MASTER_PORT`` (the agents' store), the number of the restart,
``TORCHELASTIC_RESTART_COUNT``, and how many restarts ``--max-restarts`` allows,
``TORCHELASTIC_MAX_RESTARTS``. torchrun starts every process again, with the new world,
when a node joins or leaves its elastic rendezvous (``--nnodes=MIN:MAX``) and when one
fails (counted against ``--max-restarts``): its launches are resizable, unless its
rendezvous is static (``--node-rank``, run id ``none``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from lockstep._internal.execution.environments.base import Launch, integer, read

LAUNCHER = "torchrun"
VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def detect(env: Mapping[str, str]) -> Launch | None:
    """This process under torchrun, or None when torchrun did not start it.

    Example:
        >>> launch = detect({"TORCHELASTIC_RUN_ID": "job", "RANK": "3", "WORLD_SIZE": "4",
        ...     "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
        ...     "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"})
        >>> launch.process_rank, launch.node_rank, launch.num_nodes, launch.job_id
        (3, 1, 2, 'torchrun-job')
    """
    if "TORCHELASTIC_RUN_ID" not in env:
        return None
    size = integer(env, "WORLD_SIZE", LAUNCHER)
    local_size = integer(env, "LOCAL_WORLD_SIZE", LAUNCHER)
    run_id = env["TORCHELASTIC_RUN_ID"]
    # A static rendezvous (--node-rank) is fixed, and its run id is "none". An elastic
    # one's agents each count their own restarts (a node that joined later counts
    # fewer): its launches are told apart by their world instead.
    static = run_id == "none"
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    master = f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
    return Launch(
        name="torchrun",
        launcher=LAUNCHER,
        process_rank=integer(env, "RANK", LAUNCHER),
        num_processes=size,
        local_process_rank=integer(env, "LOCAL_RANK", LAUNCHER),
        processes_per_node=local_size,
        num_nodes=integer(env, "GROUP_WORLD_SIZE", LAUNCHER)
        if "GROUP_WORLD_SIZE" in env
        else max(1, size // local_size),
        node_rank=integer(env, "GROUP_RANK", LAUNCHER),
        # a static rendezvous's run id is "none": the store's address tells launches apart
        job_id=_agent_job_id() if static else f"torchrun-{run_id}",
        launch_id=f"torchrun-{run_id}-{master}-{restart if static else f'w{size}'}",
        resizable=not static,
        variables=read(env, *VARIABLES),
    )


def _agent_job_id() -> str | None:
    """A static rendezvous's job, which has no id: named after the torchrun agent that
    started this process (the same across its restarts), by its host, pid and start time
    (a pid is used again, not with the same start)."""
    agent = os.getppid()
    try:
        with open(f"/proc/{agent}/stat") as f:
            started = f.read().rpartition(")")[2].split()[19]  # field 22, starttime
    except (OSError, IndexError):
        return None
    return f"torchrun-{socket.gethostname()}-{agent}-{started}"
