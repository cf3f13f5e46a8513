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


def test_open_saves_the_state_before_anything_else(tmp_path):
    record = open_record(tmp_path)
    assert record.run_dir.exists(storage.STATE_FILE)  # restorable before any step


def test_open_reconciles_what_a_killed_driver_left(tmp_path, caplog):
    record = open_record(tmp_path)
    staging_dir = record.start_attempt(0)
    record.record_step({"loss": 3.0}, staged=stage(record, staging_dir, 0), timestamp=1.0)
    record.record_step({"loss": 2.0}, staged=None, timestamp=2.0)
    # Killed mid-commit of the third step: its row is written, its directory renamed into
    # place, the state not yet saved; the staging area still holds a part.
    row = {"loss": 1.0, "training_iteration": 3, "checkpoint_dir_name": "checkpoint_000001"}
    record.run_dir.append_text(storage.RESULTS_FILE, json.dumps(row) + "\n")
    record.run_dir.makedirs("checkpoint_000001")
    stage(record, staging_dir, 2)

    with caplog.at_level("WARNING", logger="lockstep"):
        again = open_record(tmp_path)
    assert [r.getMessage().split(": ", 2)[-1] for r in caplog.records] == [
        "removed what an interrupted driver left uncommitted "
        "(.staging, checkpoint_000001, 1 result row(s))"
    ]
    assert sorted(again.run_dir.listdir()) == [
        ".driver.json",
        "checkpoint_000000",
        "progress.csv",
        "result.json",
        "run_state.json",
    ]
    lines = again.run_dir.read_text(storage.RESULTS_FILE).splitlines()
    assert [json.loads(line)["training_iteration"] for line in lines] == [1, 2]
    assert again.state.training_iteration == 2
    # the step redone gets the number of the dropped row, and the checkpoint its name
    staging_dir = again.start_attempt(0)
    checkpoint = again.record_step({"loss": 1.0}, staged=stage(again, staging_dir, 0), timestamp=3)
    assert checkpoint is not None and checkpoint.path.endswith("checkpoint_000001")
    assert again.last_row is not None and again.last_row["training_iteration"] == 3
    again.close(finished=True)


def test_attempts_are_numbered_across_drivers(tmp_path):
    record = open_record(tmp_path)
    assert [record.start_attempt(a) for a in (0, 1)] == [
        ".staging/attempt_000000",
        ".staging/attempt_000001",
    ]
    # the driver dies; a worker of its last attempt may still write there
    again = open_record(tmp_path)
    assert again.start_attempt(0) == ".staging/attempt_000002"
    again.close()


def test_a_pending_checkpoints_row_is_dropped_on_reopen_unless_it_was_committed(tmp_path):
    record = open_record(tmp_path)
    staging_dir = record.start_attempt(0)
    uploaded = record.record_pending_step({"loss": 3.0}, timestamp=1.0, dir_name=None)
    record.record_pending_step({"loss": 2.0}, timestamp=2.0, dir_name="never_uploaded")
    # a later checkpoint is committed, the state saved, while both are still uploading
    record.record_step(
        {"loss": 1.0}, staged=stage(record, staging_dir, 2), timestamp=3.0, dir_name="named"
    )
    record.commit_pending(uploaded, staged=stage(record, staging_dir, 0))
    # the driver dies before the second upload is committed
    again = open_record(tmp_path)
    rows = [json.loads(line) for line in again.run_dir.read_text(storage.RESULTS_FILE).splitlines()]
    assert [(r["training_iteration"], r["checkpoint_dir_name"]) for r in rows] == [
        (1, "checkpoint_000000"),
        (3, "named"),
    ]
    assert again.state.pending == []
    assert sorted(c.dir_name for c in again.state.checkpoints) == ["checkpoint_000000", "named"]
    again.close()


def test_a_commit_that_cannot_be_written_leaves_the_previous_checkpoint_latest(
    tmp_path, monkeypatch
):
    import errno

    import pytest

    record = open_record(tmp_path)
    staging_dir = record.start_attempt(0)
    record.record_step({"loss": 2.0}, staged=stage(record, staging_dir, 0), timestamp=1.0)

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record.run_dir, "move", full)
    with pytest.raises(storage.CheckpointWriteError) as raised:
        record.record_step({"loss": 1.0}, staged=stage(record, staging_dir, 1), timestamp=2.0)
    assert str(raised.value).startswith(f"could not write a checkpoint to {record.run_dir.uri}: ")
    assert "[Errno 28] No space left on device" in str(raised.value)
    assert "HINT: free space there" in str(raised.value)
    # as it was before the step: the first checkpoint is the latest, the step not counted
    assert (record.state.latest, record.state.training_iteration) == ("checkpoint_000000", 1)
    assert record.state.pending == []
    monkeypatch.undo()
    record.close()
    # the step's row, written before the commit, is dropped when the run is continued
    again = open_record(tmp_path)
    assert again.state.latest == "checkpoint_000000"
    assert again.last_row is not None and again.last_row["training_iteration"] == 1
    assert again.run_dir.listdir().count("checkpoint_000001") == 0
    again.close()


