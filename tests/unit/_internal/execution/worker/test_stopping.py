"""A stop (SIGTERM) ends a worker's code where an exception cuts no clean-up short.

Each case runs in a fresh interpreter with the worker's handler installed, as a worker
process has it, and prints what happened."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.processes

PRELUDE = """
import os, signal, sys, time
from lockstep._internal.execution.worker import stopping

signal.signal(signal.SIGTERM, stopping.on_sigterm)

def stop():
    os.kill(os.getpid(), signal.SIGTERM)

def wait_for_driver(seconds, stopped_meanwhile=False):
    main = stopping.begin_wait()
    try:
        if stopped_meanwhile:
            stop()
        time.sleep(seconds)
    finally:
        if main:
            stopping.end_wait()
"""


def run(body: str) -> list[str]:
    script = PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_stop_ends_a_wait_for_the_driver_at_once():
    assert run(
        """
        start = time.monotonic()
        try:
            wait_for_driver(30, stopped_meanwhile=True)
        except stopping.WorkerStopped:
            print("stopped", time.monotonic() - start < 5)
        """
    ) == ["stopped", "True"]


def test_a_clean_up_under_way_finishes_and_the_next_wait_ends_the_code():
    assert run(
        """
        steps = []
        try:
            try:
                pass
            finally:  # a with block's exit: the stop comes in the middle of it
                stop()
                time.sleep(0.02)
                steps.append("cleaned")
            steps.append("next step")
            wait_for_driver(30)
            steps.append("not stopped")
        except stopping.WorkerStopped:
            steps.append("stopped")
        print(*steps)
        """
    ) == ["cleaned", "next", "step", "stopped"]


def test_an_exception_unwinding_the_code_is_not_cut_short():
    assert run(
        """
        try:
            try:
                raise ValueError("the step failed")
            finally:  # its clean-up outlasts the moment the stop waits for
                stop()
                time.sleep(0.5)
                print("cleaned")
        except ValueError as exc:
            print(type(exc).__name__)
        """
    ) == ["cleaned", "ValueError"]


def test_code_that_never_calls_lockstep_is_ended_after_a_moment():
    assert run(
        """
        start = time.monotonic()
        try:
            stop()
            time.sleep(30)
        except stopping.WorkerStopped:
            waited = time.monotonic() - start
            print("stopped", stopping.UNWIND_AFTER_S / 2 <= waited < 5)
        """
    ) == ["stopped", "True"]


def test_a_second_stop_while_the_first_unwinds_is_not_raised_again():
    assert run(
        """
        try:
            try:
                wait_for_driver(30, stopped_meanwhile=True)
            finally:
                stop()  # a scheduler's SIGTERM, after the driver's
                time.sleep(0.3)
                print("cleaned")
        except stopping.WorkerStopped:
            print("stopped")
        """
    ) == ["cleaned", "stopped"]
