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


def test_a_stop_that_waits_for_a_clean_up_lands_just_past_it(tmp_path):
    # A process whose only SIGTERM lands in a with block's exit (0.3 s long): the stop is
    # taken after the exit, where the process sleeps on, signalled again by its own thread.
    marks = tmp_path / "marks"
    script = f"""
import os, signal, sys, time
from lockstep._internal.execution.worker import stopping
stopping.install()
stopping.begin_run()
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
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert marks.read_text() == "exited stopped"


def test_the_thread_that_signals_again_takes_no_signal():
    # (a signal it took would not reach the thread meant for it: the stack signal's, say)
    script = """
import os
from lockstep._internal.execution.worker import stopping
before = set(os.listdir("/proc/self/task"))
stopping.install()
(task,) = set(os.listdir("/proc/self/task")) - before
status = open(f"/proc/self/task/{task}/status").read()
print(int(status.split("SigBlk:")[1].split()[0], 16))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    blocked = int(done.stdout)
    for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        assert blocked & (1 << (signum - 1)), signum
