"""Per-framework setup run inside each worker. Backends never see the worker group."""

from lockstep._internal.backends.base import Backend, BackendConfig

__all__ = ["Backend", "BackendConfig"]
