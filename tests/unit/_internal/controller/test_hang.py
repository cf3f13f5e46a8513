"""The hang watchdog: reading faulthandler's stacks, naming the stuck rank, and the
controller's HANG failure (a fake worker group, a fake clock)."""

from __future__ import annotations

import faulthandler
import os
import sysconfig
import tempfile

import pytest

from lockstep._core.errors import TrainingFailedError
from lockstep._internal.controller import hang
from lockstep._internal.controller.controller import Errored, Restarting
from lockstep._internal.controller.hang import (
    Frame,
    Hang,
    HangPolicy,
    RankState,
    hang_failure,
    innermost_user_frame,
    main_frames,
    parse_stacks,
    waiting_in,
)
from lockstep._internal.execution.messages import Heartbeat

from .fake_group import FakeWorkerGroup
from .test_controller import make_controller, report

LOCKSTEP = os.path.dirname(hang.__file__).rsplit(os.sep, 2)[0]
STDLIB = sysconfig.get_paths()["stdlib"]
SITE = sysconfig.get_paths()["purelib"]


def dump(main: str, *threads: tuple[str, list[Frame]]) -> str:
    """A worker's stack file as faulthandler writes it, after the worker's first line."""
    lines = [f"main thread {main}"]
    for thread_id, frames in threads:
        lines.append(f"Thread {thread_id} (most recent call first):")
        lines += [f'  File "{f.filename}", line {f.lineno} in {f.function}' for f in frames]
        lines.append("")
    return "\n".join(lines)


USER = Frame("/home/me/train.py", 31, "stuck_here")
LOOP = Frame("/home/me/train.py", 40, "train_func")
WAIT = Frame(f"{STDLIB}/threading.py", 327, "wait")
REPORT = [
    WAIT,
    Frame(f"{LOCKSTEP}/_internal/execution/worker/session.py", 201, "_exchange"),
    Frame(f"{LOCKSTEP}/_internal/execution/worker/session.py", 128, "report"),
    Frame(f"{LOCKSTEP}/train/_session.py", 82, "report"),
    LOOP,
    Frame(f"{LOCKSTEP}/_internal/execution/worker/main.py", 114, "_run_function"),
]
ALL_REDUCE = [
    Frame(f"{SITE}/torch/distributed/distributed_c10d.py", 2050, "all_reduce"),
    Frame(f"{SITE}/torch/distributed/c10d_logger.py", 72, "wrapper"),
    Frame("/home/me/train.py", 12, "train_func"),
]


def test_a_real_faulthandler_dump_is_read():
    with tempfile.TemporaryFile("w+") as f:
        import threading

        f.write(f"main thread 0x{threading.get_ident():016x}\n")
        f.flush()
        faulthandler.dump_traceback(f, all_threads=True)
        f.seek(0)
        text = f.read()
    main, threads = parse_stacks(text)
    assert main in threads
    frames = main_frames(text)
    assert frames[0].function == "test_a_real_faulthandler_dump_is_read"
    assert frames[0].filename == __file__


def test_the_main_thread_is_the_training_function_not_the_thread_signalled():
    reader = [Frame(f"{STDLIB}/multiprocessing/connection.py", 395, "_recv")]
    text = dump("0x02", ("0x01", reader), ("0x02", [USER, LOOP]))
    assert main_frames(text) == [USER, LOOP]


def test_the_innermost_user_frame_skips_lockstep_the_stdlib_and_libraries():
    assert innermost_user_frame([WAIT, USER, LOOP]) == USER
    assert innermost_user_frame(REPORT) == LOOP
    assert innermost_user_frame(ALL_REDUCE) == ALL_REDUCE[2]
    only_libraries = ALL_REDUCE[:2]
    assert innermost_user_frame(only_libraries) == only_libraries[0]
    assert innermost_user_frame([]) is None