def test_failures_and_preemptions_are_counted_apart_per_driver(tmp_path):
    record = open_record(tmp_path)
    assert [record.record_failure(), record.record_failure(preempted=True)] == [1, 1]
    assert record.record_failure() == 2
    record.close()
    again = open_record(tmp_path)  # a restored run: its own budget, the state's totals
    assert again.record_failure(preempted=True) == 1
    assert (again.state.num_failures, again.state.num_preemptions) == (2, 2)
    again.close()


def fsynced_files(monkeypatch) -> list[str]:
    """The names of the files os.fsync is called on from now on (it still syncs them)."""
    import os

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_a_row_without_a_checkpoint_is_fsynced_only_when_asked(tmp_path, monkeypatch):
    record = open_record(tmp_path)
    record.record_step({"loss": 2.0}, staged=None, timestamp=1.0)  # opens the files
    synced = fsynced_files(monkeypatch)
    record.record_step({"loss": 1.5}, staged=None, timestamp=2.0)
    assert synced == []  # written, in the kernel's hands; on disk at the next commit
    record.close()

    monkeypatch.setenv("LOCKSTEP_FSYNC_ROWS", "1")
    again = RunRecord.open(StorageDir.from_uri(tmp_path / "run"), CheckpointConfig())
    again.record_step({"loss": 1.0}, staged=None, timestamp=3.0)
    synced.clear()
    again.record_step({"loss": 0.5}, staged=None, timestamp=4.0)
    assert synced == ["result.json"]
    again.close()
    lines = (tmp_path / "run" / "result.json").read_text().splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [2.0, 1.5, 1.0, 0.5]


def test_the_history_says_how_each_attempt_ended_and_why(tmp_path):
    record = open_record(tmp_path)
    record.start_attempt(0, num_workers=2)
    record.record_step({"loss": 2.0}, staged=None, timestamp=1.0)
    record.record_failure(cause="rank 1 (pid 7) was killed by SIGKILL")
    record.start_attempt(1, num_workers=2)
    record.record_failure(preempted=True, cause="rank 0 (pid 9): its node was drained")
    record.start_attempt(2, num_workers=2)
    record.start_attempt(3, num_workers=4)  # an elastic run grew
    record.record_step({"loss": 1.0}, staged=None, timestamp=2.0)
    record.close()  # the driver died without a word
    again = open_record(tmp_path)
    again.start_attempt(0, num_workers=4)
    again.close(stopped=True)
    third = open_record(tmp_path)
    third.start_attempt(0, num_workers=4)
    third.close(finished=True)
    state = RunState.from_json(third.run_dir.read_bytes(storage.STATE_FILE))
    assert [(a.number, a.num_workers, a.iteration, a.ended, a.cause) for a in state.history] == [
        (0, 2, 0, "failed", "rank 1 (pid 7) was killed by SIGKILL"),
        (1, 2, 1, "preempted", "rank 0 (pid 9): its node was drained"),
        (2, 2, 1, "resized", None),
        (3, 4, 1, "driver lost", None),
        (4, 4, 2, "stopped", None),
        (5, 4, 2, "finished", None),
    ]


def test_a_failed_run_ends_its_last_attempt_with_the_error(tmp_path):
    record = open_record(tmp_path)
    record.start_attempt(0, num_workers=1)
    failure = WorkerFailure(rank=0, pid=3, kind="exception", summary="rank 0 (pid 3) raised X")
    record.close(TrainingFailedError.from_failures({0: failure}, attempts=1))
    (attempt,) = record.state.history
    assert attempt.ended == "failed"
    assert attempt.cause is not None and "rank 0 (pid 3) raised X" in attempt.cause


def test_a_launcher_starting_the_run_again_at_another_size_is_a_resize(tmp_path):
    """torchrun's elastic rendezvous: a node joined (the driver was stopped) and then one
    was lost (the driver was killed with it); the same size again is no resize."""
    record = open_record(tmp_path)
    record.start_attempt(0, num_workers=2)
    record.close(stopped=True)
    grown = open_record(tmp_path)
    assert not grown.continues_resize
    grown.record_relaunch(4, "torchrun")
    assert grown.continues_resize  # (its time ledger starts recovering)
    grown.start_attempt(0, num_workers=4)
    assert not grown.continues_resize
    grown.close()  # killed with its node: no word
    shrunk = open_record(tmp_path)
    shrunk.record_relaunch(2, "torchrun")
    shrunk.start_attempt(0, num_workers=2)
    shrunk.close(stopped=True)
    same = open_record(tmp_path)
    same.record_relaunch(2, "torchrun")
    same.start_attempt(0, num_workers=2)
    same.close(finished=True)
    state = RunState.from_json(same.run_dir.read_bytes(storage.STATE_FILE))
    assert [(a.num_workers, a.ended, a.cause) for a in state.history] == [
        (2, "resized", "torchrun started the run again with 4 workers, 2 before (stopped)"),
        (4, "resized", "torchrun started the run again with 2 workers, 4 before (driver lost)"),
        (2, "stopped", None),
        (2, "finished", None),
    ]
