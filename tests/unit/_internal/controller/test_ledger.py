"""The driver's time ledger, on a clock the test moves: every category from known events."""

from __future__ import annotations

import pytest

from lockstep._core.time_ledger import TimeLedger
from lockstep._internal.controller.ledger import (
    DRAINING,
    RECOVERING,
    RUNNING,
    SHUTDOWN,
    Ledger,
)
from lockstep._internal.execution.messages import Report
from lockstep._internal.execution.worker.phases import Phase


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def report(
    rank: int, step: int, *, user: float, data: float = 0.0, persist: float = 0.0, source: str = ""
) -> Report:
    timings = (user, data, persist, source)
    return Report(rank, step, {}, persist > 0, 0.0, timings=timings)


def steps(
    ledger: Ledger,
    clock: Clock,
    count: int,
    *,
    slow: float = 0.0,
    first: int = 0,
    data: float = 0.0,
) -> None:
    """``count`` steps of 2 ranks: rank 0 reports 1 s after the last release (``data`` of
    it waiting for data), rank 1 ``slow`` s later; both are released at once."""
    for step in range(first, first + count):
        clock.now += 1.0
        ledger.on_report(report(0, step, user=1.0, data=data, source="train"), clock.now)
        clock.now += slow
        ledger.on_report(report(1, step, user=1.0 + slow, data=data, source="train"), clock.now)
        ledger.on_step(step, last_rank=1, now=clock.now)


def started(clock: Clock, **kwargs: float) -> Ledger:
    ledger = Ledger(clock=clock, **kwargs)  # type: ignore[arg-type]
    ledger.attempt_starting(2, from_checkpoint=False)
    clock.now += 2.0  # the workers start
    ledger.enter(RUNNING)
    return ledger


def test_a_straggler_makes_the_others_wait_in_the_barrier() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 10, slow=0.5)
    for rank in (0, 1):
        ledger.rank_returned(rank)
    clock.now += 0.25
    ledger.enter(SHUTDOWN)
    clock.now += 0.5
    time = ledger.snapshot()
    assert time.wall == pytest.approx(2.0 + 15.0 + 0.25 + 0.5)
    assert time.starting == pytest.approx(2.0)
    assert time.shutdown == pytest.approx(0.5)
    assert time.per_rank[0].barrier_wait == pytest.approx(5.0)
    assert time.per_rank[1].barrier_wait == pytest.approx(0.0)
    assert time.barrier_wait == pytest.approx(2.5)  # the mean over the ranks
    assert time.training == pytest.approx(15.25 - 2.5)
    assert time.per_rank[1].slowest_steps == 10
    assert time.findings() == [
        "rank 1 was the slowest on 100% of steps; the others waited 28% of the run for it"
    ]
    assert sum(
        time.as_dict()[k] for k in ("starting", "training", "barrier_wait", "shutdown")
    ) == pytest.approx(time.wall)


def test_data_waits_are_counted_and_named() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 4, data=0.4)
    time = ledger.snapshot()
    assert time.data_wait == pytest.approx(1.6)
    assert time.per_rank[1].data_wait == pytest.approx(1.6)
    assert time.data_sources == {"train": pytest.approx(1.6)}
    assert time.findings() == ["waiting for data for train took 40% of each step (1.6s of the run)"]


def test_a_checkpoint_stall_is_the_persisting_and_the_commit() -> None:
    clock = Clock()
    ledger = started(clock)
    clock.now += 3.0
    ledger.on_report(report(0, 0, user=1.0, persist=2.0), clock.now)
    ledger.on_report(report(1, 0, user=1.0, persist=2.0), clock.now)
    ledger.on_step(0, last_rank=1, now=clock.now, commit_s=0.5)
    ledger.checkpoint_committed(0)
    clock.now += 0.5
    for rank in (0, 1):
        ledger.rank_returned(rank)
    time = ledger.snapshot()
    assert time.checkpoint_stall == pytest.approx(2.5)
    assert [r.checkpoint_stall for r in time.per_rank] == [pytest.approx(2.5)] * 2
    assert time.num_checkpoints == 1


def test_a_failure_costs_recovering_then_replays_the_steps_since_the_checkpoint() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 2)
    ledger.checkpoint_committed(1)  # the checkpoint of step 2
    steps(ledger, clock, 3, first=2)  # steps 3-5, lost
    clock.now += 0.7  # step 6 under way when rank 1 dies
    ledger.failed()
    ledger.enter(RECOVERING)
    clock.now += 4.0  # restart
    ledger.attempt_starting(2, from_checkpoint=True)
    clock.now += 1.0
    ledger.enter(RUNNING)
    steps(ledger, clock, 4)  # steps 3-5 again, then step 6
    time = ledger.snapshot()
    assert time.recovering == pytest.approx(5.0)
    assert time.replayed == pytest.approx(3.0)
    assert time.num_failures == 1
    assert time.training == pytest.approx(time.wall - 2.0 - 5.0 - 3.0)
    assert time.goodput == pytest.approx(time.training / time.wall)


