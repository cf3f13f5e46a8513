"""``ray.train.callbacks.callback`` of Ray 1.x: the base class of ``Trainer.run`` callbacks.

Example:
    >>> from lockstep.train.callbacks.callback import TrainingCallback
    >>> from lockstep.train import callbacks
    >>> TrainingCallback is callbacks.TrainingCallback
    True
"""

from lockstep.train.callbacks._legacy import TrainingCallback

__all__ = ["TrainingCallback"]
