"""Callbacks a user hands to ``RunConfig(callbacks=[...])``; they run in the driver.

Two interfaces, Ray's: Train's :class:`UserCallback` and Tune's :class:`Callback`. Both are
served by the one protocol of ``run_events``: :class:`UserCallbackListener` and
:class:`TrialCallbackListener` turn a run's events into their hooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockstep._core.run_events import (
    AttemptFailed,
    RunEnded,
    RunEvent,
    RunStarted,
    StepBegin,
    StepEnd,
    StepRecorded,
    tune_result,
)

if TYPE_CHECKING:
    from lockstep._core.checkpoint import Checkpoint
    from lockstep._core.errors import WorkerFailure
    from lockstep._core.result import Result


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

    def before_run(self, run_context: RunContext) -> None:
        """Called once when the run starts, before its first workers start."""

    def after_run(self, run_context: RunContext, result: Result) -> None:
        """Called once when the run ended, finished or failed (``result.error`` is set
        then, after :meth:`after_exception`); also after a stop (Ctrl-C), which can be
        continued."""


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

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        """Called at the start of each step of the experiment's loop; an exception raised
        here ends ``Tuner.fit()`` (the experiment can be continued with ``restore``)."""

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        """Called at the end of each step of the experiment's loop."""

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

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial failed and is restarted from its latest checkpoint."""

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        """Called when a trial is restored from a checkpoint (a PBT exploit, say)."""

    def on_trial_save(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """Called after a trial saved a checkpoint (before ``on_checkpoint``)."""

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        """Called once after every trial ended."""


class UserCallbackListener:
    """Calls Train's :class:`UserCallback` hooks as a run's events come (as in Ray, a hook
    cannot stop the run: the workers need not wait for it)."""

    events = (RunStarted, StepRecorded, AttemptFailed, RunEnded)
    decides = False

    def __init__(self, callbacks: Sequence[UserCallback]) -> None:
        self._callbacks = list(callbacks)

    def on_event(self, event: RunEvent) -> None:
        run = event.run
        for callback in self._callbacks:
            if isinstance(event, StepRecorded):
                metrics = [dict(m) for m in event.worker_metrics]
                callback.after_report(run, metrics, event.checkpoint)
            elif isinstance(event, RunStarted):
                callback.before_run(run)
            elif isinstance(event, AttemptFailed):
                callback.after_exception(run, dict(event.failures))
            elif isinstance(event, RunEnded) and event.result is not None:
                callback.after_run(run, event.result)


class TrialCallbackListener:
    """Calls Tune's :class:`Callback` hooks for a run that is the experiment's only trial
    (a Train run given Tune's callbacks, the loggers say), as Tune calls them for each of
    its trials; a hook cannot stop the run)."""

    events = (RunStarted, StepBegin, StepEnd, StepRecorded, AttemptFailed, RunEnded)
    decides = False

    def __init__(self, callbacks: Sequence[Callback], trial: Trial) -> None:
        self._callbacks = list(callbacks)
        self.trial = trial
        self._iteration = 0

    def on_event(self, event: RunEvent) -> None:
        trials = [self.trial]
        if isinstance(event, StepRecorded):
            self._result(event, trials)
        elif isinstance(event, StepBegin | StepEnd):
            hook = "on_step_begin" if isinstance(event, StepBegin) else "on_step_end"
            for callback in self._callbacks:
                getattr(callback, hook)(self._iteration, trials)
        elif isinstance(event, RunStarted):
            self._iteration = event.iteration
            for callback in self._callbacks:
                callback.setup(stop=None, num_samples=1, total_num_samples=1)
            self.trial.status = "RUNNING"
            for callback in self._callbacks:
                callback.on_trial_start(self._iteration, trials, self.trial)
        elif isinstance(event, AttemptFailed) and event.restarting:
            for callback in self._callbacks:
                callback.on_trial_recover(self._iteration, trials, self.trial)
        elif isinstance(event, RunEnded):
            self._ended(event, trials)

    def _result(self, event: StepRecorded, trials: list[Trial]) -> None:
        result = tune_result(
            event.row,
            event.clock,
            trial_id=self.trial.trial_id,
            config=self.trial.config,
            time=event.time,
        )
        self.trial.last_result = result
        self._iteration = event.iteration
        metrics = [dict(m) for m in event.worker_metrics]
        for callback in self._callbacks:
            callback.on_trial_result(
                self._iteration, trials, self.trial, result, worker_results=metrics
            )
        if event.checkpoint is not None:
            for callback in self._callbacks:
                callback.on_trial_save(self._iteration, trials, self.trial)
            for callback in self._callbacks:
                callback.on_checkpoint(self._iteration, trials, self.trial, event.checkpoint)

    def _ended(self, event: RunEnded, trials: list[Trial]) -> None:
        error = event.error
        self.trial.error = error
        self.trial.status = "TERMINATED" if error is None else "ERROR"
        for callback in self._callbacks:
            if error is None:
                callback.on_trial_complete(self._iteration, trials, self.trial)
            else:
                callback.on_trial_error(self._iteration, trials, self.trial)
        for callback in self._callbacks:
            callback.on_experiment_end(trials)


def listeners_for(
    callbacks: Sequence[UserCallback | Callback],
    name: str,
    path: str,
    config: dict[str, Any] | None = None,
) -> list[UserCallbackListener | TrialCallbackListener]:
    """The listeners that serve a run's callbacks: Train's, and Tune's with the run as the
    experiment's only trial (``name`` its id, ``config`` its ``train_loop_config``)."""
    listeners: list[UserCallbackListener | TrialCallbackListener] = []
    users = [c for c in callbacks if isinstance(c, UserCallback)]
    if users:
        listeners.append(UserCallbackListener(users))
    tune = [c for c in callbacks if isinstance(c, Callback)]
    if tune:
        trial = Trial(trial_id=name, config=dict(config or {}), path=path, results_logged=True)
        listeners.append(TrialCallbackListener(tune, trial))
    return listeners
