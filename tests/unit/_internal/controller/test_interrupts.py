"""Ctrl-C's handler during a run: the first press asks to stop, the second interrupts."""

import os
import signal

import pytest

from lockstep._internal.controller.interrupts import CTRL_C, stop_on_sigint


def test_first_press_asks_to_stop_second_interrupts_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    asked: list[str] = []
    with stop_on_sigint(asked.append):
        os.kill(os.getpid(), signal.SIGINT)  # delivered to this thread before kill returns
        assert asked == [CTRL_C]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_program_that_ignores_ctrl_c_keeps_ignoring_it():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asked: list[str] = []
        with stop_on_sigint(asked.append):
            os.kill(os.getpid(), signal.SIGINT)
        assert asked == []
    finally:
        signal.signal(signal.SIGINT, before)
