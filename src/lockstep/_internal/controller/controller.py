"""TrainController: the control loop in the driver, a state machine stepped one transition
at a time (the states are in ``states.py``).

Each step looks at the state and the requests (a stop, a preemption), asks the policies
(failure, hang, preemption, scaling) for decisions, and carries them out. The workers'
reports go to the report handler (``reports.py``), which records steps and commits
checkpoints through the run record; what happens is told to the run's listeners as
events (``lockstep._core.run_events``): the progress display, the users' callbacks, a
Tuner's link to its trial. A listener's directive (a Tune scheduler's stop or pause) is a
transition like any other. The worker group is reached only through its interface, so
tests drive the controller with a fake group and queued events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from lockstep._core import flags, storage
from lockstep._core import run_events as ev
from lockstep._core.callback import Callback, RunContext, UserCallback, listeners_for
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.errors import (
    TrainingFailedError,
    TrainingInterrupted,
    WorkerFailure,
    awaiting_root_cause,
    root_cause,
)
from lockstep._core.result import Result
from lockstep._internal.controller import data_positions, interrupts
from lockstep._internal.controller.display import ProgressListener
from lockstep._internal.controller.failure_policy import FailureDecision, FailurePolicy
from lockstep._internal.controller.failures import (
    start_failure,
    storage_failure,
    usage_failure,
    with_waiting,
)
from lockstep._internal.controller.hang import Hang, HangPolicy, describe_hang
from lockstep._internal.controller.ledger import (
    DRAINING,
    RECOVERING,
    RUNNING,
    SHUTDOWN,
    STARTING,
    Ledger,
)
from lockstep._internal.controller.preemption import Drain, PreemptionPolicy
from lockstep._internal.controller.progress import Progress
from lockstep._internal.controller.reports import ReportHandler
from lockstep._internal.controller.run_record import RunRecord
from lockstep._internal.controller.scaling_policy import ElasticRun
from lockstep._internal.controller.states import (
    Attempt,
    Draining,
    Ended,
    Errored,
    Finished,
    Resizing,
    Restarting,
    Running,
    Scheduling,
    Starting,
    State,
    Stopped,
    WithWorkers,
)
from lockstep._internal.controller.status import (
    RankRow,
    StatusServer,
    attempt_rows,
    driver_note,
    summary,
)
from lockstep._internal.controller.steps import ReportCountMismatch
from lockstep._internal.execution.capacity import CapacityChanged
from lockstep._internal.execution.messages import (
    Failed,
    Heartbeat,
    Preempted,
    Report,
    Returned,
    WorkerEvent,
)
from lockstep._internal.execution.worker_group.base import WorkerGroup, WorkerGroupSpec

POLL_TIMEOUT_S = 0.25
# How long an elastic run waits between looks at the capacity while too few workers fit.
SCHEDULING_WAIT_S = 1.0
PAUSED = "a Tune scheduler (pause)"


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
        listeners: Sequence[ev.RunListener] = (),
        resume_from_checkpoint: Checkpoint | None = None,
        config: dict[str, Any] | None = None,
        elastic: ElasticRun | None = None,
        started_at: float | None = None,
        answer_status: bool = True,
    ) -> None:
        self._make_worker_group = make_worker_group
        self._spec = spec
        self._run_record = record
        self._failure_policy = failure_policy
        self._elastic = elastic
        self._resume_from = resume_from_checkpoint
        self._listeners = ev.Listeners(
            [
                ProgressListener(progress),
                *listeners_for(callbacks, spec.experiment_name, spec.run_dir.uri, config),
                *listeners,
            ]
        )
        self._ledger = Ledger(
            record.previous_ledger(),
            assumed_mtbf_s=failure_policy.assumed_mtbf_s,
            started_at=started_at,
        )
        if record.continues_resize:
            # a launcher started the run again at another size: it recovers, as from a
            # resize by this driver
            self._ledger.enter(RECOVERING, since=started_at)
        self._reports = ReportHandler(record, spec.run_dir, self._listeners, self._ledger)
        # asked once: every poll would (the listeners stay those of the run)
        self._step_events = (self._listeners.wants(ev.StepBegin), self._listeners.wants(ev.StepEnd))
        progress.goodput = self._ledger.goodput
        self._hang = HangPolicy(failure_policy.hang_timeout_s)
        self._preemption = PreemptionPolicy(failure_policy.preemption_deadline_s)
        self._stop_reason: str | None = None
        self.state: State = Starting(attempt=0)
        self._last_step_at = time.monotonic()  # for `lockstep status`: is the loop stuck?
        self._contexts: dict[int, RunContext] = {}
        self._answer_status = answer_status  # a Tuner's function trials do not
        self._failed_at: float | None = None  # the failure being handled, for the ledger
        self._main_thread: int | None = None

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
        self._preemption.request(reason)

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
        state = self._run_record.state
        self._emit(ev.RunStarted(self._context(0), state.latest, state.training_iteration))
        error: BaseException | None = None
        self._main_thread = threading.get_ident()
        with (
            interrupts.stop_on_sigint(self.request_preemption),
            interrupts.stop_on_sigterm(self.request_preemption),
        ):
            try:
                # No socket once the run ended: the listeners told of its end may copy
                # the run directory (MLflow's artifacts), and a socket cannot be copied.
                with self._answering_status():
                    yield from self._run_to_the_end()
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: the state says Stopped, raised below
            except BaseException as exc:
                error = exc
                raise
            finally:
                result = self._announce_end(error)
        if isinstance(self.state, Errored):
            raise self.state.error
        if isinstance(self.state, Stopped):
            raise self._interrupted(self.state)
        assert result is not None
        return result

    def _run_to_the_end(self) -> Generator[None, None, None]:
        try:
            while not isinstance(self.state, Ended):
                if isinstance(self.state, Scheduling):
                    # waiting for room: the wait is the loop's, a step never sleeps
                    time.sleep(max(0.0, self.state.retry_at - time.monotonic()))
                self.step()
                yield
            self._close()
        except KeyboardInterrupt:
            # the second Ctrl-C: still say where the run is and how to continue it
            self._close(interrupted=True)
            raise
        except BaseException:
            self._close()
            raise

    @contextlib.contextmanager
    def _answering_status(self) -> Iterator[None]:
        """Answer ``lockstep status`` while the run goes on (on a socket in its directory)."""
        if not self._answer_status:
            yield
            return
        server = StatusServer(self._spec.run_dir, self.status)
        try:
            yield
        finally:
            server.close()

    def status(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """What ``lockstep status`` shows of this run now: a sentence naming what holds it
        up, a row per rank, the time ledger so far. Called from the status thread: it
        only reads; ``{"stacks": true}`` adds every rank's Python stack."""
        stacks = bool(request.get("stacks"))
        state, now = self.state, time.monotonic()
        rows = self._status_rows(state, stacks=stacks, now=now)
        name = _status_state(state)
        note = driver_note(os.getpid(), now - self._last_step_at, self._main_thread)
        if note is None and isinstance(state, Restarting | Resizing):
            note = (
                f"restarting after: {root_cause(state.failures).summary}"
                if isinstance(state, Restarting)
                else f"resizing to {state.num_workers} workers"
            )
        return {
            "run": self._spec.experiment_name,
            "path": self._spec.run_dir.uri,
            "state": name,
            "summary": summary(rows, state=name, note=note),
            "attempt": getattr(state, "attempt", 0) + 1,
            "iteration": self._run_record.state.training_iteration,
            "driver": {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "seconds_since_update": round(max(0.0, now - self._last_step_at), 3),
            },
            "ranks": [row.as_dict(stacks=stacks) for row in rows],
            "time": self._ledger.view().as_dict(),
        }

    def _status_rows(self, state: State, *, stacks: bool, now: float) -> list[RankRow]:
        if isinstance(state, WithWorkers):
            recovering = self._ledger.phase == RECOVERING
            return attempt_rows(
                state.run,
                self._reports.steps,
                self._ledger,
                self._spec.run_dir,
                stacks=stacks,
                now=now,
                recovering=recovering,
            )
        if isinstance(state, Ended):
            return []
        phase = "restarting" if getattr(state, "attempt", 0) else "starting"
        return [
            RankRow(rank, None, "", phase, None, 0, None) for rank in range(self._spec.num_workers)
        ]

    def step(self) -> None:
        """Carry out one transition."""
        self._last_step_at = time.monotonic()
        state = self.state
        if self._step_events[0]:
            self._emit(ev.StepBegin(self._context()))
        notice = self._preemption.notice
        if self._stop_reason is not None and not isinstance(state, Ended):
            next_state: State = Stopped(self._stop_reason)
        elif notice is not None and not isinstance(state, WithWorkers | Ended):
            next_state = Stopped(notice.reason)  # no workers to tell: stop at once
        elif isinstance(state, WithWorkers):
            next_state = self._run_step(state)
        elif isinstance(state, Starting | Scheduling):
            next_state = self._start(state.attempt)
        elif isinstance(state, Restarting):
            next_state = Starting(attempt=state.attempt + 1)
        elif isinstance(state, Resizing):
            self._emit(ev.Resizing(self._context(), self._spec.num_workers, state.num_workers))
            next_state = Starting(attempt=state.attempt + 1)
        else:
            return
        if next_state is not state:
            self._transition(state, next_state)
        if self._step_events[1]:
            self._emit(ev.StepEnd(self._context()))

    def _transition(self, state: State, next_state: State) -> None:
        # after a failure, the time ledger counts from when it happened, not when heard of
        failed, self._failed_at = self._failed_at, None
        if isinstance(state, WithWorkers) and not isinstance(next_state, WithWorkers):
            self._ranks_at_end(state.run, until=failed)
            self._stop_workers(state.run)
        phase = _PHASES.get(type(next_state))
        if phase is not None and phase != self._ledger.phase:
            self._ledger.enter(phase, since=failed)
            if not isinstance(next_state, Finished):  # its end writes the ledger, once
                self._run_record.write_ledger(self._ledger.to_json())
        self.state = next_state

    def _start(self, attempt: int) -> State:
        if self._elastic is not None:
            size = self._elastic.size_to_start()
            if size is None:  # too few workers fit: wait, and look again
                return Scheduling(attempt, time.monotonic() + SCHEDULING_WAIT_S)
            self._spec = self._elastic.spec_for(self._spec, size) or self._spec
        failures = self._reports.settle()  # into the previous attempt's staging directory
        del failures  # that attempt is over: its late upload failures change nothing now
        staging_dir = self._run_record.start_attempt(attempt, self._spec.num_workers)
        checkpoint = self._run_record.latest_checkpoint or self._resume_from
        spec = dataclasses.replace(
            self._spec,
            checkpoint=checkpoint,
            staging_dir=staging_dir,
            reported=self._run_record.reported(),
            datasets=data_positions.shards_for_attempt(self._spec.datasets, checkpoint),
        )
        self._emit(ev.AttemptStarting(self._context(attempt), spec.num_workers))
        self._ledger.attempt_starting(spec.num_workers, from_checkpoint=checkpoint is not None)
        run = Attempt(attempt, self._make_worker_group(), spec.num_workers)
        try:
            run.group.start(spec)
        except CapacityChanged:
            self._stop_workers(run)  # a node left while the workers were placed: size again
            return Starting(attempt)
        except Exception as exc:
            self._stop_workers(run)
            return self._on_failures(run, {0: start_failure(exc)})
        run.started_at = time.monotonic()
        self._reports.start_attempt(self._context(attempt), run.group, run.num_workers, staging_dir)
        self._hang.reset(run.num_workers)
        self._emit(ev.WorkersStarted(self._context(attempt)))
        return Running(run)

    def _run_step(self, state: Running | Draining) -> State:
        """Poll the workers once; a preemption under way (or beginning now) drains the
        attempt: the run stops (a stop of the driver) or restarts (a drained node) once
        the workers' next report is recorded, or at the deadline."""
        run = state.run
        current = state.drain if isinstance(state, Draining) else None
        num_steps = self._reports.steps.num_steps
        drain = self._preemption.decide(
            current, run.group, num_steps=num_steps, num_workers=run.num_workers
        )
        if drain is not None and drain is not current:
            self._tell_workers(run, drain)
        next_state = self._poll(state, drain)
        if drain is None or not isinstance(next_state, Running | Restarting):
            return next_state
        done = drain.done(self._reports.steps.num_steps)
        if drain.stops_run:
            if isinstance(next_state, Restarting) or done:
                return Stopped(drain.info.reason)
        elif isinstance(next_state, Running) and done:
            return self._on_failures(run, drain.failures(run.num_workers), drain=drain)
        return Draining(run, drain) if isinstance(next_state, Running) else next_state

    def _tell_workers(self, run: Attempt, drain: Drain) -> None:
        self._ranks_at_end(run)  # what they wait for from now on is the drain's
        self._ledger.enter(DRAINING)
        drain.told_at(self._reports.hold_steps())  # the steps from then on end here
        run.group.notify(Preempted(drain.info, drain.first_step))
        then = "stopping" if drain.stops_run else "restarting without it"
        text = f"preempted ({drain.info.reason}): {then} after the next report"
        self._emit(ev.Notice(self._context(), text))

    def _poll(self, state: Running | Draining, drain: Drain | None) -> State:
        """Take what the workers sent; ``state`` itself while the attempt just runs on."""
        run = state.run
        events = run.group.poll(self._reports.poll_timeout(POLL_TIMEOUT_S))
        failures: dict[int, WorkerFailure] = {}
        if self._reports.collect_uploads(failures):
            self._hang.progress()
        directive = self._take(run, events, failures)
        self._reports.catch_up(idle=not events)
        if failures:
            self._await_root_cause(run, failures)
            return self._on_failures(run, with_waiting(failures, self._reports.steps), drain=drain)
        if directive is ev.Directive.STOP:
            return Finished(dict(run.return_values), stopped_early=True)
        if directive is ev.Directive.PAUSE:
            return Stopped(PAUSED)
        if self._reports.steps.all_finished():
            return Finished(dict(run.return_values))
        if (hang := self._hang.decide()) is not None:
            return self._on_failures(run, self._hang_failure(run, hang), drain=drain)
        if self._elastic is not None and not run.return_values:
            # (never once a rank has returned: it is ending)
            size = self._elastic.size_while_running(run.group, run.num_workers, run.started_at)
            if size is not None:
                return Resizing(attempt=run.number, num_workers=size)
        return state if isinstance(state, Running) else Running(run)

    def _take(
        self, run: Attempt, events: list[WorkerEvent], failures: dict[int, WorkerFailure]
    ) -> ev.Directive:
        """Handle a poll's events; the strongest directive the steps they completed got."""
        directive = ev.Directive.CONTINUE
        for event in events:
            try:
                answer = self._handle(run, event, failures)
            except ReportCountMismatch as exc:
                failures.setdefault(exc.rank, usage_failure(exc.rank, str(exc)))
            except storage.CheckpointWriteError as exc:
                failures.setdefault(0, storage_failure(exc))
            else:
                if answer is not ev.Directive.CONTINUE and directive is not ev.Directive.STOP:
                    directive = answer
        return directive

    def _handle(
        self, run: Attempt, event: WorkerEvent, failures: dict[int, WorkerFailure]
    ) -> ev.Directive:
        if isinstance(event, Report):
            directive = self._reports.on_report(event)
            self._hang.progress()  # after the driver's own work on it: a commit may be slow
            return directive
        if isinstance(event, Heartbeat):
            if event.started:
                self._hang.rank_started(event.rank)
                self._rank_running(run, event.rank)
            else:
                self._hang.progress()
        elif isinstance(event, Returned):
            self._hang.rank_started(event.rank)  # a rank that is done cannot hang
            self._ledger.rank_returned(event.rank)
            self._emit(ev.WorkerEnded(self._context(), event.rank))
            run.return_values[event.rank] = event.return_value
            if event.dropped is not None:
                warnings.warn(event.dropped, stacklevel=1)
            self._reports.steps.finish(event.rank, event.num_reports)
        else:
            assert isinstance(event, Failed)
            self._emit(ev.WorkerEnded(self._context(), event.failure.rank))
            failures[event.failure.rank] = event.failure
        return ev.Directive.CONTINUE

    def _ranks_at_end(self, run: Attempt, until: float | None = None) -> None:
        """The attempt ends (at ``until``, by default now): what its ranks were waiting for
        since their last report counts in the time ledger (read from their phase pages
        before they are stopped)."""
        if self._ledger.phase == RUNNING:
            places = run.group.worker_places()
            phases = {rank: place.phase for rank, place in places.items()}
            self._ledger.ranks_at_end(phases, now=until)

    def _rank_running(self, run: Attempt, rank: int) -> None:
        """Rank ``rank`` runs its function; once every rank does, the run is running (its
        starting, or its recovering from a failure, is over)."""
        run.running.add(rank)
        if len(run.running) == run.num_workers and self._ledger.phase in (STARTING, RECOVERING):
            self._ledger.enter(RUNNING)

    def _hang_failure(self, run: Attempt, hang: Hang) -> dict[int, WorkerFailure]:
        """No rank made progress for ``hang_timeout_s``: collect every rank's stack, keep
        them in ``errors/attempt_N.txt``, and name the rank that is stuck."""
        running = [r for r in range(run.num_workers) if r not in run.return_values]
        stacks = run.group.collect_stacks()
        failure, text = describe_hang(hang, stacks, self._reports.steps, running)
        self._run_record.write_stacks(run.number, text)
        return {failure.rank: failure}

    def _await_root_cause(self, run: Attempt, failures: dict[int, WorkerFailure]) -> None:
        """A closed connection or a timed-out collective is caused by a failure elsewhere
        that may reach the driver a moment later (the process watcher sees a death after
        the peer raised): wait for it, briefly, so the error names the cause."""
        deadline = time.monotonic() + flags.ROOT_CAUSE_WAIT_S.get()
        while awaiting_root_cause(failures, run.num_workers - len(run.return_values)):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._take(run, run.group.poll(min(left, POLL_TIMEOUT_S)), failures)

    def _on_failures(
        self, run: Attempt, failures: dict[int, WorkerFailure], *, drain: Drain | None = None
    ) -> State:
        """Restart or raise, as the failure policy decides. While a node drains, what
        fails (the node going away with its workers) is the preemption: a restart counted
        against ``max_preemption_failures``."""
        if self._stop_reason is not None:
            # a stop was asked for as they failed (their launched process was lost with
            # its node): the failures are the stop's doing, and count as none
            return Stopped(self._stop_reason)
        run.failures.update(failures)
        preempted = drain is not None and not drain.stops_run
        summary = root_cause(run.failures).summary
        count = self._run_record.record_failure(preempted=preempted, cause=summary)
        self._ledger.failed()
        # when the first failure happened (a worker's own clock: the same machine's, or
        # near it), on this driver's monotonic clock
        first = min(f.time for f in run.failures.values())
        self._failed_at = time.monotonic() - max(0.0, time.time() - first)
        if preempted:
            decision = self._failure_policy.decide_preemption(num_restarts=count - 1)
        else:
            decision = self._failure_policy.decide(run.failures, num_restarts=count - 1)
        restarting = decision is FailureDecision.RESTART
        self._emit(ev.AttemptFailed(self._context(), dict(run.failures), restarting, summary))
        if restarting:
            return Restarting(attempt=run.number, failures=dict(run.failures))
        return Errored(
            TrainingFailedError.from_failures(
                run.failures,
                attempts=run.number + 1,
                error_file=self._spec.run_dir.join(storage.ERROR_FILE),
            )
        )

    def _stop_workers(self, run: Attempt) -> None:
        if not run.stopped:
            run.group.shutdown()
            run.stopped = True  # not before: a shutdown cut short is done again at close

    def _close(self, *, interrupted: bool = False) -> None:
        """Stop what runs and write the run's final record. A second Ctrl-C while the
        workers are given their grace kills them at once; the record is still written."""
        state = self.state
        if interrupted:
            self.state = Stopped(interrupts.CTRL_C)
        if isinstance(state, WithWorkers):
            self._stop_workers(state.run)
        self._reports.settle()
        self._reports.close()
        state = self.state
        try:
            self._run_record.close(
                state.error if isinstance(state, Errored) else None,
                finished=isinstance(state, Finished),
                stopped=isinstance(state, Stopped),
            )
        except Exception as exc:
            # the storage that failed a checkpoint may fail this too: the run's own error
            # (raised next) matters more, and the record on storage is whole as it is
            warnings.warn(f"lockstep: could not write the run's final record: {exc}", stacklevel=1)

    def _announce_end(self, error: BaseException | None) -> Result | None:
        """Tell the listeners how the run ended; the run's Result (None when the driver
        itself failed)."""
        state = self.state
        if self._ledger.phase != SHUTDOWN:
            self._ledger.enter(SHUTDOWN)  # (an exception in the driver)
        self._ledger.freeze()
        self._run_record.write_ledger(self._ledger.to_json())
        result = None if error is not None and not isinstance(state, Ended) else self._result()
        if isinstance(state, Errored):
            error = state.error
        stopped = str(self._interrupted(state)) if isinstance(state, Stopped) else None
        outcome = _OUTCOMES.get(type(state), "interrupted")
        self._emit(ev.RunEnded(self._context(), outcome, result, error, stopped))
        return result

    def _interrupted(self, stopped: Stopped) -> TrainingInterrupted:
        return self._run_record.interruption(stopped.reason)

    def _result(self) -> Result:
        values = self.return_values()
        return self._run_record.result(
            self._reports.last_metrics,
            return_value=values[0] if values else None,
            time=self._ledger.snapshot(),
        )

    def latest_checkpoint(self) -> Checkpoint | None:
        """The run's latest committed checkpoint, or None."""
        return self._run_record.latest_checkpoint

    def return_values(self) -> list[Any]:
        """What every worker's function returned, in rank order (after a successful run)."""
        import cloudpickle

        state = self.state
        if not isinstance(state, Finished):
            return []
        values = state.return_values
        return [cloudpickle.loads(values[r]) for r in sorted(values)]

    @property
    def paused(self) -> bool:
        """Whether a listener's directive (a Tune scheduler's pause) stopped the run."""
        return isinstance(self.state, Stopped) and self.state.reason == PAUSED

    @property
    def stopped_early(self) -> bool:
        """Whether a listener's directive (a Tune scheduler's stop) ended the run."""
        return isinstance(self.state, Finished) and self.state.stopped_early

    def _emit(self, event: ev.RunEvent) -> ev.Directive:
        return self._listeners.emit(event)

    def _context(self, attempt: int | None = None) -> RunContext:
        if attempt is None:
            state = self.state
            attempt = getattr(state, "attempt", 0)
        context = self._contexts.get(attempt)  # one per attempt: events come per poll
        if context is None:
            context = RunContext(
                name=self._spec.experiment_name, path=self._spec.run_dir.uri, attempt=attempt
            )
            self._contexts[attempt] = context
        return context


_OUTCOMES: dict[type, str] = {Finished: "finished", Errored: "failed", Stopped: "stopped"}


def _status_state(state: State) -> str:
    """The run's state as ``lockstep status`` names it."""
    if isinstance(state, Ended):
        return _OUTCOMES[type(state)]
    if isinstance(state, Restarting | Resizing) or getattr(state, "attempt", 0) > 0:
        return "restarting" if not isinstance(state, WithWorkers) else "running"
    return "running"


# The time ledger's phase each state puts the run in (Running: once every rank runs).
_PHASES: dict[type, str] = {
    Restarting: RECOVERING,
    Resizing: RECOVERING,
    Draining: DRAINING,
    Finished: SHUTDOWN,
    Stopped: SHUTDOWN,
    Errored: SHUTDOWN,
}
