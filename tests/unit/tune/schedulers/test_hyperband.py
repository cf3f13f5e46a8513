"""HyperBand's brackets, halvings and decisions (cases after Ray Tune's HyperbandSuite)."""

from __future__ import annotations

import pytest

from lockstep.tune.schedulers import HyperBandScheduler
from tests.unit.tune.fakes import FakeRunner


def hyperband(**kwargs):
    return HyperBandScheduler(metric="reward", mode="max", **kwargs)


def result(t, reward):
    return {"training_iteration": t, "reward": reward}


def layout(scheduler):
    return [(b.capacity, b.milestone, b.halvings) for b in scheduler._brackets]


def test_a_round_of_brackets_starts_with_the_one_that_stops_nobody():
    scheduler = hyperband()  # max_t=81, reduction_factor=3: five brackets
    runner = FakeRunner(scheduler)
    runner.add_all(5 + 8 + 15 + 34 + 81)
    assert layout(scheduler) == [(5, 81, 0), (8, 27, 1), (15, 9, 2), (34, 3, 3), (81, 1, 4)]
    runner.add("next round")
    assert layout(scheduler)[-1] == (5, 81, 0)


def test_the_brackets_of_other_reduction_factors_and_budgets():
    ten = hyperband(max_t=1000, reduction_factor=10)
    FakeRunner(ten).add_all(4 + 20 + 134 + 1000)
    assert layout(ten) == [(4, 1000, 0), (20, 100, 1), (134, 10, 2), (1000, 1, 3)]
    one = hyperband(max_t=1)
    FakeRunner(one).add_all(3)
    assert layout(one) == [(1, 1, 0)] * 3


def test_a_bracket_whose_first_milestone_rounds_to_zero_is_skipped():
    scheduler = hyperband(max_t=20)  # round(log3(20)) + 1 = 4 brackets, the last at 20/27
    FakeRunner(scheduler).add_all(4 + 6 + 12 + 1)
    assert layout(scheduler) == [(4, 20, 0), (6, 6, 1), (12, 2, 2), (4, 20, 0)]


def full_band():
    scheduler = hyperband()
    runner = FakeRunner(scheduler)
    trials = runner.add_all(143)
    return scheduler, runner, trials[-81:]  # the last bracket: 81 trials from milestone 1


def test_successive_halving_keeps_a_third_at_each_milestone_until_one_is_left():
    scheduler, runner, live = full_band()
    bracket = scheduler._brackets[-1]
    for milestone, survivors in [(1, 27), (3, 9), (9, 3), (27, 1)]:
        decisions = [runner.report(t, **result(milestone, i)) for i, t in enumerate(live)]
        # each waits for the others; the last one's result halves them, and it is the best
        assert decisions == ["PAUSE"] * (len(live) - 1) + ["CONTINUE"]
        kept = [t for t in live if t.trial_id not in bracket.ended]
        assert kept == live[-survivors:]
        assert {t.status for t in live[:-survivors]} == {"TERMINATED"}
        for trial in reversed(kept[:-1]):  # the paused ones run next, the best first
            assert runner.next_to_run() is trial
            runner.resume(trial)
        assert runner.next_to_run() is None
        live = kept
    assert runner.report(live[0], **result(81, 0)) == "STOP"  # the last milestone: max_t


def test_the_trial_whose_result_halves_the_bracket_stops_if_it_is_among_the_worst():
    scheduler, runner, _ = full_band()
    second = scheduler._brackets[1]  # 8 trials from milestone 27
    members = second.trials
    decisions = [runner.report(t, **result(27, -i)) for i, t in enumerate(members)]
    assert decisions == ["PAUSE"] * 7 + ["STOP"]
    assert [t.status for t in members] == ["PAUSED"] * 3 + ["TERMINATED"] * 5
    assert sorted(runner.stopped) == sorted(t.trial_id for t in members[3:7])


def test_a_bracket_that_is_not_full_waits_until_the_search_has_created_every_trial():
    scheduler = hyperband(max_t=9)  # brackets of 3 (to 9), 5 (from 3) and 9 (from 1)
    runner = FakeRunner(scheduler)
    trials = runner.add_all(3 + 5 + 2)
    smallest = trials[-2:]
    assert runner.report(smallest[0], **result(1, 1)) == "PAUSE"
    assert runner.report(smallest[1], **result(1, 2)) == "PAUSE"  # 7 more may come
    runner.search_finished = True
    # nobody is stopped: a full bracket would keep 3 (9 / 3) at the first halving
    assert runner.report(smallest[1], **result(1, 2)) == "CONTINUE"
    assert runner.stopped == [] and runner.next_to_run() is smallest[0]
    runner.resume(smallest[0])
    assert runner.report(smallest[0], **result(3, 1)) == "PAUSE"
    assert runner.report(smallest[1], **result(3, 2)) == "CONTINUE"  # keeps 1 of them
    assert runner.stopped == [smallest[0].trial_id]


