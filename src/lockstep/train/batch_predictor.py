"""``ray.train.batch_predictor`` (Ray 2.0 to 2.5): BatchPredictor, as ``lockstep.train`` has it.

Example:
    >>> from lockstep.train.batch_predictor import BatchPredictor
    >>> from lockstep import train
    >>> BatchPredictor is train.BatchPredictor
    True
"""

from lockstep.train._predictor import BatchPredictor

__all__ = ["BatchPredictor"]
