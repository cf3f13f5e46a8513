"""Which device a worker trains on."""

from __future__ import annotations

import torch


def get_devices() -> list[torch.device]:
    """The devices of this worker: its GPUs, or the CPU when it has none.

    Each worker sees only the GPUs it was given, so they are ``cuda:0``, ``cuda:1``, ...

    Example:
        >>> get_devices()[0].type in ("cpu", "cuda")
        True
    """
    if torch.cuda.is_available():
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")]


def get_device() -> torch.device:
    """The device this worker trains on: its first GPU, or the CPU.

    Example:
        >>> get_device() in get_devices()
        True
    """
    return get_devices()[0]
