"""The median stopping rule's decisions (cases after Ray Tune's EarlyStoppingSuite)."""

from __future__ import annotations

import math

import pytest

from lockstep.tune.schedulers import MedianStoppingRule
from tests.unit.tune.fakes import FakeRunner


def result(t, reward):
    return {"time_total_s": t, "training_iteration": int(t), "reward": reward}


def rule(**kwargs):
    kwargs.setdefault("grace_period", 0)
    kwargs.setdefault("min_samples_required", 1)
    return MedianStoppingRule(metric="reward", mode="max", **kwargs)


def two_trials(scheduler):
    """t1: mean 450 and best 900 over t=0..9; t2: 450 throughout t=0..4."""
    runner = FakeRunner(scheduler)
    t1, t2 = runner.add("t1"), runner.add("t2")
    assert {runner.report(t1, **result(i, i * 100)) for i in range(10)} == {"CONTINUE"}
    assert {runner.report(t2, **result(i, 450)) for i in range(5)} == {"CONTINUE"}
    return runner, t1, t2


def complete(runner, trial, last):
    trial.last_result = last
    runner.complete(trial)


def test_a_trial_whose_best_is_below_the_median_of_running_means_stops():
    runner, t1, t2 = two_trials(rule())
    complete(runner, t1, result(10, 1000))
    assert runner.report(t2, **result(5, 450)) == "CONTINUE"  # t1's mean to 5: 250
    assert runner.report(t2, **result(6, 0)) == "CONTINUE"  # its best, 450, counts
    assert runner.report(t2, **result(10, 450)) == "STOP"  # t1's mean to 10: 500


def test_only_trials_that_got_as_far_are_compared():
    runner, t1, t2 = two_trials(rule())
    assert runner.report(t2, **result(100, 0)) == "CONTINUE"  # t1 never got to 100
    complete(runner, t1, result(101, 1000))
    assert runner.report(t2, **result(101, 0)) == "STOP"  # now it did: its mean is 500


def test_the_means_start_at_the_grace_period():
    scheduler = rule(grace_period=2.5)
    runner, t1, t2 = two_trials(scheduler)
    complete(runner, t1, result(10, 1000))
    complete(runner, t2, result(10, 1000))
    t3 = runner.add("t3")
    assert [runner.report(t3, **result(t, 10)) for t in (1, 2)] == ["CONTINUE", "CONTINUE"]
    # at 3: t1's mean over [2.5, 3] is 300, t2's 450; the median, 375, beats 10
    assert runner.report(t3, **result(3, 10)) == "STOP"


def test_results_before_the_grace_period_do_not_lift_the_mean():
    runner = FakeRunner(rule(grace_period=2))
    early_star, other = runner.add("early_star"), runner.add("other")
    for t, reward in [(0, 1000), (1, 1000), (2, 0), (3, 0)]:
        runner.report(early_star, **result(t, reward))
    # early_star's mean over [2, 3] is 0 (over [0, 3] it would be 500)
    assert runner.report(other, **result(3, 10)) == "CONTINUE"


def test_too_few_other_trials_to_compare_with_continue():
    scheduler = rule(min_samples_required=2)
    runner, t1, t2 = two_trials(scheduler)
    complete(runner, t1, result(10, 1000))
    t3 = runner.add("t3")
    assert runner.report(t3, **result(5, 10)) == "CONTINUE"  # t2 is not at 5 yet
    complete(runner, t2, result(5, 1000))
    assert runner.report(t3, **result(5, 10)) == "STOP"


def test_the_median_not_the_mean_of_the_others_decides():
    runner, t1, t2 = two_trials(rule())
    complete(runner, t1, result(10, 1000))
    complete(runner, t2, result(10, 1000))
    t3 = runner.add("t3")
    assert runner.report(t3, **result(1, 260)) == "CONTINUE"  # median of 50 and 450
    assert runner.report(t3, **result(2, 260)) == "STOP"  # median of 100 and 450: 275


