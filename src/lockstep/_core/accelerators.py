"""This machine's accelerators (its GPUs), found without initialising CUDA.

The inventory only: which GPUs the machine shows this process. Who gets which of them is
decided once, by the execution plan.

The driver must not initialise CUDA: workers forked from it could not use CUDA then.
"""

from __future__ import annotations

import shutil
import subprocess

from lockstep._core import flags


def visible_gpus() -> list[str]:
    """The GPU ids this process may give to workers: ``CUDA_VISIBLE_DEVICES``, or every
    GPU ``nvidia-smi`` lists; empty without an NVIDIA driver.

    Example:
        >>> all(isinstance(gpu, str) for gpu in visible_gpus())
        True
    """
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