def test_a_trial_that_fails_leaves_the_others_to_halve_without_it():
    scheduler = hyperband()
    runner = FakeRunner(scheduler, search_finished=True)
    trials = runner.add_all(5 + 3)
    t1, t2, t3 = trials[5:]
    runner.fail(t3)
    assert runner.report(t1, **result(27, 10)) == "PAUSE"
    assert runner.report(t2, **result(27, 10)) == "CONTINUE"
    assert runner.next_to_run() is t1  # kept: a full bracket of 8 keeps 3


def test_the_last_awaited_trial_ending_early_halves_the_bracket():
    scheduler = hyperband()
    runner = FakeRunner(scheduler)
    members = runner.add_all(5 + 8)[5:]
    for i, trial in enumerate(members[:-1]):
        assert runner.report(trial, **result(27, i)) == "PAUSE"
    members[-1].last_result = result(5, 100)
    runner.complete(members[-1])  # before its milestone
    bracket = scheduler._brackets[1]
    assert [t.trial_id for t in bracket.live()] == [t.trial_id for t in members[4:7]]
    assert sorted(runner.stopped) == sorted(t.trial_id for t in members[:4])
    resumed = []
    while (trial := runner.next_to_run()) is not None:
        resumed.append(trial)
        runner.resume(trial)
    assert resumed == [members[6], members[5], members[4]]  # the best first


def test_a_trial_that_reports_past_the_next_milestone_waits_there():
    scheduler = hyperband(max_t=9)  # the third bracket: 9 trials, milestones 1, 3, 9
    runner = FakeRunner(scheduler)
    members = runner.add_all(3 + 5 + 9)[8:]
    for i, trial in enumerate(members[:-1]):
        runner.report(trial, **result(1, i))
    jumper = members[-1]
    assert runner.report(jumper, **result(4, 100)) == "PAUSE"  # kept, but already past 3
    kept = [t for t in members if t.trial_id not in scheduler._brackets[2].ended]
    assert kept == [members[6], members[7], jumper]
    assert runner.next_to_run() is members[7]  # the others catch up first
    runner.resume(members[7])
    runner.resume(members[6])
    assert runner.report(members[7], **result(3, 7)) == "PAUSE"
    # the jumper was there already: the last of the three to arrive halves them
    assert runner.report(members[6], **result(3, 6)) == "STOP"
    assert sorted(runner.stopped) == sorted(t.trial_id for t in [*members[:6], members[7]])
    assert runner.next_to_run() is jumper


@pytest.mark.parametrize("stop_last", [True, False])
def test_trials_stop_at_their_brackets_last_milestone_unless_told_otherwise(stop_last):
    scheduler = hyperband(max_t=8, reduction_factor=2, stop_last_trials=stop_last)
    runner = FakeRunner(scheduler)
    trials = runner.add_all(8)  # brackets of 4 to 8, and of 4 from 4
    assert layout(scheduler) == [(4, 8, 0), (4, 4, 1)]
    assert {runner.report(t, **result(4, 10 * i)) for i, t in enumerate(trials[:4])} == {"CONTINUE"}
    decisions = [runner.report(t, **result(4, 10 * i)) for i, t in enumerate(trials[4:])]
    assert decisions == ["PAUSE", "PAUSE", "PAUSE", "CONTINUE"]
    assert [t.status for t in trials[4:]] == ["TERMINATED", "TERMINATED", "PAUSED", "RUNNING"]
    runner.resume(trials[6])
    last = "STOP" if stop_last else "CONTINUE"
    assert {runner.report(t, **result(8, 1)) for t in trials[:4] + trials[6:]} == {last}
    assert {runner.report(t, **result(9, 1)) for t in trials[6:] if not stop_last} <= {"CONTINUE"}


@pytest.mark.parametrize("stop_last", [True, False])
def test_trials_that_report_past_max_t_at_once_end_at_the_halving(stop_last):
    scheduler = hyperband(max_t=8, reduction_factor=2, stop_last_trials=stop_last)
    runner = FakeRunner(scheduler)
    trials = runner.add_all(8)[4:]
    decisions = [runner.report(t, **result(8, 10 * i)) for i, t in enumerate(trials)]
    if stop_last:
        assert decisions == ["PAUSE", "PAUSE", "PAUSE", "STOP"]
        assert [t.status for t in trials] == ["TERMINATED"] * 4
    else:
        assert decisions == ["PAUSE", "PAUSE", "PAUSE", "CONTINUE"]
        assert [t.status for t in trials] == ["TERMINATED", "TERMINATED", "PAUSED", "RUNNING"]


