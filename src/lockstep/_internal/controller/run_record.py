"""RunRecord: the one owner of a run's record on disk, the RunState snapshot and the run log.

The controller says what happened through three verbs, :meth:`RunRecord.record_step`,
:meth:`RunRecord.record_failure` and :meth:`RunRecord.close`; nothing else changes the
RunState. The checkpoint manager is the record's part that commits and retains
checkpoints, and is reached only through it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from lockstep._core import storage
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig
from lockstep._core.errors import TrainingFailedError
from lockstep._core.run_state import RunState
from lockstep._internal.controller.checkpoint_manager import CheckpointManager
from lockstep._internal.controller.run_log import RunLog


class RunRecord:
    """What a run has done so far, kept in its run directory.

    Args:
        checkpoints: Commits and retains checkpoints; owns nothing else.
        run_log: result.json and progress.csv.
    """

    def __init__(self, checkpoints: CheckpointManager, run_log: RunLog) -> None:
        self._checkpoints = checkpoints
        self._run_log = run_log
        self.run_dir = checkpoints.run_dir
        last = run_log.last_row
        self._time_offset = float(last["time_total_s"]) if last else 0.0
        self._started = time.monotonic()
        if last is not None:
            # Steps logged after the last snapshot (a crash between them) keep their numbers.
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
    ) -> RunRecord:
        """The record of ``run_dir``, continuing where an earlier run of it stopped.

        ``checkpoint_metadata`` is added to every checkpoint's metadata.
        """
        checkpoints = CheckpointManager.open(run_dir, config, checkpoint_metadata)
        return cls(checkpoints, RunLog(run_dir))

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

    def start_attempt(self, attempt: int) -> str:
        """Clear what an earlier attempt left uncommitted; return where this attempt's
        workers stage their checkpoints (sent to them, echoed back in their reports)."""
        self._checkpoints.remove_uncommitted()
        return storage.attempt_staging_dir(attempt)

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
        iteration = self._next_iteration()
        checkpoint = None
        if staged is not None or persisted is not None:
            # A persisted checkpoint keeps the name it was put in storage under.
            named = dir_name is not None and persisted is None
            reserved = self._checkpoints.reserve(dir_name) if named else None
            pending = PendingCheckpoint(dict(metrics), iteration, reserved)
            checkpoint = self._commit(pending, staged, persisted)
        self._log(metrics, iteration, timestamp, self.state.latest if checkpoint else None)
        if checkpoint is not None:
            self._run_log.flush()
        return checkpoint

    def record_pending_step(
        self, metrics: Mapping[str, Any], *, timestamp: float, dir_name: str | None
    ) -> PendingCheckpoint:
        """One complete step whose checkpoint is still being uploaded (ASYNC): log its
        line under the name the checkpoint will have; :meth:`commit_pending` commits it."""
        iteration = self._next_iteration()
        reserved = self._checkpoints.reserve(dir_name)
        self._log(metrics, iteration, timestamp, reserved[0])
        return PendingCheckpoint(dict(metrics), iteration, reserved)

    def commit_pending(
        self,
        pending: PendingCheckpoint,
        *,
        staged: str | None,
        persisted: Checkpoint | None = None,
    ) -> Checkpoint:
        """Commit the uploaded checkpoint of a step :meth:`record_pending_step` logged."""
        checkpoint = self._commit(pending, staged, persisted)
        self._run_log.flush()
        return checkpoint

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
        self, metrics: Mapping[str, Any], iteration: int, timestamp: float, dir_name: str | None
    ) -> None:
        self._run_log.append(
            {
                **metrics,
                "training_iteration": iteration,
                "timestamp": timestamp,
                "time_total_s": self._time_offset + time.monotonic() - self._started,
                "checkpoint_dir_name": dir_name,
            }
        )

    def record_failure(self) -> None:
        """The worker group failed (once, however many of its workers did)."""
        self.state.num_failures += 1

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
        elif error is not None:
            state.status = "errored"
            state.error = _error_record(error)
            self.run_dir.write_atomic(storage.ERROR_FILE, error_text(error).encode("utf-8"))
        elif stopped:
            state.status = "interrupted"
        self._run_log.close()
        self._checkpoints.save()


@dataclasses.dataclass(frozen=True)
class PendingCheckpoint:
    """A logged step's checkpoint not committed yet: its metrics, iteration and the
    name and index reserved for it (None: the next free ones, at commit)."""

    metrics: dict[str, Any]
    iteration: int
    reserved: tuple[str, int] | None


def error_text(error: TrainingFailedError) -> str:
    """The error file: the message, then every failed worker's full traceback."""
    parts = [str(error), ""]
    for rank, failure in sorted(error.worker_failures.items()):
        parts += ["", f"=== rank {rank}: {failure.summary}"]
        if failure.full_traceback or failure.traceback:
            parts.append((failure.full_traceback or failure.traceback).rstrip())
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
