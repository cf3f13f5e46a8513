"""A Tune function trial's run: the function in the trial's thread, no controller.

A function trainable is one rank in the driver's process, so what a Train run needs a
controller, a worker group and a pipe for (starting workers, a barrier across them, their
failures reaching the driver) is here a call: the function runs in the thread that runs
the trial, with a :class:`TrialSession` whose ``report()`` records the step through the
run's record and asks the listeners (as Ray Tune runs a function trainable: in a thread,
with a session). What the run keeps is the same as a Train run's: the record on disk (rows,
checkpoints committed whole or not at all, the run state), the time ledger, the
FailureConfig's restarts from the latest checkpoint, the events its listeners hear.

A function trial has no hang watchdog (a thread cannot be stopped): the trainer runs one
with ``FailureConfig(hang_timeout_s=...)`` as a Train run, which has one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from lockstep._core import run_events as ev
from lockstep._core import storage
from lockstep._core.callback import Callback, RunContext, UserCallback, listeners_for
from lockstep._core.context import TrainContext
from lockstep._core.errors import TrainingFailedError, WorkerFailure
from lockstep._core.result import Result
from lockstep._internal.controller.controller import PAUSED
from lockstep._internal.controller.failure_policy import FailureDecision, FailurePolicy
from lockstep._internal.controller.ledger import RECOVERING, RUNNING, SHUTDOWN, Ledger
from lockstep._internal.controller.run_record import RunRecord
from lockstep._internal.controller.trial_session import (
    RunSideError,
    TrialSession,
    TrialSetup,
    TrialStopped,
)
from lockstep._internal.execution.worker import session as session_module
from lockstep._internal.execution.worker.main import exception_failure

# How a run ended: the function returned (or a listener stopped it: a Tune trial ends
# terminated either way), a listener paused it, or it failed beyond its FailureConfig.
Ending = Literal["finished", "paused", "failed"]


class FunctionTrialRun:
    """Runs ``fn(config)`` to its end, attempt after
    attempt as ``failure_policy`` allows; returns how it ended and its Result, or raises
    the run's TrainingFailedError.

    Args:
        record: The run's record, opened (and started from a PBT donor's checkpoint).
        context: The function's ``get_context()``.
        listeners: The Tuner's link to the trial.
        callbacks: The run's Train callbacks (Tune's see the trial from the experiment).
        started_at: When the trial's run began (``time.monotonic()``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        config: dict[str, Any],
        *,
        record: RunRecord,
        context: TrainContext,
        failure_policy: FailurePolicy,
        score_attribute: str | None,
        listeners: Sequence[ev.RunListener] = (),
        callbacks: Sequence[UserCallback | Callback] = (),
        started_at: float | None = None,
    ) -> None:
        self._fn, self._config = fn, config
        self._record = record
        self._policy = failure_policy
        path = record.run_dir.uri
        self._listeners = ev.Listeners(
            [*listeners_for(callbacks, context.experiment_name, path, config), *listeners]
        )
        self._ledger = Ledger(
            record.previous_ledger(),
            assumed_mtbf_s=failure_policy.assumed_mtbf_s,
            started_at=started_at,
        )
        self._session = TrialSession(
            TrialSetup(context, record, self._ledger, self._listeners, score_attribute)
        )
        self._name = context.experiment_name
        self._return_value: Any = None

    def run(self) -> tuple[Ending, Result | None]:
        """Run to the end: how it ended, and its Result when a listener wants to hear of
        it (a Tuner reads its trials' results from their directories)."""
        state = self._record.state
        self._emit(ev.RunStarted(self._context(0), state.latest, state.training_iteration))
        attempt, error, ending = 0, None, None
        try:
            while ending is None:
                ending, error = self._attempt(attempt)
                attempt += 1
        except BaseException as exc:  # the driver's own failure (a listener's exception)
            self._end(None, exc, ending="failed")
            raise
        result = self._end(error, None, ending=ending)
        if error is not None:
            raise error
        return ending, result

    def _attempt(self, attempt: int) -> tuple[Ending | None, TrainingFailedError | None]:
        """One attempt of the function: how the run ended, or None to start another."""
        record = self._record
        staging = record.start_attempt(attempt, 1)
        checkpoint = record.latest_checkpoint
        self._session.begin_attempt(self._context(attempt), staging, checkpoint)
        self._ledger.attempt_starting(1, from_checkpoint=checkpoint is not None)
        self._ledger.enter(RUNNING)
        session_module.install(self._session, process_wide=False)
        try:
            self._return_value = self._fn(self._config)
            return "finished", None
        except TrialStopped as stop:
            return ("paused" if stop.directive is ev.Directive.PAUSE else "finished"), None
        except RunSideError as failed:
            if failed.failure is None:
                raise failed.error from None  # the run's own failure: it ends here
            failure = failed.failure
        except BaseException as exc:  # SystemExit too: a worker's function fails with it
            failure = exception_failure(0, exc)
        finally:
            session_module.install(None, process_wide=False)
        return self._failed(attempt, failure)

    def _failed(
        self, attempt: int, failure: WorkerFailure
    ) -> tuple[Ending | None, TrainingFailedError | None]:
        """The attempt failed: restart it, or end the run with its error."""
        failures = {0: failure}
        count = self._record.record_failure(cause=failure.summary)
        self._ledger.failed()
        restarting = self._policy.decide(failures, num_restarts=count - 1)
        if restarting is FailureDecision.RESTART:
            self._ledger.enter(RECOVERING)  # until the next attempt's function starts
        again = restarting is FailureDecision.RESTART
        self._emit(ev.AttemptFailed(self._context(attempt), failures, again, failure.summary))
        if again:
            return None, None
        error_file = self._record.run_dir.join(storage.ERROR_FILE)
        error = TrainingFailedError.from_failures(
            failures, attempts=attempt + 1, error_file=error_file
        )
        return "failed", error

    def _end(
        self,
        error: TrainingFailedError | None,
        driver_error: BaseException | None,
        *,
        ending: Ending | None,
    ) -> Result | None:
        """Write the run's final record and time ledger; tell the listeners."""
        record, ledger = self._record, self._ledger
        ledger.enter(SHUTDOWN)
        ledger.freeze()
        record.close(error, finished=ending == "finished", stopped=ending == "paused")
        # No time.json: the figures went out with every result (goodput, time_*_s), and
        # a trial's directory is read for its rows, checkpoints and state
        if not self._listeners.wants(ev.RunEnded):
            return None
        result = None
        if driver_error is None:
            result = record.result(
                self._session.last_metrics,
                return_value=self._return_value,
                time=ledger.snapshot(),
            )
        outcome = "stopped" if ending == "paused" else ending or "failed"
        stopped = str(record.interruption(PAUSED)) if ending == "paused" else None
        self._emit(ev.RunEnded(self._context(0), outcome, result, error or driver_error, stopped))
        return result

    def _emit(self, event: ev.RunEvent) -> None:
        self._listeners.emit(event)

    def _context(self, attempt: int) -> RunContext:
        return RunContext(name=self._name, path=self._record.run_dir.uri, attempt=attempt)
