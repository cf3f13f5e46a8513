"""A worker session on the driver's release line: each report ends with the line's signal
for its step, and a preemption notice shows from the step the driver named."""

from __future__ import annotations

import pickle
import socket
from multiprocessing.connection import Connection

import pytest

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.storage import StorageDir
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    FrameReader,
    Preempted,
    ReleaseLine,
    Report,
    WorkerStart,
    receive_line,
    send_frame,
)
from lockstep._internal.execution.worker.session import WorkerSession


@pytest.fixture
def ends(tmp_path):
    """The driver's end of a worker's connection, its release line, and the session."""
    line = ReleaseLine(1)
    ours, theirs = socket.socketpair()
    driver, worker = Connection(ours.detach()), Connection(theirs.detach())
    line.send(driver)
    context = TrainContext(
        world_rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
        experiment_name="run",
    )  # fmt: skip
    start = WorkerStart(
        context=context,
        train_fn=b"",
        backend=None,
        run_dir=StorageDir.from_uri(str(tmp_path)),
        checkpoint=None,
        staging_dir=".staging",
        score_attribute=None,
        release_line=True,
    )
    session = WorkerSession(worker, start, line=receive_line(worker))
    yield driver, line, session
    session._link.close()
    session.end()
    line.close()
    driver.close()
    worker.close()


def test_a_report_returns_on_its_steps_signal_and_sent_its_report(ends):
    driver, line, session = ends
    line.release(0)
    session.report({"loss": 0.5})
    line.release(1)
    session.report({"loss": 0.25})
    reports = FrameReader(driver).available()
    assert [(r.step, r.metrics) for r in reports if isinstance(r, Report)] == [
        (0, {"loss": 0.5}),
        (1, {"loss": 0.25}),
    ]


def test_a_notice_read_with_an_earlier_steps_release_shows_from_its_own_step(ends):
    # A worker slower than the others takes step 0's release only after the driver told
    # every worker of a preemption that shows from step 1: it reads both at once.
    driver, line, session = ends
    info = PreemptionInfo(deadline_ms=1_000, reason="SIGTERM")
    line.release(0)
    send_frame(driver, pickle.dumps(Preempted(info, from_step=1)))
    session.report({"loss": 0.5})
    assert session.get_preemption_info() is None  # as on the workers that returned sooner
    line.release(1)
    session.report({"loss": 0.25})
    assert session.get_preemption_info() == info


def test_a_commit_never_ends_a_step_on_the_line(ends, tmp_path):
    # On the line only the line's signal ends a step. A commit that ended step 1 would let
    # the worker report step 2 and take step 0's signal, still set until the driver's
    # release of step 1 clears it a moment after the commit, as its own release.
    driver, line, session = ends
    line.release(0)
    session.report({"loss": 0.5})
    awaited = session._link.expect("step", 1)  # report(1) with a checkpoint waits for it
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    send_frame(driver, pickle.dumps(CheckpointCommitted(1, checkpoint)))
    session._link.take_arrived()
    assert session.get_checkpoint() == checkpoint  # the commit is taken...
    assert not awaited.done  # ...and the step still waits for the line
    line.release(1)
    session._link.wait(awaited)
    assert awaited.done
