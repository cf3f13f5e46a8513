"""scikit-learn on lockstep: SklearnTrainer and SklearnPredictor.

The same names as Ray AIR's ``ray.train.sklearn``.
"""

from lockstep.train.sklearn._checkpoint import SklearnCheckpoint
from lockstep.train.sklearn._predictor import SklearnPredictor
from lockstep.train.sklearn._trainer import SklearnTrainer

__all__ = [
    "SklearnCheckpoint",
    "SklearnPredictor",
    "SklearnTrainer",
]