def test_the_median_of_three_others_is_their_middle_mean():
    runner = FakeRunner(rule())
    for name, reward in [("low", 0), ("mid", 10), ("high", 300)]:
        runner.report(runner.add(name), **result(1, reward))
    # the median is 10 (the mean would be 103)
    assert runner.report(runner.add("new"), **result(1, 50)) == "CONTINUE"
    assert runner.report(runner.add("worse"), **result(1, 5)) == "STOP"


def test_without_hard_stop_the_trial_pauses_and_is_not_judged_again():
    scheduler = rule(hard_stop=False)
    runner, t1, t2 = two_trials(scheduler)
    complete(runner, t1, result(10, 1000))
    complete(runner, t2, result(10, 1000))
    t3 = runner.add("t3")
    runner.report(t3, **result(1, 260))
    assert runner.report(t3, **result(2, 260)) == "PAUSE"
    assert t3.status == "PAUSED"
    runner.search_finished = True
    assert runner.next_to_run() is None  # the Tuner ends it once nothing else is left
    runner.resume(t3)  # resumed all the same (a restored experiment, say): as Ray, on to its end
    assert runner.report(t3, **result(3, -1e9)) == "CONTINUE"


def test_mode_min_and_another_time_attribute():
    scheduler = MedianStoppingRule(
        time_attr="step", metric="loss", mode="min", grace_period=0, min_samples_required=1
    )
    runner = FakeRunner(scheduler)
    good, bad = runner.add("good"), runner.add("bad")
    for step in range(3):
        runner.report(good, step=step, loss=1.0)
    assert runner.report(bad, step=0, loss=0.5) == "CONTINUE"
    assert runner.report(bad, step=2, loss=2.0) == "CONTINUE"  # its best loss, 0.5, counts
    worse = runner.add("worse")
    assert runner.report(worse, step=2, loss=3.0) == "STOP"  # median of 1.0 and 1.25


def test_trials_with_nan_or_infinite_means_are_not_samples():
    runner = FakeRunner(rule())
    for name, value in [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)]:
        trial = runner.add(name)
        assert {runner.report(trial, **result(t, value)) for t in range(3)} == {"CONTINUE"}
    newcomer = runner.add("newcomer")
    assert runner.report(newcomer, **result(2, -1e9)) == "CONTINUE"  # nobody to compare with


def test_a_last_result_already_seen_is_not_counted_twice():
    runner = FakeRunner(rule())
    first = runner.add("first")
    runner.report(first, **result(0, 0))
    runner.report(first, **result(1, 300))
    runner.complete(first)  # with its last result, seen already: the mean stays 150
    second = runner.add("second")
    assert runner.report(second, **result(1, 175)) == "CONTINUE"


def test_results_without_the_metric_or_the_time_are_ignored():
    runner = FakeRunner(rule())
    best, other = runner.add("best"), runner.add("other")
    runner.report(best, **result(1, 100))
    assert runner.report(other, time_total_s=1) == "CONTINUE"
    assert runner.report(other, reward=-5) == "CONTINUE"
    assert runner.report(other, **result(1, 50)) == "STOP"


def test_the_defaults_are_ray_tunes():
    default = MedianStoppingRule(metric="reward", mode="max")
    runner = FakeRunner(default)
    trials = runner.add_all(4)
    for trial in trials[:3]:
        runner.report(trial, **result(60, 100))
    # time_total_s, grace 60 s, 3 samples required
    assert runner.report(trials[3], **result(59, -1)) == "CONTINUE"
    assert runner.report(trials[3], **result(60, -1)) == "STOP"


def test_a_result_without_metric_or_mode_set_is_an_error():
    runner = FakeRunner(MedianStoppingRule())
    with pytest.raises(ValueError, match=r"MedianStoppingRule needs a metric and a mode"):
        runner.report(runner.add("t0"), **result(1, 1))


def test_a_last_result_without_the_metric_adds_nothing():
    runner = FakeRunner(rule())
    first = runner.add("first")
    runner.report(first, **result(1, 100))
    first.last_result = {"time_total_s": 2}
    runner.complete(first)
    assert runner.report(runner.add("second"), **result(2, -1)) == "CONTINUE"  # none at 2
