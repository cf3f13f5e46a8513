"""Kubeflow's training jobs as their controllers start them, on the hosts.

No Kubernetes can run here (no package of this machine's ships kind, k3s or a kubelet), so
a "pod" is a host named as the controller names the pod, whose container gets exactly the
variables the controller sets:

- PyTorchJob (training-operator v1, ``kubeflow.org/v1``): a master pod ``JOB-master-0`` and
  worker pods ``JOB-worker-I``, each with ``MASTER_ADDR``/``PET_MASTER_ADDR`` (the master's
  service, ``JOB-master-0``), ``MASTER_PORT``/``PET_MASTER_PORT`` (23456 by default),
  ``WORLD_SIZE`` (pods x ``nprocPerNode``), ``RANK`` and ``PET_NODE_RANK`` (the pod's index:
  master 0, worker I is I+1; with ``nprocPerNode`` > 1 a node rank, not a process rank),
  ``PET_NNODES``, ``PET_NPROC_PER_NODE`` and ``PYTHONUNBUFFERED=0``.
- TrainJob (Kubeflow Trainer v2, a JobSet): pods ``JOB-node-0-I`` in the headless service
  ``JOB``, with only ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the Job
  completion index), ``PET_MASTER_ADDR=JOB-node-0-0.JOB`` and ``PET_MASTER_PORT=29500``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pod:
    """A pod: its hostname, the names its service gives it, its container's variables."""

    name: str
    dns_names: tuple[str, ...]
    env: dict[str, str]


def pytorchjob(job: str, num_workers: int, nproc_per_node: int = 1, port: int = 23456) -> list[Pod]:
    """The master pod and ``num_workers`` worker pods of PyTorchJob ``job``."""
    names = [f"{job}-master-0", *(f"{job}-worker-{i}" for i in range(num_workers))]
    pods = []
    for rank, name in enumerate(names):
        env = {
            "PYTHONUNBUFFERED": "0",
            "MASTER_PORT": str(port),
            "PET_MASTER_PORT": str(port),
            "MASTER_ADDR": names[0],
            "PET_MASTER_ADDR": names[0],
            "WORLD_SIZE": str(len(names) * nproc_per_node),
            "RANK": str(rank),
            "PET_NPROC_PER_NODE": str(nproc_per_node),
            "PET_NODE_RANK": str(rank),
            "PET_NNODES": str(len(names)),
        }
        pods.append(Pod(name, (name,), env))
    return pods


def trainjob(job: str, num_nodes: int, nproc_per_node: int = 1) -> list[Pod]:
    """The ``num_nodes`` trainer pods of TrainJob ``job``."""
    pods = []
    for index in range(num_nodes):
        name = f"{job}-node-0-{index}"
        env = {
            "PET_NNODES": str(num_nodes),
            "PET_NPROC_PER_NODE": str(nproc_per_node),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": f"{job}-node-0-0.{job}",
            "PET_MASTER_PORT": "29500",
        }
        pods.append(Pod(name, (name, f"{name}.{job}"), env))
    return pods
