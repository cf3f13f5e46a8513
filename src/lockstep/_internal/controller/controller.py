"""TrainController: the control loop in the driver, a state machine stepped one transition
at a time.

    Starting -> Running -> (Restarting -> Starting -> Running)* -> Finished | Errored

Each state is a value; :meth:`TrainController.step` carries out one transition. The
worker group is reached only through its interface, so tests drive the controller with
a fake group and queued events.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Generator, Sequence
from typing import Any

from lockstep._core import storage
from lockstep._core.callback import RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.errors import TrainingFailedError, WorkerFailure
from lockstep._core.result import Result, user_metrics
from lockstep._internal.backends.base import WorkerGroupInfo
from lockstep._internal.controller.checkpoint_manager import CheckpointManager
from lockstep._internal.controller.failure_policy import FailureDecision, FailurePolicy
from lockstep._internal.controller.progress import Progress
from lockstep._internal.controller.run_log import RunLog
from lockstep._internal.controller.steps import ReportCountMismatch, Step, StepAggregator
from lockstep._internal.controller.uploads import UploadJob, Uploads, discard
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    Failed,
    Report,
    Returned,
    StepDone,
    WorkerEvent,
)
from lockstep._internal.execution.worker_group import WorkerGroup, WorkerGroupSpec

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
        checkpoints: CheckpointManager,
        run_log: RunLog,
        failure_policy: FailurePolicy,
        progress: Progress,
        callbacks: Sequence[UserCallback] = (),
        resume_from_checkpoint: Checkpoint | None = None,
    ) -> None:
        self._make_worker_group = make_worker_group
        self._spec = spec
        self._checkpoints = checkpoints
        self._run_log = run_log
        self._policy = failure_policy
        self._progress = progress
        self._callbacks = callbacks
        self._resume_from = resume_from_checkpoint
        self._group: WorkerGroup | None = None
        self._steps = StepAggregator(spec.num_workers)
        self._failures: dict[int, WorkerFailure] = {}
        self._return_values: dict[int, bytes] = {}
        self._last_metrics: dict[str, Any] | None = None
        last = run_log.last_row
        self._time_offset = float(last["time_total_s"]) if last else 0.0
        self._started = time.monotonic()
        self._spec_offset = 0
        self._uploads = Uploads(spec.run_dir.upload_dir)
        self.state: State = Starting(attempt=0)

    def run(self) -> Result:
        """Step until the run finishes (return its Result) or fails (raise)."""
        steps = self.iter_run()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: Result = done.value
                return result

    def iter_run(self) -> Generator[None, None, Result]:
        """:meth:`run`, yielding after each transition; returns the Result at the end
        (for callers that interleave their own work, such as ``Trainer.run_iterator``)."""
        resumed = self._checkpoints.state.latest
        self._progress.start(
            resumed_from=resumed, iteration=self._checkpoints.state.training_iteration
        )
        outcome = "interrupted"
        try:
            while not isinstance(self.state, Finished | Errored):
                self.step()
                yield
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
            self._progress.restarting(_first(state.failures).summary)
            self.state = Starting(attempt=state.attempt + 1)

    def _start(self, state: Starting) -> State:
        self._settle_uploads()
        self._checkpoints.remove_uncommitted()
        self._steps = StepAggregator(self._spec.num_workers)
        self._failures = {}
        self._return_values = {}  # only the attempt that succeeds returns
        spec = dataclasses.replace(
            self._spec,
            checkpoint=self._checkpoints.latest_checkpoint or self._resume_from,
            step_offset=self._checkpoints.state.training_iteration,
        )
        spec = dataclasses.replace(spec, reported=self._checkpoints.reported())
        self._group = self._make_worker_group()
        try:
            self._backend_hooks("on_start", "on_training_start")
            self._group.start(spec)
        except Exception as exc:
            return self._on_failures(state.attempt, {0: _start_failure(exc)})
        self._spec_offset = spec.step_offset
        self._progress.workers_started()
        return Running(attempt=state.attempt)

    def _poll(self, state: Running) -> State:
        assert self._group is not None
        events = self._group.poll(POLL_TIMEOUT_S)
        failures: dict[int, WorkerFailure] = {}
        self._commit_uploaded(failures)
        for event in events:
            try:
                self._handle(event, failures)
            except ReportCountMismatch as exc:
                failures.setdefault(exc.rank, _usage_failure(exc.rank, str(exc)))
        self._progress.refresh()
        if failures:
            return self._on_failures(state.attempt, self._with_waiting(failures))
        if self._steps.all_finished():
            return Finished()
        return state

    def _handle(self, event: WorkerEvent, failures: dict[int, WorkerFailure]) -> None:
        if isinstance(event, Report):
            for step in self._steps.add(event):
                self._record(step)
        elif isinstance(event, Returned):
            self._progress.worker_stopped()
            self._return_values[event.rank] = event.return_value
            if event.dropped is not None:
                warnings.warn(event.dropped, stacklevel=1)
            self._steps.finish(event.rank, event.num_reports)
        else:
            assert isinstance(event, Failed)
            self._progress.worker_stopped()
            failures[event.failure.rank] = event.failure

    def _with_waiting(self, failures: dict[int, WorkerFailure]) -> dict[int, WorkerFailure]:
        """A failure on a run of several workers names every rank's report count, and the
        ranks it left waiting in report(): why those ranks stopped is then plain to see."""
        if self._spec.num_workers < 2:
            return failures
        waiting = [r for r in self._steps.waiting() if r not in failures]
        note = f" ({self._steps.describe_counts()})"
        if waiting:
            ranks = ", ".join(map(str, waiting))
            note = f"; rank{'s' if len(waiting) > 1 else ''} {ranks} waited in report(){note}"
        return {
            rank: f if f.kind == "usage" else dataclasses.replace(f, summary=f.summary + note)
            for rank, f in failures.items()
        }

    def _record(self, step: Step) -> None:
        """Write one complete step: commit its checkpoint, log it, tell callbacks."""
        state = self._checkpoints.state
        state.training_iteration += 1
        iteration = state.training_iteration
        checkpoint, dir_name = None, None
        assert self._group is not None
        if not step.checkpointed:
            # Release the workers first: everything below is the driver's own bookkeeping.
            self._group.notify(StepDone(step.index))
        elif step.uploads_async:
            self._group.notify(StepDone(step.index))
            dir_name = self._submit_upload(step, iteration)
        else:
            checkpoint = self._commit(step, iteration)
            dir_name = state.latest
        self._last_metrics = dict(step.metrics)
        self._run_log.append(
            {
                **step.metrics,
                "training_iteration": iteration,
                "timestamp": step.reports[0].time,
                "time_total_s": self._time_offset + time.monotonic() - self._started,
                "checkpoint_dir_name": dir_name,
            }
        )
        if checkpoint is not None:
            self._run_log.flush()
            self._announce(step, iteration, checkpoint)
        elif not step.checkpointed:
            self._announce(step, iteration, None)

    def _commit(
        self, step: Step, iteration: int, reserved: tuple[str, int] | None = None
    ) -> Checkpoint:
        """Commit the step's checkpoint and tell every worker."""
        persisted = [r.persisted for r in step.reports if r.persisted is not None]
        if persisted:
            checkpoint = self._checkpoints.adopt(persisted[0], step.metrics, iteration, reserved)
        else:
            staged = storage.staging_dir_name(self._spec_offset + step.index)
            self._stage_handoffs(step)
            if reserved is None and step.dir_name is not None:
                reserved = self._checkpoints.reserve(step.dir_name)
            checkpoint = self._checkpoints.commit(staged, step.metrics, iteration, reserved)
        if self._group is not None:
            reported = self._checkpoints.reported()
            self._group.notify(CheckpointCommitted(step.index, checkpoint, reported))
        return checkpoint

    def _stage_handoffs(self, step: Step) -> None:
        """Ranks that reported ASYNC in a step another rank reported SYNC: their files
        are staged now, so the step commits whole."""
        for report in step.reports:
            if report.handoff is not None and os.path.isdir(report.handoff):
                staged = storage.staging_dir_name(self._spec_offset + step.index, report.rank)
                self._spec.run_dir.upload_dir(report.handoff, staged)
                discard([report.handoff])

    def _announce(self, step: Step, iteration: int, checkpoint: Checkpoint | None) -> None:
        state = self._checkpoints.state
        all_metrics = [dict(r.metrics) for r in step.reports]
        for callback in self._callbacks:
            callback.after_report(self._run_context(), all_metrics, checkpoint)
        self._progress.step(iteration, step.metrics, state.latest if checkpoint else None)

    def _submit_upload(self, step: Step, iteration: int) -> str:
        """Hand the step's files to the upload thread; the name it will be committed as."""
        handoffs = {r.rank: r.handoff for r in step.reports if r.handoff is not None}
        reserved = self._checkpoints.reserve(step.dir_name)
        job = UploadJob((step, iteration, reserved), self._spec_offset + step.index, handoffs)
        self._uploads.submit(job)
        return reserved[0]

    def _commit_uploaded(self, failures: dict[int, WorkerFailure], *, wait: bool = False) -> None:
        """Commit the ASYNC checkpoints whose files are uploaded, in report order."""
        for done in self._uploads.finished(wait=wait):
            step, iteration, reserved = done.job.step
            if done.error is not None:
                failures[0] = _upload_failure(done.error)
                continue
            checkpoint = self._commit(step, iteration, reserved)
            self._run_log.flush()
            self._announce(step, iteration, checkpoint)

    def _settle_uploads(self) -> None:
        """Before a restart or the end: commit every upload of a complete step, and drop
        the hand-off files of steps that not every rank reached."""
        failures: dict[int, WorkerFailure] = {}
        self._commit_uploaded(failures, wait=True)
        discard(r.handoff for r in self._steps.pending_reports() if r.handoff is not None)
        if failures and not isinstance(self.state, Errored):
            self._failures.update(failures)

    def _on_failures(self, attempt: int, failures: dict[int, WorkerFailure]) -> State:
        self._failures.update(failures)
        self._checkpoints.state.num_failures += 1
        for callback in self._callbacks:
            callback.after_exception(self._run_context(attempt), dict(self._failures))
        if self._policy.decide(self._failures, num_restarts=attempt) is FailureDecision.RESTART:
            return Restarting(attempt=attempt, failures=dict(self._failures))
        return Errored(TrainingFailedError.from_failures(self._failures, attempts=attempt + 1))

    def _close(self, outcome: str) -> None:
        self._stop_group()
        self._settle_uploads()
        self._uploads.close()
        self._checkpoints.remove_uncommitted()
        state = self._checkpoints.state
        if isinstance(self.state, Finished):
            state.status = "finished"
        elif isinstance(self.state, Errored):
            state.status = "errored"
            state.error = _error_record(self.state.error)
            self._write_error_file(self.state.error)
        self._run_log.close()
        self._checkpoints.save()
        self._progress.stop(outcome)

    def _stop_group(self) -> None:
        if self._group is not None:
            group, self._group = self._group, None
            group.shutdown()
            self._backend_hooks("on_shutdown")

    def _backend_hooks(self, *names: str) -> None:
        """Ray's driver-side Backend hooks, for backends written for Ray."""
        backend = self._spec.backend
        info = WorkerGroupInfo(num_workers=self._spec.num_workers)
        config = getattr(backend, "config", None)
        for name in names:
            hook = getattr(backend, name, None)
            if hook is not None:
                hook(info, config)

    def _write_error_file(self, error: TrainingFailedError) -> None:
        run_dir = self._spec.run_dir
        run_dir.write_atomic(storage.ERROR_FILE, (str(error) + "\n").encode("utf-8"))

    def _result(self) -> Result:
        metrics = self._last_metrics
        if metrics is None and self._run_log.last_row is not None:
            metrics = user_metrics(self._run_log.last_row)
        values = self.return_values()
        return Result.from_state(
            self._spec.run_dir,
            self._checkpoints.state,
            last_metrics=metrics,
            return_value=values[0] if values else None,
            num_to_keep=self._checkpoints.num_to_keep,
        )

    def latest_checkpoint(self) -> Checkpoint | None:
        """The run's latest committed checkpoint, or None."""
        return self._checkpoints.latest_checkpoint

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


def _first(failures: dict[int, WorkerFailure]) -> WorkerFailure:
    return min(failures.values(), key=lambda f: f.time)


def _start_failure(exc: Exception) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="start",
        summary=f"the workers could not be started: {type(exc).__name__}: {exc}",
        time=time.time(),
    )


def _upload_failure(exc: BaseException) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="upload",
        summary=f"an ASYNC checkpoint upload failed after retries: {type(exc).__name__}: {exc}",
        time=time.time(),
        retryable=False,
    )


def _usage_failure(rank: int, message: str) -> WorkerFailure:
    return WorkerFailure(
        rank=rank, pid=None, kind="usage", summary=message, time=time.time(), retryable=False
    )


def _error_record(error: TrainingFailedError) -> dict[str, Any]:
    failures = {
        str(rank): {
            field.name: getattr(f, field.name)
            for field in dataclasses.fields(f)
            if field.name != "exception"
        }
        for rank, f in error.worker_failures.items()
    }
    return {"message": str(error), "failures": failures}
