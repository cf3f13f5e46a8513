"""A checkpoint the driver cannot commit fails the run at once (storage was retried
already), with the storage's own message, and the previous checkpoint stays the latest."""

from __future__ import annotations

import errno

import pytest

from lockstep._core.errors import TrainingFailedError

from .test_controller import make_controller, report


def test_a_commit_that_cannot_be_written_fails_the_run_without_a_restart(tmp_path, monkeypatch):
    script = [
        [report(0, 0, True), report(1, 0)],
        [report(0, 1, True), report(1, 1)],
    ]
    controller, log, _run_dir = make_controller(tmp_path, [script, script], max_failures=3)
    controller.step()
    controller.step()  # the first checkpoint is committed
    record = controller._run_record

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record.run_dir, "move", full)
    with pytest.raises(TrainingFailedError) as raised:
        controller.run()
    assert "could not write a checkpoint to " in str(raised.value)
    assert "[Errno 28] No space left on device" in str(raised.value)
    assert [line for line in log if line.startswith("start")] == [log[0]]  # no restart
    assert record.state.latest == "checkpoint_000000"
