"""RunRecord: the one owner of a run's record on disk, the RunState snapshot and the run log.

The controller says what happened through three verbs, :meth:`RunRecord.record_step`,
:meth:`RunRecord.record_failure` and :meth:`RunRecord.close`; nothing else changes the
RunState. The checkpoint manager is the record's part that commits and retains
checkpoints, and is reached only through it.

The record survives a driver killed at any moment: a step's row is durable before any
worker's ``report()`` of it returns (and before its checkpoint is committed), and
:meth:`RunRecord.open`
reconciles what a dead driver left (sweeps its uncommitted directories, drops the rows of
checkpoints it never committed) and saves the state before any worker starts, so that every
run ``fit()`` began can be restored.
"""

from __future__ import annotations

import array
import contextlib
import copy
import dataclasses
import json
import logging
import os
import socket
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from lockstep._core import flags, storage
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig
from lockstep._core.errors import TrainingFailedError, TrainingInterrupted, last_output_header
from lockstep._core.json_text import readable_json
from lockstep._core.result import Result, user_metrics
from lockstep._core.run_state import AttemptRecord, RunState
from lockstep._core.storage import DRIVER_FILE
from lockstep._core.time_ledger import (
    TIME_FILE,
    TIME_HOT_FILE,
    TimeLedger,
    hot_seq,
    unpack_hot,
)
from lockstep._internal.controller.checkpoint_manager import CheckpointManager
from lockstep._internal.controller.run_log import RunLog

logger = logging.getLogger(__name__)


