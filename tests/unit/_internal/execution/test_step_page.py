"""The step page: the workers of a local group end a step among themselves, writing its row
as the driver would, unless the step or the driver needs the driver."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from lockstep._internal.execution import step_page
from lockstep._internal.execution.messages import signal_step
from lockstep._internal.execution.step_page import METRICS_MAX, StepPage


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"first": 1, "training_iteration": 1}) + "\n")
    return path


@pytest.fixture
def page():
    page = StepPage.create(2)
    yield page
    page.close()
    for fd in page.fds:
        os.close(fd)


def arrive(page, step, rank, metrics, released, *, needs_driver=False, timestamp=0.0):
    page.arrive(step, rank, metrics, timestamp, needs_driver=needs_driver, release=released.append)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def driver_row(metrics, iteration, timestamp, time_total_s):
    """The row RunRecord writes for a step without a checkpoint."""
    return {
        **metrics,
        "training_iteration": iteration,
        "timestamp": timestamp,
        "time_total_s": time_total_s,
        "checkpoint_dir_name": None,
    }


@pytest.mark.parametrize(
    "metrics",
    [
        {"loss": 0.25, "step": 3},
        {},
        {"nested": {"a": [1, 2.5, None]}, "name": 'naïve "quoted"', "nan": float("nan")},
    ],
)
def test_the_last_rank_writes_the_drivers_row_and_releases(page, rows, metrics):
    page.share_rows(str(rows), iteration_base=1, time_base=100.0 - time.monotonic())
    released: list[int] = []
    arrive(page, 0, 1, {"rank": 1}, released)
    assert released == [] and len(lines(rows)) == 1  # one rank of two: nothing yet
    arrive(page, 0, 0, metrics, released, timestamp=1234.5)
    assert released == [0]
    assert page.released(0) and not page.released(1)
    written = rows.read_text().splitlines()[1]
    row = json.loads(written)
    assert 100.0 <= row["time_total_s"] < 100.0 + 60
    # byte for byte what the driver writes: json.dumps of rank 0's metrics and its columns
    assert written == json.dumps(driver_row(metrics, 2, 1234.5, row["time_total_s"]))


def test_steps_count_on_and_a_checkpoint_or_a_hold_leaves_the_step_to_the_driver(page, rows):
    page.share_rows(str(rows), iteration_base=1, time_base=0.0)
    released: list[int] = []
    for rank in (1, 0):
        arrive(page, 0, rank, {"s": 0}, released)
    arrive(page, 1, 0, {"s": 1}, released)
    arrive(page, 1, 1, {"s": 1}, released, needs_driver=True)  # a checkpoint on rank 1
    assert released == [0] and not page.released(1)
    page.set_released(1)  # the driver wrote its row and released it
    for rank in (0, 1):
        arrive(page, 2, rank, {"s": 2}, released)
    assert released == [0, 2]
    assert page.hold() == 3  # steps 0-2 released: the driver ends step 3 on
    for rank in (0, 1):
        arrive(page, 3, rank, {"s": 3}, released)
    assert released == [0, 2] and page.held and not page.released(3)
    assert [(r["s"], r["training_iteration"]) for r in lines(rows)[1:]] == [(0, 2), (2, 4)]


def test_without_the_rows_path_or_with_metrics_json_cannot_take_the_driver_ends_it(page, rows):
    released: list[int] = []
    for rank in (0, 1):
        arrive(page, 0, rank, {"a": 1}, released)  # the driver has not shared result.json
    page.share_rows(str(rows), iteration_base=1, time_base=0.0)
    page.set_released(0)
    arrive(page, 1, 0, {"tensor": object()}, released)  # not JSON: the driver says why
    arrive(page, 1, 1, {}, released)
    page.set_released(1)
    arrive(page, 2, 0, {"long": "x" * METRICS_MAX}, released)
    arrive(page, 2, 1, {}, released)
    assert released == [] and len(lines(rows)) == 1


def test_a_row_the_file_will_not_take_leaves_the_step_to_the_driver(page, tmp_path):
    page.share_rows(str(tmp_path / "gone" / "result.json"), iteration_base=0, time_base=0.0)
    released: list[int] = []
    for rank in (0, 1):
        arrive(page, 0, rank, {"a": 1}, released)
    assert released == [] and not page.released(0)


def test_a_worker_that_died_holding_the_lock_costs_the_driver_a_bounded_wait(
    page, rows, monkeypatch
):
    """A worker killed while it ends a step leaves the lock taken: its attempt ends, and
    the driver's hold gives up waiting and takes the steps after the one under way."""
    monkeypatch.setattr(step_page, "DRIVER_WAIT_S", 0.05)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker that dies while it holds the page
        page._lock.__enter__()
        os.write(writer, b"x")
        os.kill(os.getpid(), 9)
    os.read(reader, 1)
    os.waitpid(pid, 0)
    os.close(reader)
    os.close(writer)
    page.share_rows(str(rows), iteration_base=1, time_base=0.0)
    assert not page.sharing  # not shared: the driver ends every step
    assert page.hold() == 1 and page.held


WAITS_FOR_THE_LOCK = """
import os, signal, sys
from lockstep._internal.execution.step_page import StepPage

def stop(*_):
    raise SystemExit(7)

signal.signal(signal.SIGTERM, stop)
page = StepPage([int(fd) for fd in sys.argv[1:4]], 2)
os.write(int(sys.argv[4]), b"x")
page._lock.__enter__()
sys.exit(3)  # it took the lock: it should still be held
"""


def _blocked_on_a_futex(pid):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/wchan") as f:
            if "futex" in f.read():
                return True
    return False


def test_a_stop_signal_reaches_a_worker_waiting_for_the_lock(page):
    """A worker blocked on the lock (another holds it) still takes its stop."""
    page._lock.__enter__()  # held here
    reader, writer = os.pipe()
    fds = [*page.fds, writer]
    child = subprocess.Popen(
        [sys.executable, "-c", WAITS_FOR_THE_LOCK, *map(str, fds)], pass_fds=fds
    )
    os.close(writer)
    try:
        assert os.read(reader, 1) == b"x"  # its handler is in place: it takes the lock
        assert _blocked_on_a_futex(child.pid)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 7
    finally:
        page._lock.__exit__()
        os.close(reader)
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ranks_arrive_in_any_order_and_exactly_one_ends_each_step(rows):
    """Four ranks, forked, report 200 steps each: every step's row is written once, by
    whichever rank came last, and every rank is released from every step."""
    page = StepPage.create(4)
    page.share_rows(str(rows), iteration_base=1, time_base=0.0)
    line = [os.eventfd(0, os.EFD_NONBLOCK) for _ in range(2)]
    pids = []
    for rank in range(4):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for step in range(200):
                    page.arrive(
                        step,
                        rank,
                        {"step": step},
                        float(step),
                        needs_driver=False,
                        release=lambda k: signal_step(line, k),
                    )
                    poll = select.poll()
                    poll.register(line[step % 2], select.POLLIN)
                    assert poll.poll(10_000), f"rank {rank} never released from {step}"
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    page.close()
    for fd in (*page.fds, *line):
        os.close(fd)
    assert codes == [0, 0, 0, 0]
    written = lines(rows)[1:]
    assert [(r["step"], r["training_iteration"]) for r in written] == [
        (k, k + 2) for k in range(200)
    ]