def test_a_failure_without_a_checkpoint_replays_everything() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 3)
    ledger.enter(RECOVERING)
    ledger.attempt_starting(2, from_checkpoint=False)
    ledger.enter(RUNNING)
    steps(ledger, clock, 4)
    assert ledger.snapshot().replayed == pytest.approx(3.0)


def test_a_preemption_drain_is_counted_apart_and_its_steps_are_not_twice() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 2)
    ledger.enter(DRAINING)
    steps(ledger, clock, 1, first=2, slow=3.0)  # the last report, during the drain
    clock.now += 1.0
    ledger.enter(SHUTDOWN)
    time = ledger.snapshot()
    assert time.preemption_drain == pytest.approx(5.0)
    assert time.barrier_wait == pytest.approx(0.0)
    assert time.training == pytest.approx(2.0)


def test_reports_before_every_rank_runs_wait_from_when_all_do() -> None:
    clock = Clock()
    ledger = Ledger(clock=clock)
    ledger.attempt_starting(2, from_checkpoint=False)
    clock.now += 1.0
    ledger.on_report(report(0, 0, user=0.5), clock.now)  # rank 1 still starting
    clock.now += 2.0
    ledger.enter(RUNNING)
    clock.now += 0.5
    ledger.on_report(report(1, 0, user=0.5), clock.now)
    ledger.on_step(0, last_rank=1, now=clock.now)
    ledger.rank_returned(0)
    time = ledger.snapshot()
    assert time.starting == pytest.approx(3.0)
    assert time.per_rank[0].barrier_wait == pytest.approx(0.5)


def test_a_later_driver_continues_the_ledger() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 3)
    ledger.checkpoint_committed(0)
    clock.now += 0.5
    ledger.enter(SHUTDOWN)
    first = ledger.snapshot()
    data = ledger.to_json()
    again = Ledger((data["figures"], data["data_sources"]), clock=clock)
    again.attempt_starting(2, from_checkpoint=True)  # from step 1: steps 2 and 3 again
    clock.now += 1.0
    again.enter(RUNNING)
    steps(again, clock, 3)
    time = again.snapshot()
    assert time.wall == pytest.approx(first.wall + 4.0)
    assert time.starting == pytest.approx(first.starting + 1.0)
    assert time.replayed == pytest.approx(2.0)
    assert time.num_steps == 6


def test_the_figures_file_holds_every_step_but_the_ranks_last_wait() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 2, slow=0.25)
    on_disk = TimeLedger.from_hot(list(ledger.current()))
    assert on_disk.barrier_wait == pytest.approx(0.25)  # the run's: both steps
    assert on_disk.per_rank[0].barrier_wait == pytest.approx(0.25)  # the rank's: one
    assert ledger.snapshot().per_rank[0].barrier_wait == pytest.approx(0.5)
    data = ledger.to_json()
    assert TimeLedger.from_hot(data["figures"]).per_rank[0].barrier_wait == pytest.approx(0.5)
    assert TimeLedger.from_json(data) == TimeLedger.from_hot(data["figures"])


def test_the_view_of_another_thread_changes_nothing() -> None:
    clock = Clock()
    ledger = started(clock)
    clock.now += 1.0
    before = list(ledger.values)
    assert ledger.view().wall == pytest.approx(3.0)
    assert list(ledger.values) == before


def test_the_live_goodput_waits_for_a_step() -> None:
    clock = Clock()
    ledger = started(clock)
    assert ledger.goodput() is None
    steps(ledger, clock, 2)
    assert ledger.goodput() == pytest.approx(2.0 / 4.0)


def test_an_attempt_that_ends_stuck_counts_what_each_rank_waited_for() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 1)
    clock.now += 1.0
    ledger.on_report(report(0, 1, user=1.0), clock.now)  # then waits for rank 1
    clock.now += 10.0
    waiting = Phase("data_wait", -1, clock.now - 6.0, data_s=3.0)  # and 3 s before that
    ledger.ranks_at_end({0: None, 1: waiting})
    ledger.enter(SHUTDOWN)
    time = ledger.snapshot()
    assert time.per_rank[0].barrier_wait == pytest.approx(10.0)
    assert time.per_rank[1].data_wait == pytest.approx(9.0)
    assert time.barrier_wait == pytest.approx(5.0) and time.data_wait == pytest.approx(4.5)


def test_a_failure_counts_as_recovering_from_when_it_happened() -> None:
    clock = Clock()
    ledger = started(clock)
    steps(ledger, clock, 2)
    failed_at = clock.now + 0.5  # the worker raised then
    clock.now += 2.0  # the driver heard of it now
    ledger.enter(RECOVERING, since=failed_at)
    clock.now += 1.0
    time = ledger.snapshot()
    assert time.recovering == pytest.approx(2.5)
    assert time.training == pytest.approx(2.5)  # the two steps, and up to the failure
