"""A worker's default number of threads: the config field of the XGBoost, LightGBM and
TensorFlow backends, and its check."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from lockstep._internal.backends.base import BackendConfig


def check_threads(num_threads: int | None) -> None:
    """Raise a ValueError unless ``num_threads`` is None or a positive int."""
    if num_threads is None:
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(
            f"num_threads must be a positive int or None, got {num_threads!r}. "
            "HINT: leave it to the trainer, which uses the worker's CPUs"
        )


_T = TypeVar("_T", bound="ThreadsConfig")


@dataclass(frozen=True, kw_only=True)
class ThreadsConfig(BackendConfig):
    """A backend config with ``num_threads``, the framework's threads in each worker (None
    leaves the framework's default); checked at construction."""

    num_threads: int | None = None

    def __post_init__(self) -> None:
        check_threads(self.num_threads)

    def with_default_threads(self: _T, num_cpus_per_worker: float) -> _T:
        """This config, with ``num_threads`` the worker's CPUs (at least 1) unless set."""
        if self.num_threads is not None:
            return self
        return replace(self, num_threads=max(1, int(num_cpus_per_worker)))
