"""RunRecord: the only writer of RunState and the run log."""

from __future__ import annotations

import json

from lockstep._core import storage
from lockstep._core.config import CheckpointConfig
from lockstep._core.errors import TrainingFailedError, WorkerFailure
from lockstep._core.run_state import RunState
from lockstep._core.storage import StorageDir
from lockstep._internal.controller.run_record import RunRecord


def open_record(tmp_path) -> RunRecord:
    run_dir = StorageDir.from_uri(tmp_path / "run")
    run_dir.makedirs()
    return RunRecord.open(run_dir, CheckpointConfig())


def stage(record: RunRecord, staging_dir: str, step: int) -> str:
    part = storage.staging_dir_name(step, 0, root=staging_dir)
    record.run_dir.makedirs(part)
    record.run_dir.write_atomic(f"{part}/w.txt", b"w")
    return storage.staging_dir_name(step, root=staging_dir)


def test_steps_are_numbered_logged_and_committed_where_staged(tmp_path):
    record = open_record(tmp_path)
    staging_dir = record.start_attempt(0)
    assert staging_dir == ".staging/attempt_000000"
    assert record.record_step({"loss": 2.0}, staged=None, timestamp=1.0) is None
    checkpoint = record.record_step(
        {"loss": 1.0}, staged=stage(record, staging_dir, 1), timestamp=2.0
    )
    assert checkpoint is not None and checkpoint.path.endswith("checkpoint_000000")
    record.close(finished=True)
    state = RunState.from_json(record.run_dir.read_bytes(storage.STATE_FILE))
    assert (state.status, state.training_iteration, state.latest) == (
        "finished",
        2,
        "checkpoint_000000",
    )
    lines = record.run_dir.read_text(storage.RESULTS_FILE).splitlines()
    assert [json.loads(line)["checkpoint_dir_name"] for line in lines] == [
        None,
        "checkpoint_000000",
    ]


def test_a_reopened_record_continues_numbering_from_the_log(tmp_path):
    record = open_record(tmp_path)
    record.start_attempt(0)
    record.record_step({"loss": 2.0}, staged=None, timestamp=1.0)
    record.close()  # interrupted: neither finished nor failed
    again = open_record(tmp_path)
    assert again.state.status == "running" and again.state.training_iteration == 1
    again.record_step({"loss": 1.0}, staged=None, timestamp=2.0)
    assert again.last_row is not None and again.last_row["training_iteration"] == 2
    again.close()


def test_failures_are_counted_and_the_error_recorded(tmp_path):
    record = open_record(tmp_path)
    failure = WorkerFailure(rank=1, pid=7, kind="exception", summary="rank 1 raised", time=1.0)
    record.record_failure()
    record.record_failure()
    record.close(TrainingFailedError.from_failures({1: failure}, attempts=2))
    state = RunState.from_json(record.run_dir.read_bytes(storage.STATE_FILE))
    assert state.status == "errored" and state.num_failures == 2
    assert state.error is not None and state.error["failures"]["1"]["pid"] == 7
    assert "rank 1 raised" in record.run_dir.read_text(storage.ERROR_FILE)
