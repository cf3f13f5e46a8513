"""ASHA's decisions per result, its rungs and brackets (cases after Ray Tune's own tests)."""

from __future__ import annotations

import numpy as np
import pytest

from lockstep.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler
from tests.unit.tune.fakes import FakeRunner


def result(t, reward):
    return {"training_iteration": t, "reward": reward}


def asha(**kwargs):
    return ASHAScheduler(metric="reward", mode="max", **kwargs)


def two_trials(scheduler):
    """t1 climbs 0, 100, ..., 900 over 10 iterations; t2 stays at 450 for 5."""
    runner = FakeRunner(scheduler)
    t1, t2 = runner.add("t1"), runner.add("t2")
    assert {runner.report(t1, **result(i, i * 100)) for i in range(10)} == {"CONTINUE"}
    assert {runner.report(t2, **result(i, 450)) for i in range(5)} == {"CONTINUE"}
    return runner, t1, t2


def test_asha_is_ray_tunes_name_for_async_hyperband():
    assert ASHAScheduler is AsyncHyperBandScheduler


def test_rungs_sit_at_grace_period_times_powers_of_the_reduction_factor():
    scheduler = asha(grace_period=1, max_t=10, reduction_factor=2, brackets=3)
    rungs = [[milestone for milestone, _ in b.rungs] for b in scheduler._brackets]
    # each later bracket starts one rung up; the highest rung is at most max_t
    assert rungs == [[8, 4, 2, 1], [8, 4, 2], [8, 4]]
    grace = asha(grace_period=2.5, max_t=100, reduction_factor=3)
    assert [m for m, _ in grace._brackets[0].rungs] == [67.5, 22.5, 7.5, 2.5]


def test_a_trial_below_the_top_half_at_a_rung_stops():
    runner, t1, t2 = two_trials(asha(grace_period=1, max_t=10, reduction_factor=2))
    runner.complete(t1)
    runner.complete(t2)
    # rung 1 holds t1's 100 and t2's 450: the median, 275, is the cutoff
    t3 = runner.add("t3")
    assert runner.report(t3, **result(1, 260)) == "STOP"
    # t3's 260 counts at rung 1 too: the median of 100, 450, 260 is 260
    t4 = runner.add("t4")
    assert runner.report(t4, **result(1, 260)) == "CONTINUE"
    # rung 2 holds t1's 200 and t2's 450: 325 is the cutoff there
    assert runner.report(t4, **result(2, 320)) == "STOP"
    t5 = runner.add("t5")
    assert [runner.report(t5, **result(t, 330)) for t in (1, 2)] == ["CONTINUE", "CONTINUE"]


def test_the_cutoff_is_the_top_one_over_reduction_factor_quantile():
    scheduler = asha(grace_period=2.5, reduction_factor=3)
    runner, t1, t2 = two_trials(scheduler)
    # rung 2.5 holds 300 (t1 at 3) and 450 (t2 at 3): the 2/3 quantile is 400
    assert scheduler._brackets[0].cutoff(scheduler._brackets[0].rungs[-1][1]) == pytest.approx(400)
    runner.complete(t1)
    runner.complete(t2)
    t3 = runner.add("t3")
    assert [runner.report(t3, **result(t, 10)) for t in (1, 2)] == ["CONTINUE", "CONTINUE"]
    assert runner.report(t3, **result(3, 10)) == "STOP"  # the grace period is over


def test_no_trial_is_stopped_before_the_grace_period():
    runner = FakeRunner(asha(grace_period=5, max_t=100, reduction_factor=2))
    best, worst = runner.add("best"), runner.add("worst")
    runner.report(best, **result(5, 1000))
    assert [runner.report(worst, **result(t, -1000)) for t in (1, 2, 3, 4)] == ["CONTINUE"] * 4
    assert runner.report(worst, **result(5, -1000)) == "STOP"


def test_the_first_trial_at_a_rung_always_continues():
    runner = FakeRunner(asha(grace_period=1, max_t=10, reduction_factor=2))
    trial = runner.add("t0")
    assert [runner.report(trial, **result(t, -1e9)) for t in (1, 2, 4, 8)] == ["CONTINUE"] * 4


def test_every_trial_stops_at_max_t():
    scheduler = asha(max_t=10, brackets=10)
    runner = FakeRunner(scheduler)
    trials = runner.add_all(10)
    assert {runner.report(t, **result(10, -2)) for t in trials} == {"STOP"}
    assert {t.status for t in trials} == {"TERMINATED"}


def test_a_completed_trials_last_result_counts_at_its_rung():
    scheduler = asha(grace_period=1, max_t=10, reduction_factor=2)
    runner = FakeRunner(scheduler)
    early = runner.add("early")
    runner.report(early, **result(1, 100))
    # it ends at iteration 8 (a stopper, say) with a result ASHA has not seen
    early.last_result = result(8, 1000)
    runner.complete(early)
    assert scheduler._brackets[0].rungs[0] == (8, {"early": 1000})
    late = runner.add("late")
    assert runner.report(late, **result(8, 999)) == "STOP"


