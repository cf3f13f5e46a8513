"""The session of a Tune function trial: ``report()`` records the step itself.

A function trial is one rank running in a thread of the driver, so its report is the step:
no barrier to wait at, no worker to release. The report writes the row (and commits the
checkpoint) through the run's record, counts it in the time ledger, then asks the run's
listeners (the Tuner's link, Train callbacks) and returns with their answer, as Ray
Tune's function trainables wait for theirs. A stop or pause ends the function at that
report (:class:`TrialStopped`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from lockstep._core import storage
from lockstep._core.callback import RunContext
from lockstep._core.checkpoint import DATA_POSITIONS_KEY, Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.errors import UsageError, UsageKeyError, WorkerFailure
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.reported import CheckpointUploadMode, ReportedCheckpoint
from lockstep._core.run_events import Directive, Listeners, ResultClock, StepRecorded
from lockstep._internal.controller import data_positions
from lockstep._internal.controller.failures import storage_failure
from lockstep._internal.controller.ledger import Ledger
from lockstep._internal.controller.run_record import RunRecord
from lockstep._internal.execution.messages import Report
from lockstep._internal.execution.worker.positions import saved_positions
from lockstep._internal.execution.worker.report_checks import (
    check_reserved,
    check_score,
    clean_metrics,
)
from lockstep._internal.execution.worker.session import (
    default_dir_name,
    empty_directory,
    stage_files,
)


class TrialStopped(BaseException):
    """A listener stopped or paused the trial at its report (``directive``): the function
    ends there. A BaseException, so that the user's ``except Exception`` lets it pass."""

    def __init__(self, directive: Directive) -> None:
        super().__init__(directive.value)
        self.directive = directive


class RunSideError(BaseException):
    """What failed under ``report()`` was the run's side, not the function: the record could
    not commit the step's checkpoint (``failure``: storage was retried already, so the run
    fails, as a Train run does), or a listener raised (``failure`` None: the error ends the
    run, as an exception in a callback does). A BaseException, so that the user's
    ``except Exception`` lets it pass on its way to the run."""

    def __init__(self, error: BaseException, failure: WorkerFailure | None = None) -> None:
        super().__init__(str(error))
        self.error, self.failure = error, failure


@dataclasses.dataclass(frozen=True)
class TrialSetup:
    """What the session of a trial's run is given once, for all its attempts."""

    context: TrainContext
    record: RunRecord
    ledger: Ledger
    listeners: Listeners
    score_attribute: str | None


