"""``ray.tune.tune_config``: the TuneConfig class, as ``lockstep.tune`` has it.

Example:
    >>> from lockstep.tune.tune_config import TuneConfig
    >>> from lockstep import tune
    >>> TuneConfig is tune.TuneConfig
    True
"""

from lockstep.tune._tuner import TuneConfig

__all__ = ["TuneConfig"]
