"""TrainController: the control loop in the driver, a state machine stepped one transition
at a time.

    Starting -> Running -> (Restarting | Resizing -> Starting -> Running)* -> Finished | Errored
    any of the first three -> Stopped, when asked to stop (Ctrl-C, SIGTERM)

A preemption (SIGTERM or Ctrl-C to the driver, a drained Ray node) first tells the
workers and waits, in Running, for their next report or its deadline (see
``preemption.py``); then the run stops, or, for a drained node, restarts.

An elastic run (``num_workers=(min, max)``) asks its scaling policy for each attempt's size
when starting, and, while running healthy, whether to resize (a restart from the latest
checkpoint at the new size that counts as no failure).

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

from lockstep._core import flags, storage
from lockstep._core.callback import Callback, RunContext, Trial, UserCallback
from lockstep._core.checkpoint import DATA_POSITIONS_KEY, Checkpoint
from lockstep._core.errors import (
    TrainingFailedError,
    TrainingInterrupted,
    WorkerFailure,
    awaiting_root_cause,
    root_cause,
)
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.result import Result, user_metrics
from lockstep._internal.backends.base import WorkerGroupInfo
from lockstep._internal.controller import data_positions, hang, interrupts
from lockstep._internal.controller.failure_policy import FailureDecision, FailurePolicy
from lockstep._internal.controller.preemption import Drain, Notice, driver_notice_info
from lockstep._internal.controller.progress import Progress, RunSummary
from lockstep._internal.controller.run_record import PendingCheckpoint, RunRecord
from lockstep._internal.controller.scaling_policy import (
    ElasticRun,
    NoopDecision,
    ResizeDecision,
    WorkerGroupState,
)
from lockstep._internal.controller.steps import ReportCountMismatch, Step, StepAggregator
from lockstep._internal.controller.trial_hooks import TrialHooks
from lockstep._internal.controller.uploads import UploadJob, Uploads, discard
from lockstep._internal.execution.capacity import CapacityChanged
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    Failed,
    Heartbeat,
    Preempted,
    Report,
    Returned,
    StepDone,
    WorkerEvent,
)
from lockstep._internal.execution.worker_group.base import WorkerGroup, WorkerGroupSpec

POLL_TIMEOUT_S = 0.25
# How long an elastic run waits between looks at the capacity while too few workers fit.
SCHEDULING_WAIT_S = 1.0


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
class Resizing:
    """An elastic run's capacity changed: restart at ``num_workers`` (no failure)."""

    attempt: int
    num_workers: int


@dataclasses.dataclass(frozen=True)
class Finished:
    pass


@dataclasses.dataclass(frozen=True)
class Errored:
    error: TrainingFailedError


@dataclasses.dataclass(frozen=True)
class Stopped:
    """Asked to stop (Ctrl-C): workers stopped, the committed checkpoints kept."""

    reason: str


