"""The pool of CPUs and GPUs that admits trials: every worker of every running trial."""

from __future__ import annotations

import os
import sys
import warnings


def machine_resources() -> dict[str, float]:
    """This machine's CPUs and GPUs, or the Ray cluster's when Ray is initialised."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        total = ray.cluster_resources()
        return {"CPU": float(total.get("CPU", 0)), "GPU": float(total.get("GPU", 0))}
    from lockstep._core.accelerators import visible_gpus

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"CPU": float(cpus or 1), "GPU": float(len(visible_gpus()))}


class ResourcePool:
    """Admits a trial when all it asks for is free; a trial gives everything back at once."""

    def __init__(self, total: dict[str, float]) -> None:
        self.total = dict(total)
        self.used = {k: 0.0 for k in total}
        self._warned = False

    def check(self, request: dict[str, float], what: str) -> None:
        """Raise if ``request`` needs more GPUs than there are; warn (once) if it needs
        more CPUs than there are: such a trial runs alone, its workers sharing the CPUs, as
        a trainer's workers do outside Tune."""
        gpus = request.get("GPU", 0)
        if gpus > self.total.get("GPU", 0) + 1e-9:
            raise ValueError(
                f"{what} needs {gpus:g} GPU but there are {self.total.get('GPU', 0):g}. "
                "HINT: ask for fewer (with_resources, ScalingConfig(num_workers=..., "
                "use_gpu=..., resources_per_worker=...))"
            )
        cpus = request.get("CPU", 0)
        if cpus > self.total["CPU"] + 1e-9 and not self._warned:
            self._warned = True
            warnings.warn(
                f"{what} needs {cpus:g} CPUs but there are {self.total['CPU']:g}: such "
                "trials run one at a time, their workers sharing the CPUs. HINT: ask for "
                "fewer workers or CPUs per worker to run trials side by side",
                stacklevel=2,
            )

    def fits(self, request: dict[str, float]) -> bool:
        if request.get("CPU", 0) > self.total["CPU"] + 1e-9:
            return all(v <= 1e-9 for v in self.used.values())  # alone on the machine
        return all(
            self.used.get(k, 0) + v <= self.total.get(k, 0) + 1e-9 for k, v in request.items()
        )

    def acquire(self, request: dict[str, float]) -> None:
        for key, amount in request.items():
            self.used[key] = self.used.get(key, 0) + amount

    def release(self, request: dict[str, float]) -> None:
        for key, amount in request.items():
            self.used[key] = max(0.0, self.used.get(key, 0) - amount)
