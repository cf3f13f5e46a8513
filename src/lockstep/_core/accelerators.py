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
    return [row[0] for row in nvidia_smi("index")]


def nvidia_smi(*fields: str) -> list[list[str]]:
    """One row per GPU of ``nvidia-smi --query-gpu=FIELDS``, each field's value as text
    without its unit (``memory.total`` in MiB); empty without an NVIDIA driver."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[value.strip() for value in line.split(",")] for line in out.splitlines()]
    return [row for row in rows if len(row) == len(fields)]
