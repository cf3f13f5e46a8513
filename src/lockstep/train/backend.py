"""``ray.train.backend``: the base classes of a custom backend, the same as ``lockstep.train``'s.

Example:
    >>> from lockstep.train.backend import Backend, BackendConfig
    >>> from lockstep import train
    >>> Backend is train.Backend and BackendConfig is train.BackendConfig
    True
"""

from lockstep._internal.backends.base import Backend, BackendConfig

__all__ = ["Backend", "BackendConfig"]
