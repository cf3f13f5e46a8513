"""The run-state snapshot: which checkpoints are committed, and the run's counters.

The controller rewrites it atomically; ``Result.from_path`` and ``Trainer.restore`` read it.
It is the single authority on which checkpoints exist: a checkpoint directory it does not
list was never committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lockstep._core.json_text import readable_json

STATE_VERSION = 1


@dataclass
class CheckpointRecord:
    """One committed checkpoint and rank 0's metrics reported with it."""

    dir_name: str
    metrics: dict[str, Any]
    index: int
    training_iteration: int


@dataclass
class AttemptRecord:
    """One attempt of the run: a worker group started, and how it ended.

    Attributes:
        number: The attempt's number in the run, from 0.
        num_workers: Its workers (None: not known, a run of an earlier version).
        started: When it started (seconds since the epoch).
        iteration: The run's ``training_iteration`` when it started.
        ended: ``"finished"``, ``"failed"`` (a worker failed), ``"preempted"`` (its node
            was drained), ``"resized"`` (an elastic run restarted at another size),
            ``"restarted"`` (restarted before its workers ran, the capacity having changed),
            ``"stopped"`` (Ctrl-C or SIGTERM to the driver; the run can be restored),
            ``"driver lost"`` (the driver ended without a word, e.g. killed), or None while
            it runs.
        cause: Why it ended, for a failure or a preemption: the root cause's summary.
    """

    number: int
    num_workers: int | None
    started: float
    iteration: int
    ended: str | None = None
    cause: str | None = None


@dataclass
class RunState:
    """Everything needed to continue a run, in the order it was committed.

    Attributes:
        status: ``"running"``, ``"finished"`` or ``"errored"``.
        checkpoints: The retained checkpoints, oldest first.
        latest: Directory name of the latest committed checkpoint, retained or not.
        next_checkpoint_index: The index the next checkpoint directory gets.
        training_iteration: Steps recorded so far (every worker reported once per step).
        num_failures: Worker-group failures so far, by every driver of the run.
        num_preemptions: Preemptions (a drained node) so far, counted apart.
        attempts: Worker groups started so far, by every driver of the run: each one's
            staging directory is named by its number.
        pending: Checkpoints reserved for logged steps and still being uploaded (ASYNC);
            the rows naming them are dropped if the run is reopened before they commit.
        error: The failure summary and traceback when the run failed.
        history: Every attempt, oldest first: its size and how it ended.
    """

    status: str = "running"
    checkpoints: list[CheckpointRecord] = field(default_factory=list)
    latest: str | None = None
    next_checkpoint_index: int = 0
    training_iteration: int = 0
    num_failures: int = 0
    num_preemptions: int = 0
    attempts: int = 0
    pending: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    history: list[AttemptRecord] = field(default_factory=list)
    version: int = STATE_VERSION

    def to_json(self) -> bytes:
        # The records as they are, not copied (asdict copies every value): only encoded
        data = dict(vars(self))
        data["checkpoints"] = [vars(c) for c in self.checkpoints]
        data["history"] = [vars(a) for a in self.history]
        return readable_json(data, sort_keys=True)

    @classmethod
    def from_json(cls, data: bytes | str) -> RunState:
        raw = json.loads(data)
        version = raw.get("version")
        if version != STATE_VERSION:
            raise ValueError(
                f"run state version {version!r} is not supported (expected {STATE_VERSION})"
            )
        raw["checkpoints"] = [CheckpointRecord(**c) for c in raw["checkpoints"]]
        raw["history"] = [AttemptRecord(**a) for a in raw.get("history", [])]
        return cls(**raw)

    def record(self, dir_name: str) -> CheckpointRecord | None:
        """The retained checkpoint called ``dir_name``, or None."""
        return next((c for c in self.checkpoints if c.dir_name == dir_name), None)
