"""Weights & Biases under the name ``ray.air.callbacks.wandb``.

Example:
    >>> from lockstep.air.callbacks.wandb import WandbLoggerCallback
    >>> WandbLoggerCallback.__module__
    'lockstep.train.callbacks._wandb'
"""

from lockstep.train.callbacks import WandbLoggerCallback

__all__ = ["WandbLoggerCallback"]
