import pytest

from lockstep._internal.controller.steps import ReportCountMismatch, StepAggregator
from lockstep._internal.execution.messages import Report


def r(rank, step, checkpointed=False):
    return Report(rank, step, {"rank": rank, "step": step}, checkpointed, 0.0)


def test_step_completes_when_every_rank_reported():
    agg = StepAggregator(3)
    assert agg.add(r(0, 0)) == []
    assert agg.add(r(2, 0)) == []
    (step,) = agg.add(r(1, 0, checkpointed=True))
    assert step.index == 0 and step.metrics == {"rank": 0, "step": 0} and step.checkpointed
    assert [rep.rank for rep in step.reports] == [0, 1, 2]


def test_a_fast_worker_runs_ahead_and_steps_come_out_in_order():
    agg = StepAggregator(2)
    for step in range(3):
        assert agg.add(r(0, step)) == []
    assert [s.index for s in agg.add(r(1, 0))] == [0]
    assert [s.index for s in agg.add(r(1, 1))] == [1]


def test_finishing_early_is_a_mismatch_as_soon_as_it_is_certain():
    agg = StepAggregator(2)
    agg.add(r(0, 0))
    agg.add(r(1, 0))
    agg.finish(0, 1)
    with pytest.raises(
        ReportCountMismatch,
        match=r"rank 0 returned after 1 report while rank 1 waits in its report number 2 "
        r"\(reports: rank 0: 1 \(returned\), rank 1: 2\)",
    ) as info:
        agg.add(r(1, 1))
    assert info.value.rank == 0


def test_waiting_ranks_and_their_counts():
    agg = StepAggregator(3)
    agg.add(r(0, 0))
    agg.add(r(1, 0))
    assert agg.waiting() == [0, 1]
    assert agg.describe_counts() == "reports: rank 0: 1, rank 1: 1, rank 2: 0"
    agg.add(r(2, 0))
    assert agg.waiting() == []


def test_report_after_another_finished_with_more():
    agg = StepAggregator(2)
    agg.add(r(0, 0))
    agg.add(r(0, 1))
    with pytest.raises(ReportCountMismatch):
        agg.finish(1, 0)


def test_all_finished():
    agg = StepAggregator(2)
    agg.finish(0, 0)
    assert not agg.all_finished()
    agg.finish(1, 0)
    assert agg.all_finished()


def test_a_mismatch_names_the_lowest_rank_ahead_and_the_first_to_return_behind():
    ahead = StepAggregator(4)
    for rank in (3, 1, 0, 2):
        ahead.add(r(rank, 0))
    ahead.add(r(3, 1))
    ahead.add(r(1, 1))
    with pytest.raises(ReportCountMismatch, match=r"rank 2 returned after 1 report while rank 1 "):
        ahead.finish(2, 1)
    behind = StepAggregator(3)
    for rank in (0, 1, 2):
        behind.add(r(rank, 0))
    behind.finish(2, 1)
    behind.finish(0, 1)  # as few reports, after rank 2
    with pytest.raises(ReportCountMismatch, match=r"rank 2 returned after 1 report ") as info:
        behind.add(r(1, 1))
    assert info.value.rank == 2
