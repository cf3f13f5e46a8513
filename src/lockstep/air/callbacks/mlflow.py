"""MLflow under the name ``ray.air.callbacks.mlflow``.

Example:
    >>> from lockstep.air.callbacks.mlflow import MLflowLoggerCallback
    >>> MLflowLoggerCallback.__module__
    'lockstep.train.callbacks._mlflow'
"""

from lockstep.train.callbacks import MLflowLoggerCallback

__all__ = ["MLflowLoggerCallback"]
