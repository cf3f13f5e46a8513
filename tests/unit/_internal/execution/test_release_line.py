"""The release line: one write ends a step's report() on every local worker."""

from __future__ import annotations

import os
import socket
from multiprocessing.connection import Connection

import pytest

from lockstep._internal.execution.messages import (
    LineWaiter,
    ReleaseLine,
    receive_line,
    send_frame,
)


@pytest.fixture
def line():
    line = ReleaseLine(2)
    yield line
    line.close()


@pytest.fixture
def workers(line):
    """Two workers' ends of their connections, each with its waiter on ``line``."""
    made = []
    for _ in range(2):
        ours, theirs = socket.socketpair()
        driver, worker = Connection(ours.detach()), Connection(theirs.detach())
        driver.send("start")
        line.send(driver)
        assert worker.recv() == "start"  # the start message first, untouched
        fds = receive_line(worker)
        for fd in fds[2:]:  # the step page and the bell (see test_step_page.py)
            os.close(fd)
        made.append((driver, worker, LineWaiter(fds[:2], worker.fileno())))
    yield made
    for driver, worker, waiter in made:
        waiter.close()
        driver.close()
        worker.close()


def test_one_release_ends_the_step_on_every_worker_and_never_the_next(line, workers):
    line.release(0)
    for _, _, waiter in workers:
        assert waiter.wait(0, timeout=0) == (True, False)
        assert waiter.wait(1, timeout=0) == (False, False)  # step 1 is still awaited
    line.release(1)
    for _, _, waiter in workers:
        assert waiter.wait(1, timeout=0) == (True, False)
        # step 0's signal was cleared: a worker waiting for step 2 waits
        assert waiter.wait(2, timeout=0) == (False, False)
    line.release(2)
    assert [w.wait(2, timeout=0) for _, _, w in workers] == [(True, False)] * 2


def test_a_message_written_before_the_release_is_seen_with_it(line, workers):
    driver, worker, waiter = workers[0]
    assert waiter.wait(0, timeout=0) == (False, False)
    send_frame(driver, b"x" * 10)
    assert waiter.wait(0, timeout=0) == (False, True)
    line.release(0)
    assert waiter.wait(0, timeout=0) == (True, True)
    assert worker.recv_bytes() == b"x" * 10


def test_a_worker_gets_the_drivers_own_line():
    line = ReleaseLine(1)
    ours, theirs = socket.socketpair()
    driver, worker = Connection(ours.detach()), Connection(theirs.detach())
    try:
        line.send(driver)
        fds = receive_line(worker)
        line.release(0)
        assert os.eventfd_read(fds[0]) == 1
        assert all(os.get_inheritable(fd) is False for fd in fds)
    finally:
        for fd in fds:
            os.close(fd)
        line.close()
        driver.close()
        worker.close()


def test_a_driver_gone_before_it_sent_the_line_is_an_end_of_file():
    ours, theirs = socket.socketpair()
    ours.close()
    worker = Connection(theirs.detach())
    with pytest.raises(EOFError, match="release line"):
        receive_line(worker)
    worker.close()
