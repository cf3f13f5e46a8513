"""Horovod on lockstep: HorovodTrainer and HorovodConfig, as ``ray.train.horovod`` has them.

Horovod 0.28.1 is built from source: ``bash scripts/install-horovod.sh`` (see the README).
"""

from lockstep._internal.backends.horovod import HorovodConfig
from lockstep.train.horovod._trainer import HorovodTrainer

__all__ = ["HorovodConfig", "HorovodTrainer"]