def test_mode_min_and_another_time_attribute_halve_on_the_lowest_losses():
    scheduler = HyperBandScheduler(time_attr="epoch", metric="loss", mode="min", max_t=9)
    runner = FakeRunner(scheduler)
    members = runner.add_all(3 + 5)[3:]  # from milestone 3, 5 trials, 2 kept
    decisions = [runner.report(t, epoch=3, loss=float(i)) for i, t in enumerate(members)]
    assert decisions == ["PAUSE"] * 4 + ["STOP"]
    assert [t.status for t in members] == ["PAUSED", "PAUSED"] + ["TERMINATED"] * 3


def test_waiting_trials_run_kept_paused_ones_first_then_pending_ones():
    scheduler = hyperband(max_t=9)
    runner = FakeRunner(scheduler, search_finished=True)
    a, b = runner.add_all(3 + 2)[3:]
    runner.report(a, **result(3, 5))
    assert runner.report(b, **result(3, 1)) == "CONTINUE"  # both kept (5 -> 2)
    pending = runner.add("pending")
    pending.status = "PENDING"
    assert runner.next_to_run() is a
    runner.resume(a)
    assert runner.next_to_run() is pending  # a runs: it is no longer waiting
    a.status = "PAUSED"  # paused by something else, once it reported again
    runner.report(a, **result(4, 5))
    assert a not in scheduler._resumable


def test_a_trial_its_bracket_ended_is_stopped_at_its_next_result():
    scheduler = hyperband(max_t=9)
    runner = FakeRunner(scheduler)
    members = runner.add_all(3 + 5)[3:]
    runner.report(members[0], **result(3, -1))
    members[0].status = "RUNNING"  # still finishing its iteration when the others halve it
    for i, trial in enumerate(members[1:]):
        runner.report(trial, **result(3, i))
    assert members[0].stop_requested and members[0].trial_id in runner.stopped
    assert runner.report(members[0], **result(4, 100)) == "STOP"


def test_results_without_the_metric_or_the_time_continue():
    scheduler = hyperband(max_t=9)
    runner = FakeRunner(scheduler)
    trial = runner.add("t0")
    assert runner.report(trial, training_iteration=100) == "CONTINUE"
    assert runner.report(trial, reward=1) == "CONTINUE"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reduction_factor": 1}, "reduction_factor must be > 1, got 1"),
        ({"max_t": 0.5}, "max_t must be at least 1, got 0.5. HINT"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HyperBandScheduler(**kwargs)


def test_a_result_without_metric_or_mode_set_is_an_error():
    runner = FakeRunner(HyperBandScheduler())
    with pytest.raises(ValueError, match=r"HyperBandScheduler needs a metric and a mode"):
        runner.report(runner.add("t0"), **result(1, 1))


def test_a_kept_trial_that_ends_before_it_resumes_is_not_offered_to_run():
    scheduler = hyperband(max_t=9)
    runner = FakeRunner(scheduler)
    members = runner.add_all(3 + 5)[3:]
    for i, trial in enumerate(members):
        runner.report(trial, **result(3, i))
    kept = runner.next_to_run()
    assert kept is members[3]
    runner.fail(kept)
    assert runner.next_to_run() is None


def test_a_trial_ending_in_a_bracket_past_its_last_halving_changes_nothing():
    scheduler = hyperband(max_t=9)
    runner = FakeRunner(scheduler)
    first, second, _ = runner.add_all(3)  # the bracket that runs to 9
    runner.report(first, **result(5, 1))
    runner.complete(second)
    assert runner.stopped == [] and first.status == "RUNNING"
    assert runner.report(first, **result(9, 1)) == "STOP"


def test_when_the_last_awaited_trial_ends_the_best_waiting_one_runs_first():
    scheduler = hyperband(max_t=9)
    runner = FakeRunner(scheduler)
    members = runner.add_all(3 + 5)[3:]
    for i, trial in enumerate(members[:-1]):
        runner.report(trial, **result(3, -i))  # the first is the best
    runner.fail(members[-1])
    assert [runner.next_to_run()] == [members[0]]
    assert sorted(runner.stopped) == sorted(t.trial_id for t in members[2:4])
