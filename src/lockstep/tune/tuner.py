"""``ray.tune.tuner``: the Tuner class, as ``lockstep.tune`` has it.

Example:
    >>> from lockstep.tune.tuner import Tuner
    >>> from lockstep import tune
    >>> Tuner is tune.Tuner
    True
"""

from lockstep.tune._tuner import Tuner

__all__ = ["Tuner"]
