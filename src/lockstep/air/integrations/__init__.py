"""Experiment tracking under the names ``ray.air.integrations.mlflow`` and ``.wandb``."""

__all__: list[str] = []
