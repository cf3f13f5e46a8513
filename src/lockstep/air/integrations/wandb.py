"""Weights & Biases under the name ``ray.air.integrations.wandb``.

Example:
    >>> from lockstep.air.integrations.wandb import WandbLoggerCallback, setup_wandb
    >>> WandbLoggerCallback(project="digits").project
    'digits'
"""

from lockstep.train.callbacks import WandbLoggerCallback, setup_wandb

__all__ = ["WandbLoggerCallback", "setup_wandb"]
