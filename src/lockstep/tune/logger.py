"""Ray Tune's loggers under the name ``ray.tune.logger``; they serve Tune and Train alike.

Example:
    >>> from lockstep.tune.logger import JsonLoggerCallback, LoggerCallback
    >>> issubclass(JsonLoggerCallback, LoggerCallback)
    True
"""

from lockstep.train.callbacks import CSVLoggerCallback, LoggerCallback, TBXLoggerCallback
from lockstep.train.callbacks._files import JsonLoggerCallback  # Tune's, not Train 1.x's

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback"]
