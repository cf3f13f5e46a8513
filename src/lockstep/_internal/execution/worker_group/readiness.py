"""Which workers have something for the driver: an epoll over their descriptors.

The driver asks at every poll, twice per step of a tight loop: ``selectors`` would build a
key object and a list per call in Python, which costs more than the system call.
"""

from __future__ import annotations

import select
from typing import Any

Key = tuple[str, int]  # ("conn" or "end", the worker's rank)


class Readiness:
    """The descriptors of the running workers (connections, ends of processes), each
    with its key; :meth:`ready` says whose can be read without waiting."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._keys: dict[int, Key] = {}

    def add(self, source: Any, key: Key) -> None:
        """Watch ``source`` (a descriptor, or an object with ``fileno()``) for ``key``."""
        fd = source if isinstance(source, int) else source.fileno()
        self._epoll.register(fd, select.EPOLLIN)
        self._keys[fd] = key

    def __bool__(self) -> bool:
        return bool(self._keys)

    def ready(self, timeout: float) -> list[Key]:
        """The keys whose descriptors are readable (an end of file too), waiting up to
        ``timeout`` seconds for one (none: not at all)."""
        keys = self._keys
        return [keys[fd] for fd, _ in self._epoll.poll(max(timeout, 0.0), max(len(keys), 1))]

    def close(self) -> None:
        self._epoll.close()
