"""The tracking callbacks under Ray AIR's older names (``ray.air.callbacks.mlflow``, ...)."""

__all__: list[str] = []
