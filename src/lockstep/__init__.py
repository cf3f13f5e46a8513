"""lockstep: distributed training with Ray Train's API, on local processes or a Ray cluster.

Importing ``lockstep`` is cheap: subpackages load on first attribute access, so
``import lockstep; lockstep.train.report`` works without importing anything heavy up front.

Example:
    >>> import lockstep
    >>> lockstep.train.ScalingConfig(num_workers=2).num_workers
    2
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"
__all__ = ["__version__", "data", "testing", "train"]

_SUBPACKAGES = frozenset({"air", "data", "testing", "train", "tune"})


def __getattr__(name: str) -> ModuleType:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"lockstep.{name}")
    raise AttributeError(f"module 'lockstep' has no attribute {name!r}")