def test_a_result_without_the_metric_or_the_time_continues_even_past_max_t():
    runner = FakeRunner(asha(max_t=10))
    trial = runner.add("t0")
    assert runner.report(trial, training_iteration=50) == "CONTINUE"
    assert runner.report(trial, reward=-1.0) == "CONTINUE"
    assert runner.report(trial, **result(10, 1.0)) == "STOP"


def test_mode_min_keeps_the_lowest_losses():
    scheduler = AsyncHyperBandScheduler(
        time_attr="epoch", metric="loss", mode="min", grace_period=1, max_t=8, reduction_factor=2
    )
    runner = FakeRunner(scheduler)
    low, high = runner.add("low"), runner.add("high")
    assert runner.report(low, epoch=1, loss=0.1) == "CONTINUE"
    assert runner.report(high, epoch=1, loss=0.9) == "STOP"
    # the time is the time_attr's value, whatever training_iteration says
    assert runner.report(low, epoch=8, training_iteration=1, loss=0.1) == "STOP"


def test_without_stop_last_trials_a_trial_past_its_top_rung_is_never_stopped():
    scheduler = asha(grace_period=1, max_t=3, reduction_factor=2, stop_last_trials=False)
    runner = FakeRunner(scheduler)
    trials = runner.add_all(4)
    metrics = zip(trials, (10, 8, 6, 4), strict=True)
    decisions = [runner.report(t, **result(2, m)) for t, m in metrics]
    assert decisions == ["CONTINUE", "STOP", "STOP", "STOP"]
    assert runner.report(trials[0], **result(4, 10)) == "CONTINUE"
    assert runner.report(trials[0], **result(14, 1)) == "CONTINUE"  # past max_t, below all


def test_a_trial_that_skipped_a_rung_is_not_judged_there_later_without_stop_last():
    def jump(stop_last):
        scheduler = asha(grace_period=1, max_t=3, reduction_factor=2, stop_last_trials=stop_last)
        runner = FakeRunner(scheduler)
        slow, fast = runner.add("slow"), runner.add("fast")
        runner.report(slow, **result(1, 100))
        assert runner.report(fast, **result(2, 10)) == "CONTINUE"  # first at rung 2
        return runner.report(fast, **result(2.5, 10))

    assert jump(stop_last=False) == "CONTINUE"  # Ray: decided at the higher rung already
    assert jump(stop_last=True) == "STOP"  # Ray: judged at rung 1 now, below 100


def test_brackets_are_drawn_with_softmax_weights_on_their_rung_counts():
    np.random.seed(0)
    scheduler = asha(grace_period=1, max_t=100, reduction_factor=4, brackets=3)
    sizes = [len(b.rungs) for b in scheduler._brackets]
    assert sizes == [4, 3, 2]
    runner = FakeRunner(scheduler)
    runner.add_all(3000)
    counts = [
        sum(b is bracket for b in scheduler._trial_bracket.values())
        for bracket in scheduler._brackets
    ]
    weights = np.exp(np.array(sizes) - max(sizes))
    expected = weights / weights.sum()  # 0.665, 0.245, 0.090
    assert np.allclose(np.array(counts) / 3000, expected, atol=0.03)


def test_one_bracket_takes_every_trial_and_draws_no_random_number():
    scheduler = asha(brackets=1)
    runner = FakeRunner(scheduler)
    state = np.random.get_state()[1].copy()
    runner.add_all(5)
    assert np.array_equal(np.random.get_state()[1], state)
    assert set(map(id, scheduler._trial_bracket.values())) == {id(scheduler._brackets[0])}


def test_a_trial_the_scheduler_never_saw_added_gets_a_bracket_at_its_first_result():
    scheduler = asha(grace_period=1, max_t=10, reduction_factor=2)
    runner = FakeRunner(scheduler)
    best = runner.add("best")
    runner.report(best, **result(1, 5))
    from tests.unit.tune.fakes import FakeTrial

    stranger = FakeTrial("stranger", status="RUNNING")
    assert runner.report(stranger, **result(1, 1)) == "STOP"


def test_completed_trials_leave_the_bracket_bookkeeping():
    scheduler = asha()
    runner = FakeRunner(scheduler)
    trial = runner.add("t0")
    runner.complete(trial)
    assert "t0" not in scheduler._trial_bracket


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"grace_period": 0}, "need 0 < grace_period <= max_t, got grace_period=0"),
        ({"grace_period": 5, "max_t": 4}, "grace_period=5, max_t=4. HINT"),
        ({"reduction_factor": 1}, "reduction_factor must be > 1, got 1"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ASHAScheduler(**kwargs)


def test_a_result_without_metric_or_mode_set_is_an_error():
    runner = FakeRunner(ASHAScheduler())
    with pytest.raises(ValueError, match=r"AsyncHyperBandScheduler needs a metric and a mode"):
        runner.report(runner.add("t0"), **result(1, 1))
