"""The GBDT backends' shared check of a worker's default number of threads."""

from __future__ import annotations


def check_threads(num_threads: int | None) -> None:
    """Raise a ValueError unless ``num_threads`` is None or a positive int."""
    if num_threads is None:
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(
            f"num_threads must be a positive int or None, got {num_threads!r}. "
            "HINT: leave it to the trainer, which uses the worker's CPUs"
        )
