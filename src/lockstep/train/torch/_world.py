"""This worker's place in the run, with or without a session (a plain script is one worker)."""

from __future__ import annotations

from lockstep._internal.execution.worker import session


def world_size() -> int:
    current = session.current()
    return current.context.world_size if current is not None else 1


def world_rank() -> int:
    current = session.current()
    return current.context.world_rank if current is not None else 0
