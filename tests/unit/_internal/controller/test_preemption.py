"""Preemption in the controller, driven by a fake worker group: the workers are told, their
next report is committed, then the run stops (the driver's SIGTERM) or restarts counted
against max_preemption_failures (a drained node)."""

from __future__ import annotations

import json
import time
from collections import deque

import pytest

from lockstep._core.config import FailureConfig
from lockstep._core.errors import TrainingFailedError, TrainingInterrupted
from lockstep._core.preemption import PreemptionInfo
from lockstep._internal.controller.controller import Stopped

from .fake_group import FakeWorkerGroup, fake_controller
from .test_controller import report, returned


class DrainingGroup(FakeWorkerGroup):
    """A group whose node is drained at its ``drain_at``-th poll (None: never)."""

    def __init__(self, scripts, log, drain_at):
        super().__init__(scripts, log)
        self._drain_at = drain_at
        self._polled = 0

    def poll(self, timeout):
        self._polled += 1
        return super().poll(timeout)

    def preemption_notice(self):
        if self._drain_at is None or self._polled < self._drain_at:
            return None
        return PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"n1": [1]}, reason="x")


def make(tmp_path, scripts, *, drains=(), **failure):
    log: list[str] = []
    scripts, drains = deque(scripts), deque(drains)

    def make_group():
        return DrainingGroup(scripts, log, drains.popleft() if drains else None)

    controller, run_dir = fake_controller(
        tmp_path, make_group, failure_config=FailureConfig(**failure)
    )
    return controller, log, run_dir


def both(step, checkpointed=False):
    return [report(0, step, checkpointed), report(1, step, checkpointed)]


def test_sigterm_tells_the_workers_commits_their_next_report_then_stops(tmp_path):
    script = [both(0), both(1), both(2, checkpointed=True), both(3)]
    controller, log, run_dir = make(tmp_path, [script])
    controller.step()  # started
    controller.step()  # step 0 recorded
    controller.request_preemption("SIGTERM")  # what the signal handler does
    with pytest.raises(TrainingInterrupted) as raised:
        controller.run()
    # told before step 1 was released: they see it from step 1's return, report step 2
    # (a checkpoint here), and the run stops once that is committed, before step 3
    assert log[1] == "preempted SIGTERM"
    assert controller.state == Stopped("SIGTERM")
    assert raised.value.latest_checkpoint == "checkpoint_000000"
    assert raised.value.training_iteration == 3
    state = json.loads(run_dir.read_text("run_state.json"))
    assert (state["status"], state["num_failures"], state["num_preemptions"]) == (
        "interrupted",
        0,
        0,
    )


def test_sigterm_stops_at_the_deadline_when_the_workers_never_report_again(tmp_path):
    controller, log, _ = make(tmp_path, [[both(0)]], preemption_deadline_s=0.01)
    controller.step()
    controller.step()
    controller.request_preemption("SIGTERM")
    start = time.monotonic()
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM at iteration 1"):
        controller.run()
    assert time.monotonic() - start < 5  # not the default 30 s
    assert "preempted SIGTERM" in log


def test_a_workers_return_during_the_drain_finishes_the_run(tmp_path):
    script = [both(0), [returned(0, 1, "done"), returned(1, 1)]]
    controller, _log, _ = make(tmp_path, [script])
    controller.step()
    controller.request_preemption("SIGTERM")
    assert controller.run().return_value == "done"  # a run that returns cleanly finishes


def test_a_drained_node_restarts_the_run_counted_apart_from_failures(tmp_path):
    first = [both(0), both(1, checkpointed=True), both(2), both(3)]
    second = [both(0), [returned(0, 1, "ok"), returned(1, 1)]]
    controller, log, run_dir = make(tmp_path, [first, second], drains=[1], max_failures=0)
    result = controller.run()  # max_failures=0, yet it restarted
    assert result.return_value == "ok"
    assert "preempted x" in log
    assert [line for line in log if line.startswith("start")][1].endswith("ckpt=checkpoint_000000")
    state = json.loads(run_dir.read_text("run_state.json"))
    assert (state["num_failures"], state["num_preemptions"]) == (0, 1)


def test_max_preemption_failures_is_its_own_budget(tmp_path):
    first = [both(0), both(1), both(2)]
    controller, _log, _ = make(tmp_path, [first], drains=[1], max_preemption_failures=0)
    with pytest.raises(TrainingFailedError, match="rank 1 was preempted: n1 node drained"):
        controller.run()


def test_sigterm_while_a_node_drains_stops_the_run(tmp_path):
    first = [both(0), both(1), both(2), both(3)]
    controller, log, _ = make(tmp_path, [first], drains=[1])
    for _ in range(3):  # started, step 0 recorded, the node drain seen: workers told
        controller.step()
    assert "preempted x" in log
    controller.request_preemption("SIGTERM")
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM"):
        controller.run()
    assert log.count("preempted SIGTERM") == 1
