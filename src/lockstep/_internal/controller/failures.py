"""The failures the driver records itself, and what it adds to the workers' own.

The workers report their failures (an exception, a death, a hang's stacks); the driver
makes the records of what only it sees: workers that could not start, a misuse it caught
(mismatched report counts), an ASYNC upload or a commit that storage refused. To every
failure of a run of several workers it adds each rank's report count and who waited.
"""

from __future__ import annotations

import dataclasses

from lockstep._core import storage
from lockstep._core.errors import WorkerFailure
from lockstep._internal.controller.steps import StepAggregator


def start_failure(exc: Exception) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="start",
        summary=f"the workers could not be started: {type(exc).__name__}: {exc}",
    )


def usage_failure(rank: int, message: str) -> WorkerFailure:
    """A misuse the driver caught (not retried: a restart would repeat it)."""
    return WorkerFailure(rank=rank, pid=None, kind="usage", summary=message, retryable=False)


def upload_failure(exc: BaseException) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="upload",
        summary=f"an ASYNC checkpoint upload failed after retries: {type(exc).__name__}: {exc}",
        retryable=False,
    )


def storage_failure(exc: storage.CheckpointWriteError) -> WorkerFailure:
    """A checkpoint the driver could not commit: storage was retried already, and the run
    record in this driver would not survive a restart's redo of the step. Raised."""
    return WorkerFailure(rank=0, pid=None, kind="storage", summary=str(exc), retryable=False)


def with_waiting(
    failures: dict[int, WorkerFailure], steps: StepAggregator
) -> dict[int, WorkerFailure]:
    """A failure on a run of several workers names every rank's report count, and the
    ranks it left waiting in report(): why those ranks stopped is then plain to see."""
    if len(steps.counts()) < 2:
        return failures
    waiting = [r for r in steps.waiting() if r not in failures]
    note = f" ({steps.describe_counts()})"
    if waiting:
        ranks = ", ".join(map(str, waiting))
        note = f"; rank{'s' if len(waiting) > 1 else ''} {ranks} waited in report(){note}"
    return {
        rank: f if f.kind == "usage" else dataclasses.replace(f, summary=f.summary + note)
        for rank, f in failures.items()
    }
