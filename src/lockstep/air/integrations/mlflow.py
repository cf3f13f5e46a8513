"""MLflow under the name ``ray.air.integrations.mlflow``.

Example:
    >>> from lockstep.air.integrations.mlflow import MLflowLoggerCallback, setup_mlflow
    >>> MLflowLoggerCallback(experiment_name="exp").experiment_name
    'exp'
"""

from lockstep.train.callbacks import MLflowLoggerCallback, setup_mlflow

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]
