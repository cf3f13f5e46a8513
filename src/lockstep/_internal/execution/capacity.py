"""How many workers fit: the resources one worker needs, and what each node can give.

An elastic run (``ScalingConfig(num_workers=(min, max))``) sizes its worker group by what
fits. Here the resources are measured, never decided upon: the scaling policy (in the
controller) turns them into a size.

Capacity is a list with one dict of resources per node (``[{"CPU": 4.0, "GPU": 1.0}]``):
workers do not span nodes, so each node is counted on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lockstep._core.config import ScalingConfig

NodeResources = dict[str, float]


class CapacityChanged(RuntimeError):
    """The cluster no longer holds the workers being started (a node left while they were
    placed): decide the size again, which is no failure of the workers."""


def worker_resources(scaling: ScalingConfig) -> dict[str, float]:
    """One worker's resources, as its placement-group bundle asks for them."""
    resources = {"CPU": scaling.num_cpus_per_worker, "GPU": scaling.num_gpus_per_worker}
    resources.update(
        {
            k: float(v)
            for k, v in (scaling.resources_per_worker or {}).items()
            if k not in ("CPU", "GPU")
        }
    )
    if scaling.accelerator_type is not None:
        resources[f"accelerator_type:{scaling.accelerator_type}"] = 0.001
    return {k: v for k, v in resources.items() if v > 0}


def count_workers(
    nodes: Sequence[Mapping[str, float]], per_worker: Mapping[str, float], *, at_most: int
) -> int:
    """How many workers of ``per_worker`` the ``nodes`` hold, node by node, capped at
    ``at_most`` (Ray V2's ``_count_possible_workers``).

    Example:
        >>> count_workers([{"CPU": 16, "GPU": 2}, {"CPU": 7, "GPU": 1}],
        ...               {"CPU": 8, "GPU": 1}, at_most=8)
        2
    """
    needed = {k: v for k, v in per_worker.items() if v > 0}
    if not needed:
        return at_most  # workers that need nothing: as many as asked for
    total = 0
    for node in nodes:
        # a small tolerance: 1.0 / 0.1 is 9.999... in floating point
        total += min(math.floor(node.get(k, 0.0) / v + 1e-9) for k, v in needed.items())
    return min(total, at_most)


def local_capacity(scaling: ScalingConfig) -> list[NodeResources]:
    """This machine, as one node: the CPUs this process may run on and the GPUs it sees.
    Resources other than CPU and GPU are Ray's alone, and do not limit local workers."""
    from lockstep._internal.execution.executor_choice import usable_cpus
    from lockstep._internal.execution.worker_group.process import gpus

    node: NodeResources = {"CPU": float(usable_cpus())}
    if scaling.num_gpus_per_worker > 0:
        node["GPU"] = float(len(gpus.visible_gpus()))
    for key in worker_resources(scaling):
        node.setdefault(key, math.inf)
    return [node]


def ray_capacity(group: Any = None) -> list[NodeResources]:
    """Each live Ray node's available resources, plus what ``group`` (a running
    RayWorkerGroup) holds on it: the room the run would have if it started again."""
    import ray

    from lockstep._internal.execution.worker_group.ray import connect

    connect()
    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
    held = group.held_resources() if hasattr(group, "held_resources") else {}
    nodes = []
    for node_id, available in _available_per_node().items():
        if node_id not in alive:
            continue
        node = {k: float(v) for k, v in available.items()}
        for key, amount in held.get(node_id, {}).items():
            node[key] = node.get(key, 0.0) + amount
        nodes.append(node)
    return nodes


def _available_per_node() -> dict[str, dict[str, float]]:
    """What each node has free now, by node id (Ray's own per-node view of the GCS)."""
    from ray._private import state

    return dict(state.available_resources_per_node())  # type: ignore[no-untyped-call]