State = Starting | Running | Restarting | Resizing | Finished | Errored | Stopped


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
        callbacks: Sequence[UserCallback | Callback] = (),
        resume_from_checkpoint: Checkpoint | None = None,
        config: dict[str, Any] | None = None,
        elastic: ElasticRun | None = None,
    ) -> None:
        self._make_worker_group = make_worker_group
        self._elastic = elastic
        self._next_size: int | None = None  # decided while running, for the next start
        self._sized: int | None = None  # the size self._spec was made for (elastic)
        self._started_at = 0.0
        self._spec = spec
        self._run_record = record
        self._policy = failure_policy
        self._progress = progress
        self._callbacks = [c for c in callbacks if isinstance(c, UserCallback)]
        self._resume_from = resume_from_checkpoint
        self._group: WorkerGroup | None = None
        self._steps = StepAggregator(spec.num_workers)
        self._failures: dict[int, WorkerFailure] = {}
        self._return_values: dict[int, bytes] = {}
        self._last_metrics: dict[str, Any] | None = None
        self._staging_dir = storage.STAGING_DIR  # the running attempt's, from the record
        # Ray Tune's hooks see the run as the experiment's only trial.
        last = record.last_row
        trial = Trial(
            trial_id=spec.experiment_name,
            config=dict(config or {}),
            path=spec.run_dir.uri,
            results_logged=True,
        )
        tune_callbacks = [c for c in callbacks if isinstance(c, Callback)]
        time_offset = float(last["time_total_s"]) if last else 0.0
        self._hooks = TrialHooks(tune_callbacks, trial, time_offset=time_offset)
        self._uploads = Uploads(spec.run_dir.upload_dir)
        self._stop_reason: str | None = None
        self._notice: Notice | None = None  # a stop asked for by a signal, not acted on yet
        self._drain: Drain | None = None
        self._hang = hang.HangWatch(getattr(failure_policy, "hang_timeout_s", None))
        self.state: State = Starting(attempt=0)

    def request_stop(self, reason: str) -> None:
        """Stop at the next transition: the workers are stopped, the committed checkpoints
        stay, and the run can be continued (``Trainer.restore`` or the same script again).

        Safe to call from a signal handler: it only records the request.
        """
        self._stop_reason = reason

    def request_preemption(self, reason: str) -> None:
        """Stop gracefully: the workers are told (``get_preemption_info()``), their next
        report may commit one more checkpoint, then they are stopped (by
        ``FailureConfig.preemption_deadline_s`` from now at the latest) and the run can
        be continued. What SIGTERM and the first Ctrl-C do.

        Safe to call from a signal handler: it only records the request.
        """
        if self._notice is None:
            self._notice = Notice(reason, time.time())

    def run(self) -> Result:
        """Step until the run finishes (return its Result) or fails (raise).

        Ctrl-C (in the main thread) stops the run gracefully and raises
        :class:`TrainingInterrupted`; a second Ctrl-C kills the workers at once and raises
        it too. Either way the run can be continued.
        """
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
        resumed = self._run_record.state.latest
        self._progress.start(
            resumed_from=resumed, iteration=self._run_record.state.training_iteration
        )
        error: BaseException | None = None
        with (
            interrupts.stop_on_sigint(self.request_preemption),
            interrupts.stop_on_sigterm(self.request_preemption),
        ):
            try:
                self._hooks.start()
                yield from self._run_to_the_end()
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: the state says Stopped, raised below
            except BaseException as exc:
                error = exc
                raise
            finally:
                if isinstance(self.state, Errored):
                    error = self.state.error
                self._hooks.end(error)
        if isinstance(self.state, Errored):
            raise self.state.error
        if isinstance(self.state, Stopped):
            raise self._interrupted(self.state)
        return self._result()

    def _run_to_the_end(self) -> Generator[None, None, None]:
        outcome = "interrupted"
        try:
            while not isinstance(self.state, Finished | Errored | Stopped):
                self.step()
                yield
            outcome = _OUTCOMES[type(self.state)]
        except KeyboardInterrupt:
            # the second Ctrl-C: still say where the run is and how to continue it
            self.state, outcome = Stopped(interrupts.CTRL_C), "stopped"
            raise
        finally:
            self._close(outcome)

    def step(self) -> None:
        """Carry out one transition."""
        state = self.state
        if self._stop_reason is not None and not isinstance(state, Finished | Errored):
            self.state = Stopped(self._stop_reason)
        elif self._notice is not None and not isinstance(state, Running):
            # no workers to tell: stop at once
            self.state = Stopped(self._notice.reason)
        elif isinstance(state, Running) and (self._notice or self._drain or self._node_drain()):
            self.state = self._poll_draining(state)
        elif isinstance(state, Starting):
            self.state = self._start(state)
        elif isinstance(state, Running):
            self.state = self._poll(state)
        elif isinstance(state, Restarting):
            self._stop_group()
            self._progress.restarting(root_cause(state.failures).summary)
            self.state = Starting(attempt=state.attempt + 1)
        elif isinstance(state, Resizing):
            self.state = self._resize(state)

    def _node_drain(self) -> bool:
        """Whether a node of the group is being drained (on Ray; checked at most every
        few seconds by the group); if so, the workers are told."""
        notice = getattr(self._group, "preemption_notice", None)  # optional in a group
        info = notice() if notice is not None else None
        if info is None:
            return False
        if info.deadline_ms is None:
            deadline_s = self._policy.preemption_deadline_s
            info = dataclasses.replace(info, deadline_ms=int((time.time() + deadline_s) * 1000))
        self._tell_workers(info, stops_run=False)
        return True

    def _tell_workers(self, info: PreemptionInfo, *, stops_run: bool) -> Drain:
        assert self._group is not None
        self._drain = Drain(info, stops_run=stops_run, num_steps=self._steps.num_steps)
        self._group.notify(Preempted(info))
        then = "stopping" if stops_run else "restarting without it"
        self._progress.notice(f"preempted ({info.reason}): {then} after the next report")
        return self._drain

    def _poll_draining(self, state: Running) -> State:
        """Running while a preemption drains: the run stops (a stop of the driver) or
        restarts (a drained node) once the workers' next report is recorded, or at the
        deadline; a failure meanwhile ends the drain at once, the same way."""
        drain = self._drain
        if self._notice is not None and (drain is None or not drain.stops_run):
            # a stop of the driver, even while a node drains: the run stops
            info = driver_notice_info(
                self._notice, self._policy.preemption_deadline_s, self._spec.num_workers
            )
            drain = self._tell_workers(info, stops_run=True)
        assert drain is not None
        next_state = self._poll(state)
        if drain.stops_run and isinstance(next_state, Running | Restarting):
            if isinstance(next_state, Restarting) or drain.done(self._steps.num_steps):
                return Stopped(drain.info.reason)
        elif isinstance(next_state, Running) and drain.done(self._steps.num_steps):
            return self._on_failures(state.attempt, drain.failures(self._spec.num_workers))
        return next_state

    def _start(self, state: Starting) -> State:
        if self._elastic is not None and not self._schedule():
            return state  # too few workers fit: wait, and look again
        self._drain = None  # a drained node's: the new group runs elsewhere
        self._settle_uploads()  # into the previous attempt's staging directory
        self._staging_dir = self._run_record.start_attempt(state.attempt, self._spec.num_workers)
        self._steps = StepAggregator(self._spec.num_workers)
        self._failures = {}
        self._return_values = {}  # only the attempt that succeeds returns
        checkpoint = self._run_record.latest_checkpoint or self._resume_from
        spec = dataclasses.replace(
            self._spec,
            checkpoint=checkpoint,
            staging_dir=self._staging_dir,
            reported=self._run_record.reported(),
            datasets=data_positions.shards_for_attempt(self._spec.datasets, checkpoint),
        )
        self._progress.starting(state.attempt)
        self._group = self._make_worker_group()
        try:
            self._backend_hooks("on_start", "on_training_start")
            self._group.start(spec)
        except CapacityChanged:
            self._stop_group()  # a node left while the workers were placed: size again
            return state
        except Exception as exc:
            return self._on_failures(state.attempt, {0: _start_failure(exc)})
        self._started_at = time.monotonic()
        self._progress.workers_started()
        self._hang.reset(self._spec.num_workers)
        return Running(attempt=state.attempt)

    def _schedule(self) -> bool:
        """An elastic run's size for the attempt starting now: the one decided while the
        last attempt ran (a resize), or what fits now. False while too few fit."""
        assert self._elastic is not None
        size, self._next_size = self._next_size, None
        if size is None:
            capacity = self._elastic.capacity
            decision = self._elastic.policy.make_decision_for_non_running_worker_group(
                lambda: capacity(None)
            )
            if isinstance(decision, NoopDecision):
                time.sleep(SCHEDULING_WAIT_S)
                return False
            assert isinstance(decision, ResizeDecision)
            size = decision.num_workers
        if size != self._sized:
            self._spec = self._elastic.resize_spec(self._spec, size)
            self._sized = size
            self._progress.resized(size)
        return True

    def _check_size(self, state: Running) -> State:
        """Whether a healthy elastic run should restart at a new size (checked every
        ``elastic_resize_monitor_interval_s``)."""
        assert self._elastic is not None
        capacity, group = self._elastic.capacity, self._group
        decision = self._elastic.policy.make_decision_for_running_worker_group(
            WorkerGroupState(num_workers=self._spec.num_workers, start_time=self._started_at),
            lambda: capacity(group),
        )
        if isinstance(decision, ResizeDecision):
            return Resizing(attempt=state.attempt, num_workers=decision.num_workers)
        return state

    def _resize(self, state: Resizing) -> State:
        """Stop the workers and start again, from the latest committed checkpoint, at the
        new size. Ray counts no failure for this; neither does lockstep."""
        self._stop_group()
        self._next_size = state.num_workers
        self._progress.resizing(self._spec.num_workers, state.num_workers)
        return Starting(attempt=state.attempt + 1)

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
            except storage.CheckpointWriteError as exc:
                failures.setdefault(0, _storage_failure(exc))
        self._progress.refresh()
        if failures:
            self._await_root_cause(failures)
            return self._on_failures(state.attempt, self._with_waiting(failures))
        if self._steps.all_finished():
            return Finished()
        if self._hang.overdue():
            return self._on_failures(state.attempt, self._hang_failure(state.attempt))
        if self._elastic is not None and not self._return_values:
            return self._check_size(state)  # (never once a rank has returned: it is ending)
        return state

    def _hang_failure(self, attempt: int) -> dict[int, WorkerFailure]:
        """No rank made progress for ``hang_timeout_s``: collect every rank's stack, write
        them to ``errors/attempt_N.txt``, and name the rank that is stuck."""
        assert self._group is not None
        idle = self._hang.idle_s()
        collect = getattr(self._group, "collect_stacks", None)
        stacks = collect() if collect is not None else {}
        counts = self._steps.counts()
        running = [r for r in range(self._spec.num_workers) if r not in self._return_values]
        waiting = set(self._steps.waiting())
        ranks = {
            rank: hang.RankState(
                pid=stacks[rank][0] if rank in stacks else None,
                num_reports=counts.get(rank, 0),
                stacks=stacks[rank][1] if rank in stacks else "",
                in_report=rank in waiting,
            )
            for rank in running
        }
        failure = hang.hang_failure(ranks, idle_s=idle, waiting_step=self._steps.next_step + 1)
        name = f"{storage.ERRORS_DIR}/attempt_{attempt}.txt"
        try:
            self._spec.run_dir.makedirs(storage.ERRORS_DIR)
            self._spec.run_dir.write_atomic(name, hang.stacks_text(failure.summary, ranks).encode())
        except OSError as exc:
            warnings.warn(f"lockstep: could not write the stacks to {name}: {exc}", stacklevel=1)
        return {failure.rank: failure}

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
            for event in self._group.poll(min(left, POLL_TIMEOUT_S)):
                try:
                    self._handle(event, failures)
                except ReportCountMismatch as exc:
                    failures.setdefault(exc.rank, _usage_failure(exc.rank, str(exc)))

    def _handle(self, event: WorkerEvent, failures: dict[int, WorkerFailure]) -> None:
        if isinstance(event, Heartbeat) and event.started:
            self._hang.rank_started(event.rank)
        elif isinstance(event, Heartbeat):
            self._hang.progress()
        elif isinstance(event, Report):
            for step in self._steps.add(event):
                self._record(step)
            self._hang.progress()  # after the driver's own work on it: a commit may be slow
        elif isinstance(event, Returned):
            self._hang.rank_started(event.rank)  # a rank that is done cannot hang
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
        """Record one complete step (its checkpoint committed, or on its way), tell the
        workers, the callbacks and the progress display."""
        assert self._group is not None
        if not step.checkpointed:
            # The row first (durable: in the kernel's hands, which a killed driver cannot
            # lose), then the workers released; the rest is the driver's own bookkeeping.
            self._run_record.record_step(step.metrics, staged=None, timestamp=step.reports[0].time)
            self._group.notify(StepDone(step.index))
            self._last_metrics = step.metrics
            self._announce(step, None)
        elif step.uploads_async:
            self._submit_upload(step)  # logs the row, durable, as above
            self._group.notify(StepDone(step.index))
            self._last_metrics = dict(step.metrics)
        else:
            checkpoint = self._commit(step)
            self._last_metrics = dict(step.metrics)
            self._announce(step, checkpoint)

    def _staged(self, step: Step) -> str:
        """Where the step's checkpoint is staged: as the workers said, or (files handed to
        the driver) where the driver uploads them, in the running attempt's directory."""
        return step.staged or storage.staging_dir_name(step.index, root=self._staging_dir)

    def _commit(
        self, step: Step, pending: tuple[PendingCheckpoint, str] | None = None
    ) -> Checkpoint:
        """Commit the step's checkpoint (logging the step, unless it was logged when its
        upload started) and tell every worker."""
        persisted = next((r.persisted for r in step.reports if r.persisted is not None), None)
        self._keep_data_positions(step)
        if pending is None:
            self._stage_handoffs(step)
            checkpoint = self._run_record.record_step(
                step.metrics,
                staged=self._staged(step),
                timestamp=step.reports[0].time,
                persisted=persisted,
                dir_name=step.dir_name,
            )
            assert checkpoint is not None
        else:
            logged, staged = pending
            checkpoint = self._run_record.commit_pending(logged, staged=staged, persisted=persisted)
        if self._group is not None:
            reported = self._run_record.reported()
            self._group.notify(CheckpointCommitted(step.index, checkpoint, reported))
        return checkpoint

    def _keep_data_positions(self, step: Step) -> None:
        """The step's data positions go into its checkpoint's metadata: a restart from it
        continues every dataset shard after the rows this step covered."""
        positions = data_positions.of_step(step.reports)
        if positions is not None:
            self._run_record.add_checkpoint_metadata({DATA_POSITIONS_KEY: positions}, own=True)

    def _stage_handoffs(self, step: Step) -> None:
        """Ranks that reported ASYNC in a step another rank reported SYNC: their files
        are staged now, so the step commits whole."""
        for report in step.reports:
            if report.handoff is not None and os.path.isdir(report.handoff):
                staged = storage.staging_dir_name(step.index, report.rank, root=self._staging_dir)
                self._spec.run_dir.upload_dir(report.handoff, staged)
                discard([report.handoff])

    def _logged_row(self) -> dict[str, Any]:
        row = self._run_record.last_row
        assert row is not None
        return dict(row)

    def _announce(
        self, step: Step, checkpoint: Checkpoint | None, row: dict[str, Any] | None = None
    ) -> None:
        """Tell the callbacks and the progress display about a step logged as ``row`` (by
        default the last row logged). Only what someone listens to is built: this runs
        once per report."""
        if row is None:
            row = self._run_record.last_row  # not copied: the hooks copy what they keep
            assert row is not None
        state = self._run_record.state
        iteration = int(row["training_iteration"])
        if self._callbacks or self._hooks.active:
            all_metrics = [dict(r.metrics) for r in step.reports]
            for callback in self._callbacks:
                callback.after_report(self._run_context(), all_metrics, checkpoint)
            self._hooks.result(row, all_metrics, checkpoint)
        self._progress.step(iteration, step.metrics, state.latest if checkpoint else None)

    def _submit_upload(self, step: Step) -> None:
        """Log the step and hand its files to the upload thread, which copies them into
        this attempt's staging directory; committed by :meth:`_commit_uploaded`."""
        handoffs = {r.rank: r.handoff for r in step.reports if r.handoff is not None}
        logged = self._run_record.record_pending_step(
            step.metrics, timestamp=step.reports[0].time, dir_name=step.dir_name
        )
        staged = self._staged(step)
        job = UploadJob(
            (step, logged, staged, self._logged_row()), step.index, handoffs, root=self._staging_dir
        )
        self._uploads.submit(job)

    def _commit_uploaded(self, failures: dict[int, WorkerFailure], *, wait: bool = False) -> None:
        """Commit the ASYNC checkpoints whose files are uploaded, in report order."""
        for done in self._uploads.finished(wait=wait):
            step, logged, staged, row = done.job.step
            if done.error is not None:
                failures[0] = _upload_failure(done.error)
                continue
            try:
                checkpoint = self._commit(step, (logged, staged))
            except storage.CheckpointWriteError as exc:
                failures[0] = _storage_failure(exc)
                continue
            self._announce(step, checkpoint, row)
            self._hang.progress()

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
        # While a node drains, what fails (the node going away with its workers) is the
        # preemption: a restart counted against max_preemption_failures.
        preempted = self._drain is not None and not self._drain.stops_run
        cause = root_cause(self._failures).summary
        count = self._run_record.record_failure(preempted=preempted, cause=cause)
        for callback in self._callbacks:
            callback.after_exception(self._run_context(attempt), dict(self._failures))
        if preempted:
            decision = self._policy.decide_preemption(num_restarts=count - 1)
        else:
            decision = self._policy.decide(self._failures, num_restarts=count - 1)
        if decision is FailureDecision.RESTART:
            return Restarting(attempt=attempt, failures=dict(self._failures))
        return Errored(
            TrainingFailedError.from_failures(
                self._failures,
                attempts=attempt + 1,
                error_file=self._spec.run_dir.join(storage.ERROR_FILE),
            )
        )

    def _close(self, outcome: str) -> None:
        try:
            self._stop_group()
        except KeyboardInterrupt:
            # a second Ctrl-C while the workers were given their grace: they were killed
            # at once; the records are still written, and the run said where it stopped
            self.state, outcome = Stopped(interrupts.CTRL_C), "stopped"
            self._write_records(outcome)
            raise
        self._write_records(outcome)

    def _write_records(self, outcome: str) -> None:
        self._settle_uploads()
        self._uploads.close()
        error = self.state.error if isinstance(self.state, Errored) else None
        try:
            self._run_record.close(
                error,
                finished=isinstance(self.state, Finished),
                stopped=isinstance(self.state, Stopped),
            )
        except Exception as exc:
            # the storage that failed a checkpoint may fail this too: the run's own error
            # (raised next) matters more, and the record on storage is whole as it is
            warnings.warn(f"lockstep: could not write the run's final record: {exc}", stacklevel=1)
        state = self._run_record.state
        best = state.checkpoints[-1] if state.checkpoints else None
        self._progress.stop(
            RunSummary(
                outcome=outcome,
                best_checkpoint=best.dir_name if best else None,
                best_metrics=best.metrics if best else None,
                stopped=str(self._interrupted(self.state))
                if isinstance(self.state, Stopped)
                else None,
            )
        )

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

    def _interrupted(self, stopped: Stopped) -> TrainingInterrupted:
        state = self._run_record.state
        return TrainingInterrupted(
            reason=stopped.reason,
            path=self._spec.run_dir.uri,
            training_iteration=state.training_iteration,
            latest_checkpoint=state.latest,
        )

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
            num_to_keep=self._run_record.num_to_keep,
        )

    def latest_checkpoint(self) -> Checkpoint | None:
        """The run's latest committed checkpoint, or None."""
        return self._run_record.latest_checkpoint

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


_OUTCOMES = {Finished: "finished", Errored: "failed", Stopped: "stopped"}


def _start_failure(exc: Exception) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="start",
        summary=f"the workers could not be started: {type(exc).__name__}: {exc}",
    )


def _upload_failure(exc: BaseException) -> WorkerFailure:
    return WorkerFailure(
        rank=0,
        pid=None,
        kind="upload",
        summary=f"an ASYNC checkpoint upload failed after retries: {type(exc).__name__}: {exc}",
        retryable=False,
    )


def _storage_failure(exc: storage.CheckpointWriteError) -> WorkerFailure:
    """A checkpoint the driver could not commit: storage was retried already, and the run
    record in this driver would not survive a restart's redo of the step. Raised."""
    return WorkerFailure(rank=0, pid=None, kind="storage", summary=str(exc), retryable=False)


def _usage_failure(rank: int, message: str) -> WorkerFailure:
    return WorkerFailure(rank=rank, pid=None, kind="usage", summary=message, retryable=False)
