"""What the driver and the other launched processes (members) tell each other.

A member joins once (:class:`Joined`), then starts, stops and inspects its workers when
the driver says, and tells the driver when one of them ends; :class:`EndRun` lets it go
with the run's outcome as its exit status. Workers talk to the driver directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Joined:
    """A member's greeting: which launched process it is, on which host, its node's
    address (the one its connection to the driver comes from), and the GPUs it sees."""

    process_rank: int
    host: str
    address: str
    pid: int
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerLaunch:
    """One worker to start: its rank, the variables it gets, its threads' default, the
    modules its backend's workers import (a fork server imports them once)."""

    rank: int
    env: dict[str, str] = field(default_factory=dict)
    threads: int = 1
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class StartWorkers:
    """Start these workers; they connect to the driver at ``address`` with the run's key."""

    address: tuple[str, int]
    workers: tuple[WorkerLaunch, ...]


@dataclass(frozen=True)
class StopWorkers:
    """Stop every worker (SIGTERM, then SIGKILL after ``grace_s``), then say so."""

    grace_s: float


@dataclass(frozen=True)
class WorkersStopped:
    """Every worker of the member is gone."""


@dataclass(frozen=True)
class CollectStacks:
    """Every running worker's stacks: ``fds`` names each rank's stack file descriptor
    (None: not set up yet; then py-spy reads it, when installed)."""

    fds: dict[int, int | None]
    timeout_s: float


@dataclass(frozen=True)
class Stacks:
    """The answer to :class:`CollectStacks`: ``{rank: (pid, text)}``."""

    stacks: dict[int, tuple[int, str]]


@dataclass(frozen=True)
class WorkerExited:
    """A worker's process ended: its exit code (negative: the signal) and last output."""

    rank: int
    pid: int
    returncode: int
    host: str
    output: tuple[str, ...] = ()


@dataclass(frozen=True)
class Signalled:
    """The member got a scheduler's signal (SIGTERM, SLURM's SIGUSR1 warning)."""

    signal_name: str
    host: str


@dataclass(frozen=True)
class EndRun:
    """The run is over: stop, and exit with ``exit_code``."""

    exit_code: int
