"""``ray.air.checkpoint`` (Ray 2.0 to 2.6): the Checkpoint class, the same as ``lockstep.train``'s.

Example:
    >>> from lockstep.air.checkpoint import Checkpoint
    >>> from lockstep import train
    >>> Checkpoint is train.Checkpoint
    True
"""

from lockstep._core.checkpoint import Checkpoint

__all__ = ["Checkpoint"]
