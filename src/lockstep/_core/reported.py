"""The checkpoint API of Ray Train V2: upload modes and the reported-checkpoint record."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from lockstep._core.checkpoint import Checkpoint


class CheckpointUploadMode(enum.Enum):
    """How ``report(checkpoint=...)`` gets the files into the run's storage.

    Attributes:
        SYNC: Copy the files before ``report`` returns (the default).
        ASYNC: ``report`` returns once every worker reported the step; the files are
            handed to the driver, which uploads them (retrying with backoff) and commits the
            checkpoint while training goes on. The upload survives the worker: a worker that
            dies after the report loses nothing.
        NO_UPLOAD: The checkpoint is already in the run's storage; it is committed where it
            is.

    Example:
        >>> CheckpointUploadMode.ASYNC.value
        'ASYNC'
    """

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


class CheckpointConsistencyMode(enum.Enum):
    """What ``get_all_reported_checkpoints`` waits for. Without validation both wait for
    every checkpoint this worker reported to be committed.

    Example:
        >>> CheckpointConsistencyMode.COMMITTED.value
        'COMMITTED'
    """

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


class ReportedCheckpointStatus(enum.Enum):
    """The state of a reported checkpoint; lockstep has no validation, so COMMITTED."""

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


@dataclass(frozen=True)
class ReportedCheckpoint:
    """A committed checkpoint and rank 0's metrics reported with it.

    Example:
        >>> rc = ReportedCheckpoint(Checkpoint("/tmp/run/checkpoint_000000"), {"loss": 0.5})
        >>> rc.metrics["loss"], rc.status.value
        (0.5, 'COMMITTED')
    """

    checkpoint: Checkpoint
    metrics: dict[str, Any] = field(default_factory=dict)
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED
