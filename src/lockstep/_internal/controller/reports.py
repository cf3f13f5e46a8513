"""The report handler: the workers' reports become recorded steps.

Reports are grouped into steps (``steps.StepAggregator``); a complete step's row is logged
and its checkpoint, if any, committed through the run record, then every worker is
released from ``report()`` and the run's listeners hear of it (:class:`StepRecorded`).
What the record derives from the rows (progress.csv's lines, the time ledger's figures in
time.bin) waits for :meth:`ReportHandler.catch_up`: one write a batch, off the workers' way.
Checkpoints come three ways: staged by the workers (SYNC), handed off for the driver's
upload thread (ASYNC, committed later, in report order), or put in storage by the workers
(NO_UPLOAD, ``checkpoint_upload_fn``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from lockstep._core import storage
from lockstep._core.callback import RunContext
from lockstep._core.checkpoint import DATA_POSITIONS_KEY, Checkpoint
from lockstep._core.errors import WorkerFailure
from lockstep._core.run_events import Directive, Listeners, ResultClock, StepRecorded
from lockstep._internal.controller import data_positions
from lockstep._internal.controller.failures import storage_failure, upload_failure
from lockstep._internal.controller.ledger import Ledger
from lockstep._internal.controller.run_record import PendingCheckpoint, RunRecord
from lockstep._internal.controller.steps import Step, StepAggregator
from lockstep._internal.controller.uploads import UploadJob, Uploads, discard
from lockstep._internal.execution.messages import CheckpointCommitted, Report, StepDone
from lockstep._internal.execution.step_page import StepPage
from lockstep._internal.execution.worker_group.base import WorkerGroup

# How long progress.csv's lines and time.bin's figures may wait after a step (a driver
# with nothing to do writes them at once): while steps keep coming, a batch costs a write.
CATCH_UP_S = 0.1


class ReportHandler:
    """Records the steps of one run, attempt after attempt.

    Args:
        record: The run record: rows, commits, the run state.
        run_dir: The run directory (ASYNC uploads and hand-offs go there).
        listeners: Told of every recorded step; their directive is handed back.
        ledger: The run's time ledger: told of every report and step.
    """

    def __init__(
        self,
        record: RunRecord,
        run_dir: storage.StorageDir,
        listeners: Listeners,
        ledger: Ledger | None = None,
    ) -> None:
        self._record = record
        self._ledger = ledger or Ledger()
        self._run_dir = run_dir
        self._listeners = listeners
        self._uploads = Uploads(run_dir.upload_dir)
        self._steps = StepAggregator(0)
        self._group: WorkerGroup | None = None
        self._run = RunContext(name="", path=run_dir.uri, attempt=0)
        self._staging_dir = storage.STAGING_DIR
        self.last_metrics: dict[str, Any] | None = None
        last = record.last_row
        time_total = float(last["time_total_s"]) if last else 0.0
        self._clock = ResultClock(
            previous_time_total_s=time_total,
            restored_iteration=record.state.training_iteration,
            restored_time_total_s=time_total,
        )
        self._previous_total_s = time_total  # the last step's, for the next one's clock
        self._announcing = listeners.wants(StepRecorded)  # the listeners are the run's
        # A listener that may stop the run at a step must hear of it before the workers
        # go on: then the driver ends every step (see execution.step_page).
        self._driver_ends_steps = listeners.decide_on(StepRecorded)
        self._page: StepPage | None = None  # the running attempt's, if its workers share one
        self._rows_shared = False
        self._behind_since: float | None = None  # the first step not caught up, if any

    @property
    def steps(self) -> StepAggregator:
        """The running attempt's steps: counts per rank, who waits in ``report()``."""
        return self._steps

    def start_attempt(
        self, run: RunContext, group: WorkerGroup, num_workers: int, staging_dir: str
    ) -> None:
        r"""A new attempt's workers report into a fresh aggregator (what the previous
        attempt uploaded is :meth:`settle`\ d before its staging directory is cleared)."""
        self._run, self._group = run, group
        self._steps = StepAggregator(num_workers)
        self._staging_dir = staging_dir
        self._page, self._rows_shared = group.step_page, False
        if self._page is not None and self._driver_ends_steps:
            self._page.hold()
        self._share_rows(next_step=0)

    def hold_steps(self) -> int:
        """End every step of the attempt from now on here (the workers are to be told
        something at a step, and see it as that step ends); returns the first such step."""
        if self._page is None:
            return self._steps.num_steps
        return max(self._page.hold(), self._steps.num_steps)

    def _share_rows(self, next_step: int) -> None:
        """Let the workers end the steps without a checkpoint themselves, appending their
        rows to result.json, from step ``next_step`` on (result.json must be open here:
        a new run's first row is the driver's)."""
        page = self._page
        if page is None or self._rows_shared or page.held:
            return
        shared = self._record.rows_for_workers()
        if shared is None:
            return
        path, time_base = shared
        page.share_rows(path, self._record.state.training_iteration - next_step, time_base)
        self._rows_shared = True

    def on_report(self, report: Report) -> Directive:
        """Take one report; record the steps it completes. Raises ``ReportCountMismatch``
        for a rank that reported more often than another finished with, and
        ``CheckpointWriteError`` for a checkpoint storage would not take."""
        now = time.monotonic()
        if self._page is not None:
            # A local group's ranks stamp their reports with this machine's clock: when
            # the rank reached the barrier, which the driver may hear of a batch later.
            now = min(now, now - time.time() + report.time)
        steps = self._steps.add(report)
        if not steps:
            self._ledger.on_report(report, now)
            return Directive.CONTINUE
        decided = Directive.CONTINUE
        for step in steps:
            directive = self._record_step(step, now, report)
            if directive is not Directive.CONTINUE:
                decided = directive
            report = None  # type: ignore[assignment]  # counted with the first step
        return decided

    def poll_timeout(self, longest: float) -> float:
        """How long the next poll may wait for the workers: at most ``longest``, and no
        later than when what waits for :meth:`catch_up` is due."""
        since = self._behind_since
        if since is None:
            return longest
        return max(0.0, min(longest, since + CATCH_UP_S - time.monotonic()))

    def catch_up(self, *, idle: bool = False) -> None:
        """Write what the steps left for later (progress.csv's lines, time.bin's figures)
        when the driver is ``idle`` or once the oldest has waited :data:`CATCH_UP_S`."""
        since = self._behind_since
        if since is None or not (idle or time.monotonic() - since >= CATCH_UP_S):
            return
        self._behind_since = None
        self._record.catch_up()
        self._record.write_ledger_figures(self._ledger.current())

    def collect_uploads(self, failures: dict[int, WorkerFailure], *, wait: bool = False) -> int:
        """Commit the ASYNC checkpoints whose files are uploaded, in report order; a failed
        upload or commit becomes a failure of the run (not retryable). Returns how many
        were committed."""
        committed = 0
        for done in self._uploads.finished(wait=wait):
            step, logged, staged, row = done.job.step
            if done.error is not None:
                failures[0] = upload_failure(done.error)
                continue
            try:
                checkpoint = self._commit(step, (logged, staged))
            except storage.CheckpointWriteError as exc:
                failures[0] = storage_failure(exc)
                continue
            committed += 1
            self._ledger.checkpoint_committed(step.index)
            self._record.write_ledger(self._ledger.to_json())
            self._announce(step, checkpoint, row)
        return committed

    def settle(self) -> dict[int, WorkerFailure]:
        """Before a restart or the end: commit every upload of a complete step and drop
        the hand-off files of steps not every rank reached; the failures that left."""
        failures: dict[int, WorkerFailure] = {}
        if self._rows_shared:
            # a worker killed between ending a step and sending its report leaves a row
            # this driver has not taken (its step stays incomplete here)
            while self._record.take_worker_row() is not None:
                pass
        self.collect_uploads(failures, wait=True)
        self.catch_up(idle=True)
        discard(r.handoff for r in self._steps.pending_reports() if r.handoff is not None)
        return failures

    def close(self) -> None:
        self._uploads.close()

    def _record_step(self, step: Step, completed: float, last: Report | None) -> Directive:
        """Record one complete step (its checkpoint committed, or on its way), release the
        workers, count it in the time ledger (``last``: the report that completed it, at
        ``completed``), tell the listeners."""
        assert self._group is not None
        page = self._page
        if not step.checkpointed and self._rows_shared and page and page.released(step.index):
            # The workers ended it: its row is in result.json, written by the last of them.
            row = self._record.take_worker_row()
            assert row is not None, f"the row of step {step.index} is not in result.json"
            self.last_metrics = step.metrics
            self._count(step, last, completed)
            return self._announce(step, None, row)
        if not step.checkpointed:
            # The row first (durable: in the kernel's hands, which a killed driver cannot
            # lose), then the workers released; the rest is the driver's own bookkeeping,
            # and what it writes waits for catch_up().
            self._record.record_step(step.metrics, staged=None, timestamp=step.reports[0].time)
            self._share_rows(next_step=step.index + 1)  # a new run's first row: now they may
            self._group.notify(StepDone(step.index))
            self.last_metrics = step.metrics
            self._count(step, last, completed)
            return self._announce(step, None)
        if step.uploads_async:
            self._submit_upload(step)  # logs the row, durable, as above
            self._group.notify(StepDone(step.index))
            self.last_metrics = dict(step.metrics)
            self._count(step, last, completed)
            return Directive.CONTINUE  # told when committed
        checkpoint = self._commit(step)
        self._group.notify(StepDone(step.index))  # (ends it where a release line does)
        self.last_metrics = dict(step.metrics)
        self._count(step, last, completed, commit_s=time.monotonic() - completed)
        self._ledger.checkpoint_committed(step.index)
        self._record.write_ledger(self._ledger.to_json())
        return self._announce(step, checkpoint)

    def _count(
        self, step: Step, last: Report | None, completed: float, commit_s: float = 0.0
    ) -> None:
        """The step in the time ledger (its figures go to disk at :meth:`catch_up`): after
        the workers were released, so that none of it is on their way."""
        ledger = self._ledger
        slowest = step.reports[-1].rank
        if last is not None:
            ledger.on_report(last, completed)
            slowest = last.rank
        ledger.on_step(step.index, slowest, completed, commit_s)
        if self._behind_since is None:
            self._behind_since = completed

    def _announce(
        self, step: Step, checkpoint: Checkpoint | None, row: dict[str, Any] | None = None
    ) -> Directive:
        """Tell the listeners of a step logged as ``row`` (by default the last row
        logged). Runs once per report: the event is built only when someone listens."""
        if row is None:
            row = self._record.last_row  # not copied: listeners copy what they keep
            assert row is not None
        previous, self._previous_total_s = self._previous_total_s, row["time_total_s"]
        if not self._announcing:
            return Directive.CONTINUE
        clock = ResultClock(
            float(previous), self._clock.restored_iteration, self._clock.restored_time_total_s
        )
        event = StepRecorded(
            run=self._run,
            iteration=int(row["training_iteration"]),
            worker_metrics=[r.metrics for r in step.reports],
            checkpoint=checkpoint,
            row=row,
            clock=clock,
            ledger=self._ledger.figures,
        )
        return self._listeners.emit(event)

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
            checkpoint = self._record.record_step(
                step.metrics,
                staged=self._staged(step),
                timestamp=step.reports[0].time,
                persisted=persisted,
                dir_name=step.dir_name,
            )
            assert checkpoint is not None
        else:
            logged, staged = pending
            checkpoint = self._record.commit_pending(logged, staged=staged, persisted=persisted)
        if self._group is not None:
            reported = self._record.reported()
            self._group.notify(CheckpointCommitted(step.index, checkpoint, reported))
        return checkpoint

    def _keep_data_positions(self, step: Step) -> None:
        """The step's data positions go into its checkpoint's metadata: a restart from it
        continues every dataset shard after the rows this step covered."""
        positions = data_positions.of_step(step.reports)
        if positions is not None:
            self._record.add_checkpoint_metadata({DATA_POSITIONS_KEY: positions}, own=True)

    def _stage_handoffs(self, step: Step) -> None:
        """Ranks that reported ASYNC in a step another rank reported SYNC: their files
        are staged now, so the step commits whole."""
        for report in step.reports:
            if report.handoff is not None and os.path.isdir(report.handoff):
                staged = storage.staging_dir_name(step.index, report.rank, root=self._staging_dir)
                self._run_dir.upload_dir(report.handoff, staged)
                discard([report.handoff])

    def _submit_upload(self, step: Step) -> None:
        """Log the step and hand its files to the upload thread, which copies them into
        this attempt's staging directory; committed by :meth:`collect_uploads`."""
        handoffs = {r.rank: r.handoff for r in step.reports if r.handoff is not None}
        logged = self._record.record_pending_step(
            step.metrics, timestamp=step.reports[0].time, dir_name=step.dir_name
        )
        row = self._record.last_row
        assert row is not None
        job = UploadJob(
            (step, logged, self._staged(step), dict(row)),
            step.index,
            handoffs,
            root=self._staging_dir,
        )
        self._uploads.submit(job)
