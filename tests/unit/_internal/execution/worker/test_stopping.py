"""A worker's stop: taken once, never in the middle of a clean-up, signalled again until
the worker ends."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from lockstep._internal.execution.worker import stopping
from lockstep._internal.execution.worker.stopping import WorkerStopped, stop_handler


@pytest.fixture(autouse=True)
def fresh_run():
    stopping.begin_run()
    yield
    stopping.end_run()


def here():
    return sys._getframe(1)


class Exits:
    """A ``with`` block that calls the handler as it exits, as a signal landing there."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop_handler(signal.SIGTERM, here())


def test_a_stop_is_raised_in_the_users_code():
    with pytest.raises(WorkerStopped):
        stop_handler(signal.SIGTERM, here())


def test_a_stop_waits_while_a_with_block_exits_and_is_taken_after():
    with Exits():
        pass  # the exit runs whole: no WorkerStopped out of it
    with pytest.raises(WorkerStopped):
        stop_handler(signal.SIGTERM, here())


def test_a_stop_waits_while_an_exception_unwinds():
    with pytest.raises(ValueError):
        try:
            raise ValueError("the function failed")
        finally:
            stop_handler(signal.SIGTERM, here())  # its clean-up is not cut short


def test_a_stop_is_taken_once():
    with pytest.raises(WorkerStopped):
        stop_handler(signal.SIGTERM, here())
    stop_handler(signal.SIGTERM, here())  # a second one: the first is unwinding the code


def test_no_stop_is_taken_once_the_function_is_over():
    stopping.end_run()
    stop_handler(signal.SIGTERM, here())


def test_a_worker_that_waits_in_a_clean_up_is_signalled_until_it_ends(tmp_path):
    # A process whose first SIGTERM lands in a with block's exit (0.3 s long): the stop
    # is taken by a later signal, after the exit, where the process sleeps on.
    marks = tmp_path / "marks"
    script = f"""
import os, signal, sys, time
from lockstep._internal.execution.worker import stopping
signal.signal(signal.SIGTERM, stopping.stop_handler)
class Slow:
    def __enter__(self): return self
    def __exit__(self, *exc):
        print("exiting", flush=True)
        time.sleep(0.3)
        open({str(marks)!r}, "a").write("exited ")
try:
    with Slow():
        pass
    time.sleep(60)
except stopping.WorkerStopped:
    open({str(marks)!r}, "a").write("stopped")
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "exiting\n"
    proc.send_signal(signal.SIGTERM)
    stopping.wait_stopping([proc], grace_s=30.0)
    proc.kill()  # (a no-op unless the stop was never taken)
    assert proc.wait() == 0
    assert marks.read_text() == "exited stopped"
