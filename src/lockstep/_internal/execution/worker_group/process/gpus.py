"""GPUs on this machine, found without initialising CUDA.

The driver must not initialise CUDA: workers forked from it could not use CUDA then.
"""

from __future__ import annotations

import shutil
import subprocess

from lockstep._core import flags


def visible_gpus() -> list[str]:
    """The GPU ids this process may give to workers: ``CUDA_VISIBLE_DEVICES``, or every
    GPU ``nvidia-smi`` lists; empty without an NVIDIA driver."""
    visible = flags.CUDA_VISIBLE_DEVICES.get()
    if visible:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def assign(devices: list[str], rank: int, gpus_per_worker: float) -> list[str]:
    """The GPU ids of worker ``rank``: whole GPUs each, or a share of one when < 1."""
    if gpus_per_worker <= 0:
        return []
    if gpus_per_worker < 1:
        per_gpu = int(1 / gpus_per_worker)
        return [devices[rank // per_gpu]]
    count = int(gpus_per_worker)
    return devices[rank * count : (rank + 1) * count]


def needed(num_workers: int, gpus_per_worker: float) -> int:
    """How many GPUs ``num_workers`` workers need between them."""
    if gpus_per_worker <= 0:
        return 0
    if gpus_per_worker < 1:
        per_gpu = int(1 / gpus_per_worker)
        return -(-num_workers // per_gpu)
    return num_workers * int(gpus_per_worker)
