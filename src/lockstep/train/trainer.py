"""``ray.train.trainer`` of Ray 1.x: Trainer and TrainingIterator, as ``lockstep.train`` has them.

Example:
    >>> from lockstep.train.trainer import Trainer
    >>> from lockstep import train
    >>> Trainer is train.Trainer
    True
"""

from lockstep.train._legacy import Trainer, TrainingIterator

__all__ = ["Trainer", "TrainingIterator"]
