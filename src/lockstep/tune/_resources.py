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
        self._warned_cap = False

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

    def check_concurrency(self, request: dict[str, float], max_concurrent: int | None) -> None:
        """Warn (once) when fewer than ``max_concurrent`` trials asking for ``request`` fit
        at once: the CPUs and GPUs cap them first, as a Ray cluster's resources do (a
        trial asks for 1 CPU by default)."""
        fit = self.how_many_fit(request)
        if max_concurrent is None or fit >= max_concurrent or self._warned_cap:
            return
        self._warned_cap = True
        cpus = self.total.get("CPU", 0)
        warnings.warn(
            f"max_concurrent_trials={max_concurrent}, but only {fit} trials asking for "
            f"{_resources_text(request)} fit at once on {cpus:g} CPUs and "
            f"{self.total.get('GPU', 0):g} GPUs: the others wait for them, as on a Ray "
            "cluster. HINT: trials that mostly wait (sleep, I/O, a remote service) can ask "
            f"for a part of a CPU: tune.with_resources(trainable, {{'cpu': "
            f"{cpus / max_concurrent:.3g}}})",
            stacklevel=2,
        )

    def how_many_fit(self, request: dict[str, float]) -> int:
        """How many trials asking for ``request`` fit on the whole pool at once."""
        counts = [int((self.total.get(k, 0) + 1e-9) // v) for k, v in request.items() if v > 1e-9]
        return max(1, min(counts)) if counts else 2**31

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


def _resources_text(request: dict[str, float]) -> str:
    return " and ".join(f"{v:g} {k}" for k, v in request.items() if v > 1e-9) or "nothing"
