"""The controller's states: values, each carrying what its transition needs.

    Starting -> Running -> (Draining) -> (Restarting | Resizing -> Starting -> Running)*
        -> Finished | Errored | Stopped

``Scheduling`` stands in for ``Starting`` while an elastic run waits for room. The worker
group of the attempt in progress travels in :class:`Attempt`, held by the states that have
workers (``Running``, ``Draining``); the controller keeps no per-attempt fields.
"""

from __future__ import annotations

import dataclasses
import time

from lockstep._core.errors import TrainingFailedError, WorkerFailure
from lockstep._internal.controller.preemption import Drain
from lockstep._internal.execution.worker_group.base import WorkerGroup


@dataclasses.dataclass(eq=False)
class Attempt:
    """One attempt's workers: its number, its group, and what came back from them."""

    number: int
    group: WorkerGroup
    num_workers: int
    started_at: float = dataclasses.field(default_factory=time.monotonic)
    failures: dict[int, WorkerFailure] = dataclasses.field(default_factory=dict)
    return_values: dict[int, bytes] = dataclasses.field(default_factory=dict)
    stopped: bool = False  # its workers were shut down


@dataclasses.dataclass(frozen=True)
class Starting:
    attempt: int


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """An elastic run waits for room to start ``attempt``; looks again at ``retry_at``
    (``time.monotonic()``)."""

    attempt: int
    retry_at: float


@dataclasses.dataclass(frozen=True)
class Running:
    run: Attempt

    @property
    def attempt(self) -> int:
        return self.run.number


@dataclasses.dataclass(frozen=True)
class Draining:
    """Running while a preemption drains: the workers were told, their next report (or
    the deadline) ends the attempt."""

    run: Attempt
    drain: Drain

    @property
    def attempt(self) -> int:
        return self.run.number


@dataclasses.dataclass(frozen=True)
class Restarting:
    attempt: int
    failures: dict[int, WorkerFailure]


@dataclasses.dataclass(frozen=True)
class Resizing:
    """An elastic run's capacity changed: restart at ``num_workers`` (no failure)."""

    attempt: int
    num_workers: int


@dataclasses.dataclass(frozen=True)
class Finished:
    """Every worker returned, or a listener (a Tune scheduler) stopped the run early."""

    return_values: dict[int, bytes] = dataclasses.field(default_factory=dict)
    stopped_early: bool = False


@dataclasses.dataclass(frozen=True)
class Errored:
    error: TrainingFailedError


@dataclasses.dataclass(frozen=True)
class Stopped:
    """Asked to stop (Ctrl-C, SIGTERM, a Tune scheduler's pause): workers stopped, the
    committed checkpoints kept, the run restorable."""

    reason: str


State = (
    Starting
    | Scheduling
    | Running
    | Draining
    | Restarting
    | Resizing
    | Finished
    | Errored
    | Stopped
)
WithWorkers = Running | Draining
Ended = Finished | Errored | Stopped
