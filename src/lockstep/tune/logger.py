"""Ray Tune's loggers under the name ``ray.tune.logger``; they serve Tune and Train alike.

Example:
    >>> from lockstep.tune.logger import JsonLoggerCallback, LoggerCallback
    >>> issubclass(JsonLoggerCallback, LoggerCallback)
    True
"""

from lockstep.train.callbacks import (
    CSVLoggerCallback,
    JsonLoggerCallback,
    LoggerCallback,
    TBXLoggerCallback,
)

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback"]
