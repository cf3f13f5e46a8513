"""What Tune hands a run it makes a trial of, and what it gets back.

Every Tune trial is a lockstep run: a trainer's ``fit()``, or a function trainable called
in the trial's thread with a session that records its reports. The run is told who it is
(its ids and resources, shown by ``get_context()``), gets the Tuner's link as one more
listener of its events, and may be started from a checkpoint that is not its own (a PBT
exploit's donor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from lockstep._core.checkpoint import Checkpoint
    from lockstep._core.result import Result
    from lockstep._core.run_events import RunListener


@dataclass(frozen=True, kw_only=True)
class TrialRun:
    """One run of a trial.

    Attributes:
        trial_id: The trial's id, unique in the experiment.
        trial_name: The trial's name (shown by Tune's table).
        resources: The CPUs and GPUs the trial was given.
        listener: The Tuner's link: told of the run's steps, it answers with the
            scheduler's decision.
        start_from: A checkpoint to start from in place of the run's own latest (a PBT
            exploit), with ``start_metrics``, what its step reported.
    """

    trial_id: str
    trial_name: str
    resources: Mapping[str, float] = field(default_factory=dict)
    listener: RunListener | None = None
    start_from: Checkpoint | None = None
    start_metrics: Mapping[str, Any] = field(default_factory=dict)

    def context_fields(self) -> dict[str, Any]:
        """What the trial adds to each worker's ``TrainContext``."""
        return {
            "trial_id": self.trial_id,
            "trial_name": self.trial_name,
            "trial_resources": dict(self.resources),
        }


@dataclass(frozen=True)
class TrialOutcome:
    """How a trial's run ended: ``"done"`` (returned, or stopped by the scheduler: either
    way the trial is terminated) or ``"paused"`` (restorable, by the scheduler's pause)."""

    status: Literal["done", "paused"]
    result: Result | None = None
