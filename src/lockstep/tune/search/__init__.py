"""Search algorithms: which configs the Tuner tries next.

The same names as ``ray.tune.search``. ``OptunaSearch`` is in ``lockstep.tune.search.optuna``.
"""

from lockstep.tune.search._basic import BasicVariantGenerator
from lockstep.tune.search._searcher import ConcurrencyLimiter, Repeater, Searcher

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "Searcher"]