def test_packages_in_any_site_directory_are_libraries():
    # torch installed with `pip install --user`, or in a virtualenv's base: not the user's
    import site

    for directory in (site.getusersitepackages(), *site.getsitepackages()):
        synchronize = Frame(f"{directory}/torch/cuda/__init__.py", 1085, "synchronize")
        assert innermost_user_frame([synchronize, USER, LOOP]) == USER


def test_lockstep_testing_faults_count_as_user_code():
    fault = Frame(f"{LOCKSTEP}/testing/_faults.py", 60, "fire_if_due")
    assert innermost_user_frame([WAIT, fault, *REPORT[1:]]) == fault


def test_where_a_rank_waits():
    assert waiting_in(REPORT) == "report()"
    assert waiting_in(ALL_REDUCE) == "a collective"
    lockstep_barrier = [
        WAIT,
        Frame(f"{LOCKSTEP}/_internal/execution/worker/session.py", 9, "_collective"),
    ]
    assert waiting_in(lockstep_barrier) == "a collective"
    xgboost = [Frame(f"{SITE}/xgboost/core.py", 2100, "update"), LOOP]
    assert waiting_in(xgboost) == "a collective"
    assert waiting_in([WAIT, USER, LOOP]) is None
    # a user's callback called by xgboost is the user's code, not xgboost's all-reduce
    callback = [WAIT, USER, Frame(f"{SITE}/xgboost/callback.py", 268, "after_iteration"), LOOP]
    assert waiting_in(callback) is None
    tensorflow = [
        Frame(f"{SITE}/tensorflow/python/eager/execute.py", 53, "quick_execute"),
        Frame(f"{SITE}/tensorflow/python/distribute/cross_device_ops.py", 400, "reduce"),
        LOOP,
    ]
    assert waiting_in(tensorflow) == "a collective"
    numpy_in_user_code = [Frame(f"{SITE}/numpy/core/fromnumeric.py", 86, "sum"), LOOP]
    assert waiting_in(numpy_in_user_code) is None


def test_the_rank_not_waiting_is_the_culprit():
    ranks = {
        0: RankState(pid=100, num_reports=3, stacks=dump("0x1", ("0x1", REPORT)), in_report=True),
        1: RankState(pid=101, num_reports=2, stacks=dump("0x1", ("0x1", [WAIT, USER, LOOP]))),
        2: RankState(pid=102, num_reports=2, stacks=dump("0x1", ("0x1", ALL_REDUCE))),
    }
    failure = hang_failure(ranks, idle_s=60.0, waiting_step=3)
    assert (failure.rank, failure.pid, failure.kind) == (1, 101, "hang")
    assert failure.summary == (
        "rank 1 (pid 101) made no progress for 60 s, in stuck_here() at train.py:31; "
        "rank 0 waiting in report() for step 3; rank 2 waiting in a collective"
    )
    # the user's view of the stack: outermost first, lockstep's frames left out
    lines = failure.traceback.splitlines()
    assert lines[-2:] == [
        '  File "/home/me/train.py", line 31, in stuck_here',
        f'  File "{STDLIB}/threading.py", line 327, in wait',
    ]
    assert LOCKSTEP not in failure.traceback
    assert failure.full_traceback == ranks[1].stacks


def test_when_every_rank_waits_the_one_with_fewest_reports_is_named():
    ranks = {
        0: RankState(pid=100, num_reports=3, stacks=dump("0x1", ("0x1", REPORT)), in_report=True),
        1: RankState(pid=101, num_reports=2, stacks=dump("0x1", ("0x1", ALL_REDUCE))),
    }
    failure = hang_failure(ranks, idle_s=1.5, waiting_step=3)
    assert failure.rank == 1
    assert failure.summary.startswith(
        "rank 1 (pid 101) made no progress for 1.5 s, in train_func() at train.py:12; "
        "rank 0 waiting in report() for step 3"
    )


