"""The scaling policies: capacity in, a size decision out (Ray V2's cases)."""

from __future__ import annotations

import pytest

from lockstep._core.config import ScalingConfig
from lockstep._internal.controller.scaling_policy import (
    ElasticScalingPolicy,
    FixedScalingPolicy,
    NoopDecision,
    ResizeDecision,
    WorkerGroupState,
    create_scaling_policy,
)

PER_WORKER = {"CPU": 8, "GPU": 1}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elastic(low=4, high=64, interval=60.0, clock=None, **kwargs):
    config = ScalingConfig(
        num_workers=(low, high),
        resources_per_worker=kwargs.pop("resources", PER_WORKER),
        use_gpu=kwargs.pop("use_gpu", True),
        elastic_resize_monitor_interval_s=interval,
        **kwargs,
    )
    return ElasticScalingPolicy(config, clock=clock or Clock())


def nodes(count, resources=None):
    return lambda: [dict(resources or PER_WORKER)] * count


def test_the_policy_matches_the_config():
    assert isinstance(
        create_scaling_policy(ScalingConfig(num_workers=(1, 2))), ElasticScalingPolicy
    )
    fixed = create_scaling_policy(ScalingConfig(num_workers=2))
    assert isinstance(fixed, FixedScalingPolicy) and not fixed.supports_elasticity()


def test_a_fixed_size_never_looks_at_the_capacity():
    def capacity():
        raise AssertionError("a fixed run must not probe the cluster")

    policy = FixedScalingPolicy(ScalingConfig(num_workers=3))
    assert policy.make_decision_for_non_running_worker_group(capacity) == ResizeDecision(
        3, {"CPU": 1.0}
    )
    state = WorkerGroupState(num_workers=3, start_time=0.0)
    assert policy.make_decision_for_running_worker_group(state, capacity) == NoopDecision()


def test_a_start_waits_for_min_workers_then_takes_what_fits():
    policy = elastic()
    assert policy.make_decision_for_non_running_worker_group(nodes(0)) == NoopDecision()
    assert policy.make_decision_for_non_running_worker_group(nodes(3)) == NoopDecision()
    decision = policy.make_decision_for_non_running_worker_group(nodes(4))
    assert decision == ResizeDecision(4, {"CPU": 8.0, "GPU": 1.0})
    assert policy.make_decision_for_non_running_worker_group(nodes(100)).num_workers == 64


def test_waiting_says_why_at_most_every_30_s(caplog):
    clock = Clock()
    policy = elastic(clock=clock)
    for _ in range(3):
        policy.make_decision_for_non_running_worker_group(nodes(1))
    clock.now += 30
    policy.make_decision_for_non_running_worker_group(nodes(1))
    waits = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waits) == 2
    assert "holds 1 workers" in waits[0] and "min_workers=4" in waits[0]


def test_a_running_group_resizes_to_what_fits_but_never_below_min():
    policy = elastic(interval=0.0)
    state = WorkerGroupState(num_workers=4, start_time=1000.0)
    assert policy.make_decision_for_running_worker_group(state, nodes(4)) == NoopDecision()
    assert policy.make_decision_for_running_worker_group(state, nodes(3)) == NoopDecision()
    assert policy.make_decision_for_running_worker_group(state, nodes(12)).num_workers == 12
    assert policy.make_decision_for_running_worker_group(state, nodes(100)).num_workers == 64


def test_no_resize_is_considered_before_the_interval_since_the_start():
    clock = Clock()
    policy = elastic(clock=clock)
    probed = []

    def capacity():
        probed.append(clock.now)
        return [PER_WORKER] * 63

    state = WorkerGroupState(num_workers=4, start_time=clock.now)
    clock.now += 30
    assert policy.make_decision_for_running_worker_group(state, capacity) == NoopDecision()
    assert probed == []  # not due: the cluster is not even asked
    clock.now += 30
    assert policy.make_decision_for_running_worker_group(state, capacity).num_workers == 63


def test_a_long_running_group_is_checked_once_per_interval():
    clock = Clock()
    policy = elastic(clock=clock)
    state = WorkerGroupState(num_workers=4, start_time=clock.now)
    clock.now += 3600
    assert policy.make_decision_for_running_worker_group(state, nodes(4)) == NoopDecision()
    clock.now += 30  # checked 30 s ago: more room is not looked at yet
    assert policy.make_decision_for_running_worker_group(state, nodes(64)) == NoopDecision()
    clock.now += 30
    assert policy.make_decision_for_running_worker_group(state, nodes(64)).num_workers == 64


@pytest.mark.parametrize(
    ("capacity", "expected"),
    [
        ([], 0),
        ([{"CPU": 8, "GPU": 1}], 1),
        ([{"CPU": 16, "GPU": 2}], 2),
        ([{"CPU": 16, "GPU": 1}], 1),
        ([{"CPU": 7, "GPU": 1}] * 2, 0),  # workers do not span nodes
        ([{"CPU": 9, "GPU": 2}] * 8, 8),
        ([{"CPU": 16, "GPU": 2}] * 2, 4),
        ([{"CPU": 16, "GPU": 2}] * 10, 8),  # capped at max_workers
    ],
)
def test_workers_are_counted_node_by_node(capacity, expected):
    policy = elastic(low=1, high=8)
    assert policy.count_possible_workers(capacity) == expected


def test_fractional_and_custom_resources_are_counted():
    policy = elastic(low=1, high=8, resources={"CPU": 0.1, "slot": 1}, use_gpu=False)
    assert policy.count_possible_workers([{"CPU": 1.0, "slot": 3}]) == 3
    assert policy.count_possible_workers([{"CPU": 0.3, "slot": 5}]) == 3  # 0.3 / 0.1
    assert policy.count_possible_workers([{"CPU": 4.0}]) == 0  # no slot on that node


def test_workers_that_need_nothing_fit_up_to_max():
    policy = elastic(low=1, high=4, resources={"CPU": 0}, use_gpu=False)
    assert policy.count_possible_workers([{"CPU": 1}]) == 4


def test_a_cluster_that_cannot_be_asked_now_changes_nothing(caplog):
    def unreachable():
        raise ConnectionError("GCS unavailable")

    policy = elastic(interval=0.0)
    state = WorkerGroupState(num_workers=4, start_time=1000.0)
    assert policy.make_decision_for_running_worker_group(state, unreachable) == NoopDecision()
    assert policy.make_decision_for_non_running_worker_group(unreachable) == NoopDecision()
    assert "GCS unavailable" in caplog.text
