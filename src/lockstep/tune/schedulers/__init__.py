"""Trial schedulers: policies that stop, pause or exploit trials as their results come.

The same names as ``ray.tune.schedulers``.
"""

from lockstep.tune.schedulers._asha import AsyncHyperBandScheduler
from lockstep.tune.schedulers._base import Exploit, FIFOScheduler, TrialScheduler
from lockstep.tune.schedulers._hyperband import HyperBandScheduler
from lockstep.tune.schedulers._median import MedianStoppingRule
from lockstep.tune.schedulers._pbt import PopulationBasedTraining

ASHAScheduler = AsyncHyperBandScheduler

__all__ = [
    "ASHAScheduler",
    "AsyncHyperBandScheduler",
    "Exploit",
    "FIFOScheduler",
    "HyperBandScheduler",
    "MedianStoppingRule",
    "PopulationBasedTraining",
    "TrialScheduler",
]