def test_a_rank_that_did_not_answer_is_still_named():
    ranks = {0: RankState(pid=None, num_reports=0, stacks="")}
    failure = hang_failure(ranks, idle_s=5.0, waiting_step=1)
    assert failure.summary == (
        "rank 0 (pid None) made no progress for 5.0 s (its stack could not be read)"
    )


def test_the_watch_is_off_without_a_timeout():
    now = [0.0]
    policy = HangPolicy(2.0, clock=lambda: now[0])
    now[0] = 2.5
    assert policy.decide() == Hang(2.5)
    policy.progress()
    assert policy.decide() is None
    assert HangPolicy(None, clock=lambda: now[0] + 1e9).decide() is None


class StuckGroup(FakeWorkerGroup):
    """Ranks that stop making progress; their stacks as the process group returns them."""

    def collect_stacks(self, timeout: float = 2.0):
        self.log.append("collect_stacks")
        return {
            0: (100, dump("0x1", ("0x1", REPORT))),
            1: (101, dump("0x1", ("0x1", [WAIT, USER, LOOP]))),
        }


@pytest.mark.parametrize("max_failures", [0, 1])
def test_the_controller_treats_a_hang_as_a_worker_failure(tmp_path, max_failures):
    now = [0.0]
    started = [Heartbeat(0, started=True), Heartbeat(1, started=True)]
    script = [[*started, report(0, 0), report(1, 0)], [report(0, 1)]]  # then nothing, forever
    controller, log, run_dir = make_controller(
        tmp_path,
        [script, []],
        max_failures=max_failures,
        hang_timeout_s=60.0,
        group_class=StuckGroup,
    )
    controller._hang = HangPolicy(60.0, clock=lambda: now[0])
    for _ in range(5):
        controller.step()  # started, both reports, then quiet polls
    assert "collect_stacks" not in log
    now[0] = 61.0
    controller.step()
    assert log.count("collect_stacks") == 1
    stacks = run_dir.join("errors", "attempt_0.txt")
    with open(stacks) as f:
        text = f.read()
    assert text.startswith("rank 1 (pid 101) made no progress for 61 s, in stuck_here() at")
    assert "=== rank 0 (pid 100), 2 reports" in text and "=== rank 1 (pid 101), 1 reports" in text
    if max_failures:
        assert isinstance(controller.state, Restarting)
        assert controller.state.failures[1].kind == "hang"
        return
    assert isinstance(controller.state, Errored)
    error = controller.state.error
    assert isinstance(error, TrainingFailedError)
    assert str(error).startswith(
        "Training failed: rank 1 (pid 101) made no progress for 61 s, in stuck_here() at "
        "train.py:31; rank 0 waiting in report() for step 2"
    )


def test_heartbeats_and_reports_are_progress(tmp_path):
    now = [0.0]
    started = [Heartbeat(0, started=True), Heartbeat(1, started=True)]
    script = [started, [Heartbeat(1)], [], [report(0, 0)], []]
    controller, log, _ = make_controller(
        tmp_path, [script], hang_timeout_s=1.0, group_class=StuckGroup
    )
    controller._hang = HangPolicy(1.0, clock=lambda: now[0])
    controller.step()  # started
    for _ in range(len(script)):
        now[0] += 0.6
        controller.step()
    assert "collect_stacks" not in log
    now[0] += 0.6
    controller.step()
    assert "collect_stacks" in log


def test_the_watch_waits_for_every_rank_to_start_its_function(tmp_path):
    now = [0.0]
    script = [[Heartbeat(0, started=True)], [], []]  # rank 1 still sets up its backend
    controller, log, _ = make_controller(
        tmp_path, [script], hang_timeout_s=1.0, group_class=StuckGroup
    )
    controller._hang = HangPolicy(1.0, clock=lambda: now[0])
    controller.step()
    for _ in range(len(script)):
        now[0] += 5.0
        controller.step()
    assert "collect_stacks" not in log
