"""How many workers fit: the resources one worker needs, and what each node can give.

An elastic run (``ScalingConfig(num_workers=(min, max))``) sizes its worker group by what
fits. Here the resources are measured, never decided upon: the scaling policy (in the
controller) turns them into a size.

Capacity is a list with one dict of resources per node (``[{"CPU": 4.0, "GPU": 1.0}]``):
workers do not span nodes, so each node is counted on its own. Each executor measures its
own: ``resolve.local_capacity`` (this machine), ``worker_group.ray.ray_capacity``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from lockstep._core.config import ScalingConfig

NodeResources = dict[str, float]


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


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
        total += min(_times(node.get(k, 0.0), v, at_most) for k, v in needed.items())
    return min(total, at_most)


def _times(have: float, need: float, at_most: int) -> int:
    """How many times ``need`` fits in ``have`` (an unlimited ``have``: ``at_most``)."""
    if math.isinf(have):
        return at_most
    # a small tolerance: 1.0 / 0.1 is 9.999... in floating point
    return math.floor(have / need + 1e-9)
