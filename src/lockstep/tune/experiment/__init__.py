"""The trial as callbacks see it; the same name as ``ray.tune.experiment``."""

from lockstep._core.callback import Trial

__all__ = ["Trial"]
