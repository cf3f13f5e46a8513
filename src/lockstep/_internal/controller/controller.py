"""TrainController: the control loop in the driver, a state machine stepped one transition
at a time.

    Starting -> Running -> (Restarting -> Starting -> Running)* -> Finished | Errored

Each state is a value; :meth:`TrainController.step` carries out one transition. The
worker group is reached only through its interface, so tests drive the controller with
a fake group and queued events.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from lockstep._core import flags
from lockstep._core.callback import RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.errors import (
    TrainingFailedError,
    WorkerFailure,
    awaiting_root_cause,
    root_cause,
)
from lockstep._core.result import Result, user_metrics
from lockstep._internal.controller.failure_policy import FailureDecision, FailurePolicy
from lockstep._internal.controller.progress import Progress
from lockstep._internal.controller.run_record import RunRecord
from lockstep._internal.controller.steps import ReportCountMismatch, Step, StepAggregator
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    Failed,
    Report,
    Returned,
    WorkerEvent,
)
from lockstep._internal.execution.worker_group.base import WorkerGroup, WorkerGroupSpec

POLL_TIMEOUT_S = 0.25


@dataclasses.dataclass(frozen=True)
class Starting:
    attempt: int


@dataclasses.dataclass(frozen=True)
class Running:
    attempt: int


@dataclasses.dataclass(frozen=True)
class Restarting:
    attempt: int
    failures: dict[int, WorkerFailure]


@dataclasses.dataclass(frozen=True)
class Finished:
    pass


@dataclasses.dataclass(frozen=True)
class Errored:
    error: TrainingFailedError


State = Starting | Running | Restarting | Finished | Errored


class TrainController:
    """Runs one training run to its end and returns its Result (or raises its error)."""

    def __init__(
        self,
        *,
        make_worker_group: Callable[[], WorkerGroup],
        spec: WorkerGroupSpec,
        record: RunRecord,
        failure_policy: FailurePolicy,
        progress: Progress,
        callbacks: Sequence[UserCallback] = (),
        resume_from_checkpoint: Checkpoint | None = None,
    ) -> None:
        self._make_worker_group = make_worker_group
        self._spec = spec
        self._run_record = record
        self._policy = failure_policy
        self._progress = progress
        self._callbacks = callbacks
        self._resume_from = resume_from_checkpoint
        self._group: WorkerGroup | None = None
        self._steps = StepAggregator(spec.num_workers)
        self._failures: dict[int, WorkerFailure] = {}
        self._return_values: dict[int, bytes] = {}
        self._last_metrics: dict[str, Any] | None = None
        self.state: State = Starting(attempt=0)

    def run(self) -> Result:
        """Step until the run finishes (return its Result) or fails (raise)."""
        resumed = self._run_record.state.latest
        self._progress.start(
            resumed_from=resumed, iteration=self._run_record.state.training_iteration
        )
        outcome = "interrupted"
        try:
            while not isinstance(self.state, Finished | Errored):
                self.step()
            outcome = "finished" if isinstance(self.state, Finished) else "failed"
        finally:
            self._close(outcome)
        if isinstance(self.state, Errored):
            raise self.state.error
        return self._result()

    def step(self) -> None:
        """Carry out one transition."""
        state = self.state
        if isinstance(state, Starting):
            self.state = self._start(state)
        elif isinstance(state, Running):
            self.state = self._poll(state)
        elif isinstance(state, Restarting):
            self._stop_group()
            self._progress.restarting(root_cause(state.failures).summary)
            self.state = Starting(attempt=state.attempt + 1)

    def _start(self, state: Starting) -> State:
        staging_dir = self._run_record.start_attempt(state.attempt)
        self._steps = StepAggregator(self._spec.num_workers)
        self._failures = {}
        self._return_values = {}  # only the attempt that succeeds returns
        spec = dataclasses.replace(
            self._spec,
            checkpoint=self._run_record.latest_checkpoint or self._resume_from,
            staging_dir=staging_dir,
        )
        self._group = self._make_worker_group()
        try:
            self._group.start(spec)
        except Exception as exc:
            return self._on_failures(state.attempt, {0: _start_failure(exc)})
        self._progress.workers_started()
        return Running(attempt=state.attempt)

    def _poll(self, state: Running) -> State:
        assert self._group is not None
        events = self._group.poll(POLL_TIMEOUT_S)
        failures: dict[int, WorkerFailure] = {}
        try:
            for event in events:
                self._handle(event, failures)
        except ReportCountMismatch as exc:
            failures[exc.rank] = _usage_failure(exc.rank, str(exc))
        self._progress.refresh()
        if failures:
            self._await_root_cause(failures)
            return self._on_failures(state.attempt, failures)
        if self._steps.all_finished():
            return Finished()
        return state

    def _await_root_cause(self, failures: dict[int, WorkerFailure]) -> None:
        """A closed connection or a timed-out collective is caused by a failure elsewhere
        that may reach the driver a moment later (the process watcher sees a death after
        the peer raised): wait for it, briefly, so the error names the cause."""
        assert self._group is not None
        deadline = time.monotonic() + flags.ROOT_CAUSE_WAIT_S.get()
        while awaiting_root_cause(failures, self._spec.num_workers - len(self._return_values)):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                for event in self._group.poll(min(left, POLL_TIMEOUT_S)):
                    self._handle(event, failures)
            except ReportCountMismatch as exc:
                failures[exc.rank] = _usage_failure(exc.rank, str(exc))

    def _handle(self, event: WorkerEvent, failures: dict[int, WorkerFailure]) -> None:
        if isinstance(event, Report):
            for step in self._steps.add(event):
                self._record(step)
        elif isinstance(event, Returned):
            self._progress.worker_stopped()
            self._return_values[event.rank] = event.return_value
            self._steps.finish(event.rank, event.num_reports)
        else:
            assert isinstance(event, Failed)
            self._progress.worker_stopped()
            failures[event.failure.rank] = event.failure

    def _record(self, step: Step) -> None:
        """Record one complete step (its checkpoint committed), then tell the workers and
        the callbacks."""
        checkpoint = self._run_record.record_step(
            step.metrics, staged=step.staged, timestamp=step.reports[0].time
        )
        if checkpoint is not None:
            assert self._group is not None
            self._group.notify(CheckpointCommitted(step.index, checkpoint))
        self._last_metrics = dict(step.metrics)
        all_metrics = [dict(r.metrics) for r in step.reports]
        for callback in self._callbacks:
            callback.after_report(self._run_context(), all_metrics, checkpoint)
        state = self._run_record.state
        latest = state.latest if checkpoint else None
        self._progress.step(state.training_iteration, step.metrics, latest)

    def _on_failures(self, attempt: int, failures: dict[int, WorkerFailure]) -> State:
        self._failures.update(failures)
        self._run_record.record_failure()
        for callback in self._callbacks:
            callback.after_exception(self._run_context(attempt), dict(self._failures))
        if self._policy.decide(self._failures, num_restarts=attempt) is FailureDecision.RESTART:
            return Restarting(attempt=attempt, failures=dict(self._failures))
        return Errored(TrainingFailedError.from_failures(self._failures, attempts=attempt + 1))

    def _close(self, outcome: str) -> None:
        self._stop_group()
        error = self.state.error if isinstance(self.state, Errored) else None
        self._run_record.close(error, finished=isinstance(self.state, Finished))
        self._progress.stop(outcome)

    def _stop_group(self) -> None:
        if self._group is not None:
            group, self._group = self._group, None
            group.shutdown()

    def _result(self) -> Result:
        metrics = self._last_metrics
        if metrics is None and self._run_record.last_row is not None:
            metrics = user_metrics(self._run_record.last_row)
        values = self.return_values()
        return Result.from_state(
            self._spec.run_dir,
            self._run_record.state,
            last_metrics=metrics,
            return_value=values[0] if values else None,
        )

    def return_values(self) -> list[Any]:
        """What every worker's function returned, in rank order (after a successful run)."""
        import cloudpickle

        return [cloudpickle.loads(self._return_values[r]) for r in sorted(self._return_values)]

    def _run_context(self, attempt: int | None = None) -> RunContext:
        if attempt is None:
            attempt = self.state.attempt if isinstance(self.state, Starting | Running) else 0
        return RunContext(
            name=self._spec.experiment_name, path=self._spec.run_dir.uri, attempt=attempt
        )


def _start_failure(exc: Exception) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="start",
        summary=f"the workers could not be started: {type(exc).__name__}: {exc}",
        time=time.time(),
    )


def _usage_failure(rank: int, message: str) -> WorkerFailure:
    return WorkerFailure(
        rank=rank, pid=None, kind="usage", summary=message, time=time.time(), retryable=False
    )
