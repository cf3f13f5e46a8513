import pickle
import signal

from lockstep._core.errors import TrainingFailedError, WorkerFailure


def _failure(rank, time, **kw):
    return WorkerFailure(
        rank=rank, pid=100 + rank, kind="exception", summary=f"rank {rank} broke", time=time, **kw
    )


def test_root_cause_is_the_first_failure_by_time():
    failures = {0: _failure(0, 20.0), 1: _failure(1, 10.0, traceback="Traceback...\nValueError: x")}
    error = TrainingFailedError.from_failures(failures, attempts=3)
    assert error.root_cause.rank == 1
    message = str(error)
    assert message.startswith("Training failed: rank 1 broke (after 2 restarts)")
    assert "ValueError: x" in message and "Other workers:\n  rank 0 broke" in message


def test_describe_exit():
    assert WorkerFailure.describe_exit(1, 4242, -signal.SIGKILL) == (
        "signal",
        "rank 1 (pid 4242) was killed by SIGKILL",
    )
    kind, summary = WorkerFailure.describe_exit(0, 7, 3)
    assert kind == "exit" and "exited with code 3" in summary


def test_error_pickles():
    error = TrainingFailedError.from_failures({0: _failure(0, 1.0)}, attempts=1)
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.root_cause == error.root_cause


def test_a_peer_closed_connection_is_a_consequence_of_the_death_seen_later():
    gone = WorkerFailure(
        rank=1, pid=8, kind="signal", summary="rank 1 (pid 8) was killed by SIGKILL", time=5.0
    )
    closed = _failure(0, 4.0, traceback="Traceback...\nRuntimeError: Connection closed by peer")
    timed_out = WorkerFailure(
        rank=2,
        pid=9,
        kind="exception",
        summary="rank 2 (pid 9) raised DistBackendError: Timed out waiting 1800000ms",
        time=3.0,
    )
    assert closed.is_consequence and timed_out.is_consequence and not gone.is_consequence
    error = TrainingFailedError.from_failures({0: closed, 1: gone, 2: timed_out}, attempts=1)
    assert error.root_cause is gone
    message = str(error)
    assert message.startswith("Training failed: rank 1 (pid 8) was killed by SIGKILL")
    assert "Consequences on other workers:\n  rank 0 broke\n  rank 2 (pid 9)" in message
    # only consequences: the earliest of them
    assert TrainingFailedError.from_failures({0: closed, 2: timed_out}, attempts=1).root_cause is (
        timed_out
    )
