"""Ray Tune's Optuna search algorithm: ``OptunaSearch``."""

from lockstep.tune.search._optuna import OptunaSearch

__all__ = ["OptunaSearch"]
