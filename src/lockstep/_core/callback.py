"""Callbacks a user hands to ``RunConfig(callbacks=[...])``; they run in the driver."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockstep._core.checkpoint import Checkpoint
    from lockstep._core.errors import WorkerFailure


class UserCallback:
    """Hooks called by the controller, in the driver process, as a run progresses.

    Subclass it and override the hooks you need; each default does nothing.

    Example:
        >>> class PrintLoss(UserCallback):
        ...     def after_report(self, run_context, metrics, checkpoint):
        ...         print(metrics[0]["loss"])
    """

    def after_report(
        self,
        run_context: RunContext,
        metrics: list[dict[str, Any]],
        checkpoint: Checkpoint | None,
    ) -> None:
        """Called once every worker has reported a step.

        Args:
            run_context: The run's name, directory and attempt.
            metrics: Each worker's metrics for this step, in rank order.
            checkpoint: The checkpoint committed at this step, or None.
        """

    def after_exception(
        self, run_context: RunContext, worker_exceptions: dict[int, WorkerFailure]
    ) -> None:
        """Called after the workers failed, before a restart or before the run raises."""


class RunContext:
    """What a callback can know about the run."""

    def __init__(self, *, name: str, path: str, attempt: int) -> None:
        self.name = name
        self.path = path
        self.attempt = attempt

    def __repr__(self) -> str:
        return f"RunContext(name={self.name!r}, path={self.path!r}, attempt={self.attempt})"
