"""The pool of CPUs and GPUs that admits trials: every worker of every running trial."""

from __future__ import annotations

import os
import sys


def machine_resources() -> dict[str, float]:
    """This machine's CPUs and GPUs, or the Ray cluster's when Ray is initialised."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        total = ray.cluster_resources()
        return {"CPU": float(total.get("CPU", 0)), "GPU": float(total.get("GPU", 0))}
    from lockstep._core.gpus import visible_gpus

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"CPU": float(cpus or 1), "GPU": float(len(visible_gpus()))}


class ResourcePool:
    """Admits a trial when all it asks for is free; a trial gives everything back at once."""

    def __init__(self, total: dict[str, float]) -> None:
        self.total = dict(total)
        self.used = {k: 0.0 for k in total}

    def check(self, request: dict[str, float], what: str) -> None:
        """Raise if ``request`` could never be admitted, even on an idle machine."""
        for key, amount in request.items():
            if amount > self.total.get(key, 0) + 1e-9:
                raise ValueError(
                    f"{what} needs {amount:g} {key} but this machine has "
                    f"{self.total.get(key, 0):g}. HINT: ask for fewer (with_resources, "
                    "ScalingConfig(num_workers=..., resources_per_worker=...))"
                )

    def fits(self, request: dict[str, float]) -> bool:
        return all(
            self.used.get(k, 0) + v <= self.total.get(k, 0) + 1e-9 for k, v in request.items()
        )

    def acquire(self, request: dict[str, float]) -> None:
        for key, amount in request.items():
            self.used[key] = self.used.get(key, 0) + amount

    def release(self, request: dict[str, float]) -> None:
        for key, amount in request.items():
            self.used[key] = max(0.0, self.used.get(key, 0) - amount)