class TrialSession:
    """The :class:`~lockstep._core.session.Session` of a Tune function trial's thread."""

    def __init__(self, setup: TrialSetup) -> None:
        self._s = setup
        self._record = setup.record
        self.context = dataclasses.replace(setup.context, dataset_shards=self.get_dataset_shard)
        self.score_attribute = setup.score_attribute
        self.last_metrics: dict[str, Any] | None = None
        self._announcing = setup.listeners.wants(StepRecorded)
        last = setup.record.last_row
        total = float(last["time_total_s"]) if last else 0.0
        self._restored = (setup.record.state.training_iteration, total)  # for Tune's clock
        self._previous_total_s = total
        self._run = RunContext(name="", path="", attempt=0)
        self._staging_dir = storage.STAGING_DIR
        self._latest: Checkpoint | None = None
        self._started_from: Checkpoint | None = None
        self._num_reports = 0
        self._released_at = time.monotonic()
        self._loaders: dict[str, Callable[[], dict[str, Any] | None]] = {}

    def begin_attempt(
        self, run: RunContext, staging_dir: str, checkpoint: Checkpoint | None
    ) -> None:
        """An attempt starts from ``checkpoint``, staging its checkpoints in ``staging_dir``."""
        self._run, self._staging_dir = run, staging_dir
        self._latest = self._started_from = checkpoint
        self._num_reports = 0
        self._loaders = {}
        self._released_at = time.monotonic()

    @property
    def num_reports(self) -> int:
        return self._num_reports

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Checkpoint | None = None,
        *,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    ) -> None:
        entered = time.monotonic()
        clean = clean_metrics(metrics)
        check_reserved(clean)
        step, timestamp = self._num_reports, time.time()
        report = Report(0, step, clean, checkpoint is not None, timestamp)
        committed, persist_s = None, 0.0
        if checkpoint is None:
            # durable when this returns, as every report's row (see RunRecord.record_step)
            self._record.record_step(clean, staged=None, timestamp=timestamp)
        else:
            mode = CheckpointUploadMode(checkpoint_upload_mode)
            delete = delete_local_checkpoint_after_upload
            if delete is None:  # Ray's default: ASYNC owns the local copy, SYNC leaves it
                delete = mode is CheckpointUploadMode.ASYNC
            persisted, staged = self._persist(
                clean, checkpoint, step, mode, delete, checkpoint_upload_fn, checkpoint_dir_name
            )
            persist_s = time.monotonic() - entered
            self._keep_positions(report)
            try:
                committed = self._record.record_step(
                    clean,
                    staged=staged,
                    timestamp=timestamp,
                    persisted=persisted,
                    dir_name=checkpoint_dir_name,
                )
            except storage.CheckpointWriteError as exc:
                raise RunSideError(exc, storage_failure(exc)) from exc
            self._latest = committed
        self._num_reports += 1
        self.last_metrics = clean
        self._count(report, entered, persist_s)
        directive = self._announce(committed)
        self._released_at = time.monotonic()
        if directive is not Directive.CONTINUE:
            raise TrialStopped(directive)

    def _persist(
        self,
        metrics: dict[str, Any],
        checkpoint: Checkpoint,
        step: int,
        mode: CheckpointUploadMode,
        delete: bool,
        upload_fn: Callable[[Checkpoint, str], Checkpoint] | None,
        dir_name: str | None,
    ) -> tuple[Checkpoint | None, str | None]:
        """The checkpoint put in storage (``upload_fn``, NO_UPLOAD), or where its files
        were staged (SYNC and ASYNC alike: the trial's thread is the one that waits)."""
        if not isinstance(checkpoint, Checkpoint):
            raise UsageError(
                f"report(checkpoint=...) takes a Checkpoint, got {type(checkpoint).__name__}."
                " HINT: checkpoint=Checkpoint.from_directory(dir)"
            )
        check_score(metrics, self.score_attribute)
        if upload_fn is not None:
            staged = storage.staging_dir_name(step, root=self._staging_dir)
            persisted = upload_fn(checkpoint, dir_name or default_dir_name(staged))
            if not isinstance(persisted, Checkpoint):
                raise UsageError(
                    "checkpoint_upload_fn must return the uploaded Checkpoint, got "
                    f"{type(persisted).__name__}. HINT: return Checkpoint(path, filesystem)"
                )
            return persisted, None
        if mode is CheckpointUploadMode.NO_UPLOAD:
            return checkpoint, None
        staged = stage_files(checkpoint, self._record.run_dir, step, 0, self._staging_dir)
        if delete and checkpoint.is_local:
            empty_directory(checkpoint.path)
        return None, staged

    def _keep_positions(self, report: Report) -> None:
        """The data loaders' positions go into the checkpoint's metadata (see
        ``data_positions``): a restart from it continues them."""
        if self._loaders:
            loaders = {key: position() for key, position in self._loaders.items()}
            report = dataclasses.replace(report, data_positions={"loaders": loaders})
            kept = data_positions.of_step([report])
            self._record.add_checkpoint_metadata({DATA_POSITIONS_KEY: kept}, own=True)

    def _count(self, report: Report, entered: float, persist_s: float) -> None:
        """The step in the time ledger: the function's time since the last report, the
        checkpoint's persisting and its commit."""
        now = time.monotonic()
        ledger = self._s.ledger
        timings = (entered - self._released_at, 0.0, persist_s, "")
        ledger.on_report(dataclasses.replace(report, timings=timings), entered + persist_s)
        ledger.on_step(report.step, 0, now, commit_s=now - entered - persist_s)
        if report.checkpointed:
            ledger.checkpoint_committed(report.step)

    def _announce(self, checkpoint: Checkpoint | None) -> Directive:
        """Tell the listeners of the step just logged; their directive."""
        row = self._record.last_row
        assert row is not None
        previous, self._previous_total_s = self._previous_total_s, row["time_total_s"]
        if not self._announcing:
            return Directive.CONTINUE
        iteration, restored_total = self._restored
        event = StepRecorded(
            run=self._run,
            iteration=int(row["training_iteration"]),
            worker_metrics=[self.last_metrics or {}],
            checkpoint=checkpoint,
            row=row,
            clock=ResultClock(float(previous), iteration, restored_total),
            ledger=self._s.ledger.figures,
        )
        try:
            return self._s.listeners.emit(event)
        except BaseException as exc:
            raise RunSideError(exc) from exc

    # -- the rest of the session: one rank, no datasets ---------------------------------

    def heartbeat(self) -> None:
        """Nothing to do: a function trial has no hang watchdog (see ``function_trial``)."""

    def get_checkpoint(self) -> Checkpoint | None:
        return self._latest

    def get_all_reported_checkpoints(self) -> list[ReportedCheckpoint]:
        run_dir = self._record.run_dir
        return [
            ReportedCheckpoint(Checkpoint(run_dir.join(name), run_dir.fs), dict(metrics))
            for name, metrics in self._record.reported()
        ]

    def get_preemption_info(self) -> PreemptionInfo | None:
        return None

    def get_dataset_shard(self, name: str | None) -> Any:
        raise UsageKeyError(
            f"get_dataset_shard({name!r}): no dataset by that name. Datasets given to the "
            f"trainer: none. HINT: pass datasets={{{name!r}: ds}} to the trainer"
        )

    def barrier(self) -> None:
        """One rank: nobody to wait for."""

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        return data

    def all_gather(self, data: Any) -> list[Any]:
        return [data]

    def next_loader_key(self) -> str:
        return f"loader_{len(self._loaders)}"

    def track_loader(self, key: str, position: Callable[[], dict[str, Any] | None]) -> None:
        self._loaders[key] = position

    def resume_positions(self) -> dict[str, Any]:
        return saved_positions(self._started_from)
