"""Callbacks a user hands to ``RunConfig(callbacks=[...])``; they run in the driver."""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(eq=False, kw_only=True)
class RunContext:
    """What a callback can know about the run."""

    name: str
    path: str
    attempt: int


@dataclass(eq=False, repr=False, kw_only=True)
class Trial:
    """One run as a callback sees it: a Tune trial, or a Train run as its only trial.

    Attributes:
        trial_id: Unique within the experiment (a Train run uses its name).
        config: The trial's hyperparameters (a Train run's ``train_loop_config``).
        path: The trial's directory, where its results and checkpoints are written.
        status: ``"PENDING"``, ``"RUNNING"``, ``"PAUSED"``, ``"TERMINATED"`` or ``"ERROR"``.
        last_result: The latest metrics reported, with ``training_iteration``.
        error: The error that ended the trial, or None.
        experiment_tag: A short description of the trial's config, for display.
        results_logged: True when the run itself writes ``result.json`` and ``progress.csv``
            in ``path`` (a Train run does); the JSON and CSV loggers then leave those files
            to it.
    """

    trial_id: str
    config: dict[str, Any]
    path: str
    experiment_tag: str = ""
    results_logged: bool = False
    status: str = field(default="PENDING", init=False)
    last_result: dict[str, Any] = field(default_factory=dict, init=False)
    error: BaseException | None = field(default=None, init=False)

    @property
    def local_path(self) -> str:
        """The trial's directory (Ray's older name)."""
        return self.path

    @property
    def logdir(self) -> str:
        """The trial's directory (Ray's oldest name)."""
        return self.path

    def __str__(self) -> str:
        return self.trial_id

    def __repr__(self) -> str:
        return f"Trial({self.trial_id!r}, status={self.status!r})"


class Callback:
    """Ray Tune's callback interface; one protocol for Tune experiments and Train runs.

    Tune calls each hook for every trial; a Train run (``RunConfig(callbacks=[...])``) calls
    them with the run as the experiment's only trial. Override the hooks you need; each
    default does nothing. ``iteration`` counts the experiment's steps, ``trials`` lists
    every trial.

    Example:
        >>> class PrintLoss(Callback):
        ...     def on_trial_result(self, iteration, trials, trial, result, **info):
        ...         print(trial, result["loss"])
    """

    def setup(self, **info: Any) -> None:
        """Called once before the first trial starts (``stop``, ``num_samples`` in info)."""

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial starts (or restarts after a pause)."""

    def on_trial_result(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        result: dict[str, Any],
        **info: Any,
    ) -> None:
        """Called for each report, ``result`` holding ``training_iteration``."""

    def on_checkpoint(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        checkpoint: Checkpoint,
        **info: Any,
    ) -> None:
        """Called when a checkpoint of the trial is committed."""

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial finishes (or is stopped) without an error."""

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial ends with an error (``trial.error``)."""

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        """Called once after every trial ended."""
