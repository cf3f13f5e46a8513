"""The controller carrying out an elastic run's decisions, with a fake worker group."""

from __future__ import annotations

import dataclasses
from collections import deque

import pytest

from lockstep._core.config import FailureConfig, ScalingConfig
from lockstep._core.errors import TrainingFailedError
from lockstep._internal.controller.controller import (
    Resizing,
    Restarting,
    Running,
    Scheduling,
    Starting,
)
from lockstep._internal.controller.scaling_policy import ElasticRun, ElasticScalingPolicy
from lockstep._internal.execution.capacity import CapacityChanged

from .fake_group import FakeWorkerGroup, fake_controller
from .test_controller import failed, report, returned


class Cluster:
    """CPUs per node, changed by the test between steps."""

    def __init__(self, *cpus: int) -> None:
        self.cpus = list(cpus)
        self.probes = 0

    def capacity(self, group):
        self.probes += 1
        return [{"CPU": float(n)} for n in self.cpus]


def make(tmp_path, scripts, cluster, *, num_workers=(1, 4), max_failures=0, start_error=None):
    log: list[str] = []
    scripts = deque(scripts)
    groups: list[FakeWorkerGroup] = []

    def make_group():
        group = FakeWorkerGroup(scripts, log)
        if start_error is not None and not groups:
            group.start = _raising(start_error)  # type: ignore[method-assign]
        groups.append(group)
        return group

    def resize_spec(spec, n):
        log.append(f"split for {n}")
        return dataclasses.replace(spec, num_workers=n, datasets=[{"rank": r} for r in range(n)])

    scaling = ScalingConfig(num_workers=num_workers, elastic_resize_monitor_interval_s=0.0)
    controller, _ = fake_controller(
        tmp_path,
        make_group,
        num_workers=scaling.min_workers,
        failure_config=FailureConfig(max_failures=max_failures),
        elastic=ElasticRun(
            policy=ElasticScalingPolicy(scaling),
            capacity=cluster.capacity,
            resize_spec=resize_spec,
        ),
    )
    return controller, log, groups


def _raising(error):
    def start(spec):
        raise error

    return start


def test_starts_with_what_fits_and_grows_when_room_comes_without_a_failure(tmp_path):
    cluster = Cluster(2)
    first = [[report(0, 0, True), report(1, 0)], [], []]
    second = [[returned(r, 0) for r in range(4)]]
    controller, log, groups = make(tmp_path, [first, second], cluster)
    controller.step()  # start
    assert groups[0].spec.num_workers == 2
    assert groups[0].spec.datasets == [{"rank": 0}, {"rank": 1}]
    controller.step()  # step 0 committed, nothing changed
    assert isinstance(controller.state, Running) and controller.state.attempt == 0
    cluster.cpus = [2, 2]
    controller.step()
    assert controller.state == Resizing(attempt=0, num_workers=4)
    controller.step()
    assert controller.state == Starting(1)
    result = controller.run()  # max_failures=0: a resize is no failure
    assert groups[1].spec.num_workers == 4
    assert len(groups[1].spec.datasets) == 4
    assert log == [
        "split for 2",
        "start attempt_000000 ckpt=None",
        "notify step=0 checkpoint_000000",
        "shutdown",
        "split for 4",
        "start attempt_000001 ckpt=checkpoint_000000",
        "shutdown",
    ]
    assert result.checkpoint is not None
    assert controller._run_record.state.num_failures == 0


def test_a_lost_node_restarts_with_fewer_workers_and_counts_as_a_failure(tmp_path):
    cluster = Cluster(2, 2)
    first = [[report(r, 0, r == 0) for r in range(4)], [failed(3, time=5.0)]]
    second = [[returned(0, 0), returned(1, 0)]]
    controller, log, groups = make(tmp_path, [first, second], cluster, max_failures=1)
    controller.step()
    controller.step()
    cluster.cpus = [2]  # the node of ranks 2 and 3 is gone
    controller.step()
    assert isinstance(controller.state, Restarting)
    controller.run()
    assert [g.spec.num_workers for g in groups] == [4, 2]
    assert log[-3:] == ["split for 2", "start attempt_000001 ckpt=checkpoint_000000", "shutdown"]
    assert controller._run_record.state.num_failures == 1


def test_the_failure_budget_is_not_spent_by_resizes(tmp_path):
    cluster = Cluster(1)
    grow = [[report(0, 0, True)], []]
    fail = [[failed(0, time=1.0), failed(1, time=2.0)]]
    controller, _log, _groups = make(tmp_path, [grow, fail], cluster, max_failures=0)
    controller.step()
    controller.step()
    cluster.cpus = [2]
    controller.step()
    assert isinstance(controller.state, Resizing)
    with pytest.raises(TrainingFailedError, match="rank 0 raised"):
        controller.run()  # attempt 1 is the first failure: max_failures=0 raises it


def test_while_fewer_than_min_fit_the_run_waits(tmp_path, monkeypatch):
    from lockstep._internal.controller import controller as module

    cluster = Cluster(1)
    script = [[returned(r, 0) for r in range(2)]]
    controller, _log, groups = make(tmp_path, [script], cluster, num_workers=(2, 2))
    waits = []
    monkeypatch.setattr(module.time, "sleep", waits.append)
    controller.step()
    controller.step()
    state = controller.state
    assert isinstance(state, Scheduling) and state.attempt == 0 and not groups
    assert waits == []  # a step never sleeps: the run loop waits for the retry time
    cluster.cpus = [1, 1]
    controller.run()
    assert groups[0].spec.num_workers == 2
    assert len(waits) == 1 and 0 < waits[0] <= module.SCHEDULING_WAIT_S


def test_a_node_leaving_while_placing_sizes_again_without_a_failure(tmp_path):
    cluster = Cluster(2)
    script = [[returned(0, 0)]]
    controller, log, groups = make(
        tmp_path, [[], script], cluster, start_error=CapacityChanged("now holds 1 of 2")
    )
    controller.step()
    assert controller.state == Starting(0)  # no failure: decide again
    cluster.cpus = [1]
    controller.run()
    assert groups[1].spec.num_workers == 1
    assert log[0] == "split for 2" and log[2] == "split for 1"
    assert controller._run_record.state.num_failures == 0
