"""Kubeflow's training jobs: one pod per node, whose container runs the script.

- PyTorchJob (training-operator v1) sets ``MASTER_ADDR``/``MASTER_PORT`` (the master pod's
  service, ``JOB-master-0``), ``WORLD_SIZE``, ``RANK`` (the pod's index: master 0, worker
  I is I+1) and the ``PET_*`` variables that torchrun reads: ``PET_NNODES``,
  ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``. With ``nprocPerNode`` > 1 its ``RANK`` is a
  node's rank while ``WORLD_SIZE`` counts processes.
- TrainJob (Kubeflow Trainer v2) sets only ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
  ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` (``JOB-node-0-0.JOB``) and ``PET_MASTER_PORT``.

A pod whose command is ``torchrun`` is torchrun's: detected before this. Either job's
restart policy reads the exit status: 1-127 is a permanent failure, 128-255 retryable.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep._internal.execution.environments.base import Launch, integer, read

VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)


def detect(env: Mapping[str, str]) -> Launch | None:
    """This process as a Kubeflow job's pod, or None.

    Example:
        >>> pod = {"MASTER_ADDR": "mnist-master-0", "MASTER_PORT": "23456",
        ...        "WORLD_SIZE": "6", "RANK": "1", "PET_NNODES": "3",
        ...        "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1"}
        >>> launch = detect(pod)
        >>> launch.process_rank, launch.num_processes, launch.node_rank, launch.job_id
        (1, 3, 1, 'kubeflow-mnist')
    """
    if "PET_NNODES" in env:
        return _pods(env, "PyTorchJob" if "WORLD_SIZE" in env else "TrainJob")
    pytorchjob = ("MASTER_ADDR", "RANK", "WORLD_SIZE", "KUBERNETES_SERVICE_HOST")
    if all(name in env for name in pytorchjob):
        return _pods(env, "PyTorchJob")
    return None


def _pods(env: Mapping[str, str], kind: str) -> Launch:
    launcher = f"Kubeflow {kind}"
    if "PET_NNODES" in env:
        nodes = integer(env, "PET_NNODES", launcher)
        node = integer(env, "PET_NODE_RANK", launcher)
    else:  # an older PyTorchJob: one process per pod, RANK is the pod's
        nodes = integer(env, "WORLD_SIZE", launcher)
        node = integer(env, "RANK", launcher)
    job = job_name(env)
    return Launch(
        name="kubeflow",
        launcher=launcher,
        process_rank=node,
        num_processes=nodes,
        local_process_rank=0,
        processes_per_node=1,
        num_nodes=nodes,
        node_rank=node,
        job_id=f"kubeflow-{job}" if job else None,
        launch_id=f"kubeflow-{job}",
        variables=read(env, *VARIABLES),
    )


def job_name(env: Mapping[str, str]) -> str:
    """The job's name, from its master's address (``JOB-master-0`` or ``JOB-node-0-0.JOB``).

    Example:
        >>> job_name({"PET_MASTER_ADDR": "mnist-node-0-0.mnist"}), job_name(
        ...     {"MASTER_ADDR": "mnist-master-0"})
        ('mnist', 'mnist')
    """
    master = env.get("MASTER_ADDR") or env.get("PET_MASTER_ADDR", "")
    if "." in master:
        return master.split(".", 1)[1]
    return master.removesuffix("-master-0")
