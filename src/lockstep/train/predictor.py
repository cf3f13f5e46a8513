"""``ray.train.predictor`` (Ray 2.0 to 2.5): the Predictor base class, as ``lockstep.train`` has it.

Example:
    >>> from lockstep.train.predictor import Predictor
    >>> from lockstep import train
    >>> Predictor is train.Predictor
    True
"""

from lockstep.train._predictor import Predictor, PredictorNotSerializableException

__all__ = ["Predictor", "PredictorNotSerializableException"]