class RunRecord:
    """What a run has done so far, kept in its run directory.

    Args:
        checkpoints: Commits and retains checkpoints; owns nothing else.
        run_log: result.json and progress.csv.
    """

    def __init__(
        self, checkpoints: CheckpointManager, run_log: RunLog, *, save_at_start: bool = True
    ) -> None:
        self._checkpoints = checkpoints
        self._run_log = run_log
        self._save_at_start = save_at_start
        self.run_dir = checkpoints.run_dir
        last = run_log.last_row
        self._time_offset = float(last["time_total_s"]) if last else 0.0
        self._started = time.monotonic()
        # The restart budgets count this driver's failures (as Ray's do), the state every one.
        state = checkpoints.state
        self._counted_before = (state.num_failures, state.num_preemptions)
        self._first_attempt = state.attempts  # the first this driver starts
        self._fsync_rows = flags.FSYNC_ROWS.get()
        self._time = _TimeFiles(self.run_dir)
        self._said_figures_failed = False
        if last is not None:
            # Steps logged after the last snapshot (steps without a checkpoint, a crash
            # between them) keep their numbers: rows are numbered 1..N, each once.
            state = checkpoints.state
            state.training_iteration = max(
                state.training_iteration, int(last["training_iteration"])
            )

    @classmethod
    def open(
        cls,
        run_dir: storage.StorageDir,
        config: CheckpointConfig,
        checkpoint_metadata: dict[str, Any] | None = None,
        *,
        save_at_start: bool = True,
    ) -> RunRecord:
        """The record of ``run_dir``, continuing where an earlier run of it stopped.

        What a killed driver left is made whole first: its staging area and uncommitted
        checkpoint directories are removed, the rows of checkpoints it never committed are
        dropped (training redoes those steps), and the state is saved, so the run can be
        restored from here on. ``checkpoint_metadata`` is added to every checkpoint's
        metadata.

        Without ``save_at_start`` (a Tune function trial's run, which its Tuner restores,
        and whose worker is a thread of the driver) the state is saved at the first
        checkpoint commit and at the end only: a run without a state file starts afresh.
        """
        checkpoints = CheckpointManager.open(run_dir, config, checkpoint_metadata)
        record = cls(checkpoints, _reconciled(checkpoints), save_at_start=save_at_start)
        if save_at_start:
            checkpoints.save()
            record._write_driver()
        return record

    def _write_driver(self) -> None:
        """Say which process drives the run (``.driver.json``), for ``lockstep status``
        while the driver prepares the run and after it is gone."""
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        try:
            self.run_dir.write_atomic(DRIVER_FILE, json.dumps(info).encode())
        except OSError as exc:
            warnings.warn(f"lockstep: could not write {DRIVER_FILE}: {exc}", stacklevel=3)

    @staticmethod
    def sweep(run_dir: storage.StorageDir) -> None:
        """Make whole what a killed driver left in ``run_dir``, as :meth:`open` does, but
        leave the state as it is (``restore()``, before any ``fit()``)."""
        if run_dir.exists(storage.STATE_FILE):
            _reconciled(CheckpointManager.open(run_dir, CheckpointConfig())).close()

    def add_checkpoint_metadata(self, metadata: Mapping[str, Any], *, own: bool = False) -> None:
        """Add ``metadata`` to every checkpoint committed from now on (``own``: lockstep's,
        see :meth:`CheckpointManager.add_metadata`)."""
        self._checkpoints.add_metadata(metadata, own=own)

    @property
    def state(self) -> RunState:
        """The snapshot, to read; only the verbs below change it."""
        return self._checkpoints.state

    @property
    def num_to_keep(self) -> int | None:
        """``CheckpointConfig.num_to_keep``: how many best checkpoints a Result lists."""
        return self._checkpoints.num_to_keep

    @property
    def latest_checkpoint(self) -> Checkpoint | None:
        return self._checkpoints.latest_checkpoint

    @property
    def last_row(self) -> dict[str, Any] | None:
        return self._run_log.last_row

    def write_params(self, params: Mapping[str, Any]) -> None:
        self._run_log.write_params(params)

    def rows_for_workers(self) -> tuple[str, float] | None:
        """Where the workers may append the rows of their steps now, and the base of
        their ``time_total_s`` (add ``time.monotonic()``): result.json, once open here;
        None where they may not (rows fsync'd one by one, an object store's journal)."""
        path = self._run_log.shared_path()
        if path is None or self._fsync_rows:
            return None
        return path, self._time_offset - self._started

    def take_worker_row(self) -> dict[str, Any] | None:
        """The next row a worker appended (see :meth:`rows_for_workers`), recorded as a
        step this record logged; None if there is none."""
        row = self._run_log.take_appended()
        if row is not None:
            self.state.training_iteration = int(row["training_iteration"])
        return row

    def start_attempt(self, attempt: int, num_workers: int | None = None) -> str:
        """Clear what an earlier attempt left uncommitted; return where this attempt's
        workers stage their checkpoints (sent to them, echoed back in their reports).

        Attempts are numbered across the run's drivers (``RunState.attempts``, saved before
        any worker starts), not from ``attempt``: a worker of a dead driver still writing
        (a Ray actor not yet stopped) writes where no later driver commits anything. (A
        Tune function trial's workers are threads of the driver: they die with it.) The
        attempt, of ``num_workers`` workers, goes into the run's history; an earlier one
        that did not say how it ended was resized (this driver's) or lost with its driver.
        """
        self._checkpoints.remove_uncommitted()
        state = self.state
        number, state.attempts = state.attempts, state.attempts + 1
        self._end_attempt(self._unended_reason(num_workers))
        state.history.append(
            AttemptRecord(number, num_workers, time.time(), state.training_iteration)
        )
        if self._save_at_start:
            self._checkpoints.save()
        return storage.attempt_staging_dir(number)

    def record_relaunch(self, num_workers: int, launcher: str) -> None:
        """The launcher started the run's processes again with ``num_workers`` workers
        (torchrun's elastic rendezvous, after a node joined or left): an earlier driver's
        last attempt of another size was resized, however that driver saw it end."""
        last = self.state.history[-1] if self.state.history else None
        if last is None or last.num_workers in (None, num_workers):
            return
        seen = last.ended or "driver lost"
        detail = f"{seen}: {last.cause}" if last.cause else seen
        last.ended = "resized"
        last.cause = (
            f"{launcher} started the run again with {num_workers} workers, "
            f"{last.num_workers} before ({detail})"
        )
        if self._save_at_start:
            self._checkpoints.save()

    @property
    def continues_resize(self) -> bool:
        """Whether this driver goes on from an earlier one's attempt that was resized (and
        has started none of its own yet)."""
        history = self.state.history
        return (
            bool(history)
            and history[-1].ended == "resized"
            and (history[-1].number < self._first_attempt)
        )

    def _unended_reason(self, num_workers: int | None) -> str:
        """How the last attempt ended, when it did not say so and another starts."""
        last = self.state.history[-1] if self.state.history else None
        if last is None or last.number < self._first_attempt:
            return "driver lost"
        return "restarted" if last.num_workers == num_workers else "resized"

    def _end_attempt(self, ended: str, cause: str | None = None) -> None:
        """Say how the running attempt ended, unless it already did."""
        history = self.state.history
        if history and history[-1].ended is None:
            history[-1].ended, history[-1].cause = ended, cause

    def record_step(
        self,
        metrics: Mapping[str, Any],
        *,
        staged: str | None,
        timestamp: float,
        persisted: Checkpoint | None = None,
        dir_name: str | None = None,
    ) -> Checkpoint | None:
        """One complete step: commit its checkpoint, log its line.

        The checkpoint is the one the workers staged in ``staged``, or the one they put in
        storage themselves (``persisted``: NO_UPLOAD, or a ``checkpoint_upload_fn``);
        ``dir_name`` is the user's ``checkpoint_dir_name``. Returns the committed
        checkpoint, or None for a step without one.
        """
        if staged is None and persisted is None:
            # Durable when this returns, before any worker's report() does (the caller
            # releases them after): in the kernel's hands, which a killed driver cannot
            # lose; on disk too with LOCKSTEP_FSYNC_ROWS, else at the next commit.
            self._log(metrics, self._next_iteration(), timestamp, None, sync=self._fsync_rows)
            flags.fault_point("step_recorded")
            return None
        with self._uncommitted_on_error():
            return self._record_checkpoint(metrics, staged, timestamp, persisted, dir_name)

    def _record_checkpoint(
        self,
        metrics: Mapping[str, Any],
        staged: str | None,
        timestamp: float,
        persisted: Checkpoint | None,
        dir_name: str | None,
    ) -> Checkpoint:
        iteration = self._next_iteration()
        # The row first, durable, naming the checkpoint about to be committed: a driver
        # killed after the commit cannot lose it, and one killed before leaves a row whose
        # checkpoint was never committed, which the next open() drops. Every row is in the
        # operating system's hands at once (a killed driver loses none); the fsync before
        # a commit also puts the rows before it on disk. Rows after the last commit that a
        # crash of the machine loses are steps training redoes from that checkpoint (none
        # with LOCKSTEP_FSYNC_ROWS).
        # A persisted checkpoint keeps the name it was put in storage under.
        name = self._checkpoints.persisted_name(persisted) if persisted is not None else dir_name
        reserved = self._checkpoints.reserve(name)
        # Pending until committed: a snapshot saved mid-commit (a name reported again
        # replaces its older checkpoint) must not make the row's checkpoint look committed.
        self.state.pending.append(reserved[0])
        self._log(metrics, iteration, timestamp, reserved[0], sync=True)
        flags.fault_point("row_written")
        checkpoint = self._commit(
            PendingCheckpoint(dict(metrics), iteration, reserved), staged, persisted
        )
        self._run_log.flush()
        flags.fault_point("step_recorded")
        return checkpoint

    def record_pending_step(
        self, metrics: Mapping[str, Any], *, timestamp: float, dir_name: str | None
    ) -> PendingCheckpoint:
        """One complete step whose checkpoint is still being uploaded (ASYNC): log its
        line under the name the checkpoint will have; :meth:`commit_pending` commits it."""
        iteration = self._next_iteration()
        reserved = self._checkpoints.reserve(dir_name)
        # Saved as pending before its row is written: a row naming a checkpoint the next
        # open() finds still pending is dropped, as the row of any uncommitted checkpoint.
        self.state.pending.append(reserved[0])
        self._checkpoints.save(commit=True)
        self._log(metrics, iteration, timestamp, reserved[0], sync=self._fsync_rows)
        return PendingCheckpoint(dict(metrics), iteration, reserved)

    def commit_pending(
        self,
        pending: PendingCheckpoint,
        *,
        staged: str | None,
        persisted: Checkpoint | None = None,
    ) -> Checkpoint:
        """Commit the uploaded checkpoint of a step :meth:`record_pending_step` logged."""
        # Its row on disk before the commit, which saves the state without it as pending.
        self._run_log.sync()
        with self._uncommitted_on_error():
            checkpoint = self._commit(pending, staged, persisted)
        self._run_log.flush()
        flags.fault_point("step_recorded")
        return checkpoint

    @contextlib.contextmanager
    def _uncommitted_on_error(self) -> Iterator[None]:
        """A checkpoint that cannot be written (a full disk, a failing endpoint, after
        retries) is not committed: the state goes back to what it was, so the previous
        checkpoint stays the latest, and its row (already written) is one the next
        ``open()`` drops. Raised as a CheckpointWriteError saying what failed."""
        before = copy.deepcopy(self.state)
        try:
            yield
        except (storage.CheckpointWriteError, AssertionError):
            self._checkpoints.state = before
            raise
        except Exception as exc:
            self._checkpoints.state = before
            raise storage.write_failed(exc, "a checkpoint", self.run_dir.uri) from exc

    def reported(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """``(dir_name, metrics)`` of every retained checkpoint, in result order."""
        return self._checkpoints.reported()

    def _next_iteration(self) -> int:
        self.state.training_iteration += 1
        return self.state.training_iteration

    def _commit(
        self, pending: PendingCheckpoint, staged: str | None, persisted: Checkpoint | None
    ) -> Checkpoint:
        metrics, iteration, reserved = pending.metrics, pending.iteration, pending.reserved
        if persisted is not None:
            return self._checkpoints.adopt(persisted, metrics, iteration, reserved)
        assert staged is not None, "a checkpoint neither staged nor persisted"
        return self._checkpoints.commit(staged, metrics, iteration, reserved)

    def _log(
        self,
        metrics: Mapping[str, Any],
        iteration: int,
        timestamp: float,
        dir_name: str | None,
        *,
        sync: bool,
    ) -> None:
        self._run_log.append(
            {
                **metrics,
                "training_iteration": iteration,
                "timestamp": timestamp,
                "time_total_s": self._time_offset + time.monotonic() - self._started,
                "checkpoint_dir_name": dir_name,
            },
            sync=sync,
        )

    def start_from(self, checkpoint: Checkpoint, metrics: Mapping[str, Any]) -> None:
        """Make a copy of ``checkpoint`` (another run's: a PBT donor's) this run's latest,
        committed before any worker starts, with the ``metrics`` its step reported: the
        next attempt starts from it."""
        with self._uncommitted_on_error():
            self._checkpoints.adopt(checkpoint, dict(metrics), self.state.training_iteration)

    def previous_ledger(self) -> tuple[list[float], dict[str, float]] | None:
        """The time ledger an earlier driver of the run kept (its figures and data
        sources), from ``time.json`` or ``time.bin``, whichever is newer; None if none."""
        return self._time.previous()

    def catch_up(self) -> None:
        """Write progress.csv's lines of the rows logged since the last call (result.json
        has them already: see :meth:`RunLog.catch_up`)."""
        self._run_log.catch_up()

    def write_ledger_figures(self, values: array.array[float]) -> None:
        """Rewrite ``time.bin`` with the ledger's figures: one ``pwrite`` (locally;
        elsewhere only :meth:`write_ledger` writes). A disk that will not take them (full)
        costs a warning, once, not the run: ``time.json`` has the figures at the end."""
        try:
            self._time.write_figures(values)
        except OSError as exc:
            if not self._said_figures_failed:
                self._said_figures_failed = True
                warnings.warn(f"lockstep: could not write {TIME_HOT_FILE}: {exc}", stacklevel=2)

    def write_ledger(self, data: Mapping[str, Any]) -> None:
        """Replace ``time.json`` with the whole ledger (when the run's phase changes, at
        commits, at the end); a storage that will not take it costs a warning, not the
        run. Locally without an fsync: time.bin has the figures too, and a restart per
        failure should not wait for a disk."""
        data_bytes = readable_json(data)
        try:
            self._time.write_json(data_bytes)
        except Exception as exc:  # an object store's client raises its own errors
            warnings.warn(f"lockstep: could not write {TIME_FILE}: {exc}", stacklevel=2)

    def write_stacks(self, attempt: int, text: str) -> None:
        """Keep a hung attempt's stacks in ``errors/attempt_N.txt``; a storage that will
        not take them costs a warning, not the run's error."""
        name = f"{storage.ERRORS_DIR}/attempt_{attempt}.txt"
        try:
            self.run_dir.makedirs(storage.ERRORS_DIR)
            self.run_dir.write_atomic(name, text.encode())
        except OSError as exc:
            warnings.warn(f"lockstep: could not write the stacks to {name}: {exc}", stacklevel=2)

    def record_failure(self, *, preempted: bool = False, cause: str | None = None) -> int:
        """The worker group failed (once, however many of its workers did), or was
        preempted, because of ``cause`` (the root cause's summary); return how many times
        it did so (of that kind) under this driver: the one count the failure policy
        decides on."""
        state = self.state
        self._end_attempt("preempted" if preempted else "failed", cause)
        if preempted:
            state.num_preemptions += 1
            return state.num_preemptions - self._counted_before[1]
        state.num_failures += 1
        return state.num_failures - self._counted_before[0]

    def result(
        self,
        last_metrics: dict[str, Any] | None,
        *,
        return_value: Any = None,
        time: TimeLedger | None = None,
    ) -> Result:
        """The run's Result as its record stands: the last metrics (the last row's when not
        given), the checkpoints kept, its error, where its ``time`` went."""
        if last_metrics is None and self.last_row is not None:
            last_metrics = user_metrics(self.last_row)
        return Result.from_state(
            self.run_dir,
            self.state,
            last_metrics=last_metrics,
            return_value=return_value,
            num_to_keep=self.num_to_keep,
            time=time,
        )

    def interruption(self, reason: str) -> TrainingInterrupted:
        """The error a run stopped by ``reason`` raises: where it stopped, how to go on."""
        return TrainingInterrupted(
            reason=reason,
            path=self.run_dir.uri,
            training_iteration=self.state.training_iteration,
            latest_checkpoint=self.state.latest,
        )

    def close(
        self,
        error: TrainingFailedError | None = None,
        *,
        finished: bool = False,
        stopped: bool = False,
    ) -> None:
        """End the record: ``finished``, failed with ``error``, ``stopped`` on request
        (Ctrl-C), or none of these (an exception in the driver); a run that did not
        finish can be continued by ``restore``."""
        self._checkpoints.remove_uncommitted()
        state = self.state
        if finished:
            state.status = "finished"
            self._end_attempt("finished")
        elif error is not None:
            state.status = "errored"
            state.error = _error_record(error)
            self._end_attempt("failed", str(error).splitlines()[0])
            self.run_dir.write_atomic(storage.ERROR_FILE, error_text(error).encode("utf-8"))
        elif stopped:
            state.status = "interrupted"
            self._end_attempt("stopped")
        self._run_log.close()
        self._checkpoints.save()
        self._time.close()


class _TimeFiles:
    """``time.json`` and ``time.bin``: the time ledger's files (see ``_core.time_ledger``)."""

    def __init__(self, run_dir: storage.StorageDir) -> None:
        self._run_dir = run_dir
        self._fd: int | None = None

    def previous(self) -> tuple[list[float], dict[str, float]] | None:
        run_dir = self._run_dir
        figures, sources, seq = None, {}, -1
        if run_dir.exists(TIME_FILE):
            try:
                data = json.loads(run_dir.read_text(TIME_FILE))
                figures, sources = data.get("figures"), dict(data.get("data_sources", {}))
                seq = int(data.get("seq", 0))
            except (ValueError, TypeError, AttributeError):
                figures = None
        if run_dir.exists(TIME_HOT_FILE):
            hot = unpack_hot(run_dir.read_bytes(TIME_HOT_FILE))
            if hot is not None and hot_seq(hot) > seq:
                figures = hot
        return (list(figures), sources) if figures else None

    def write_json(self, data: bytes) -> None:
        # readers see the old file or the new one, whole; not flushed (derived figures)
        self._run_dir.write_atomic(TIME_FILE, data, fsync=False)

    def write_figures(self, values: array.array[float]) -> None:
        if not isinstance(self._run_dir, storage.LocalDir):
            return
        if self._fd is None:
            path = self._run_dir.join(TIME_HOT_FILE)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(self._fd, values, 0)  # a whole step's figures, never torn by a kill

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclasses.dataclass(frozen=True)
class PendingCheckpoint:
    """A logged step's checkpoint not committed yet: its metrics, iteration and the
    name and index reserved for it (None: the next free ones, at commit)."""

    metrics: dict[str, Any]
    iteration: int
    reserved: tuple[str, int] | None


def _reconciled(checkpoints: CheckpointManager) -> RunLog:
    """The run log, after removing what the state does not list as committed (staging,
    checkpoint directories, the rows of checkpoints never committed), with one log line."""
    swept = checkpoints.remove_uncommitted()
    run_log = RunLog(checkpoints.run_dir, scan=False)
    dropped = run_log.reconcile(
        lambda row: (
            (name := row.get("checkpoint_dir_name")) is None
            or checkpoints.is_committed(name, int(row["training_iteration"]))
        )
    )
    checkpoints.state.pending = []  # their rows are gone; their uploads died with the driver
    if swept or dropped:
        logger.warning(
            "lockstep: %s: removed what an interrupted driver left uncommitted (%s)",
            checkpoints.run_dir.uri,
            ", ".join([*swept, *([f"{dropped} result row(s)"] if dropped else [])]),
        )
    return run_log


def error_text(error: TrainingFailedError) -> str:
    """The error file: the message, then every failed worker's full traceback."""
    parts = [str(error), ""]
    for rank, failure in sorted(error.worker_failures.items()):
        parts += ["", f"=== rank {rank}: {failure.summary}"]
        if failure.full_traceback or failure.traceback:
            parts.append((failure.full_traceback or failure.traceback).rstrip())
        if failure.output:
            parts += [last_output_header(failure), *(f"  {line}" for line in failure.output)]
    return "\n".join(parts) + "\n"


def _error_record(error: TrainingFailedError) -> dict[str, Any]:
    failures = {
        str(rank): {
            field.name: getattr(f, field.name)
            for field in dataclasses.fields(f)
            if field.name not in ("exception", "full_traceback")
        }
        for rank, f in error.worker_failures.items()
    }
    return {"message": str(error), "failures": failures}
