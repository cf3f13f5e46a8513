"""The scheduler interface and FIFO: decisions, metric and mode, the order trials run in."""

from __future__ import annotations

import dataclasses

import pytest

from lockstep.tune.schedulers import Exploit, FIFOScheduler, TrialScheduler
from tests.unit.tune.fakes import FakeRunner, FakeTrial


def test_decisions_are_ray_tunes_strings():
    assert (TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP) == (
        "CONTINUE",
        "PAUSE",
        "STOP",
    )
    assert TrialScheduler.NOOP == "NOOP"


def test_fifo_continues_every_trial_whatever_it_reports():
    fifo = FIFOScheduler()
    runner = FakeRunner(fifo)
    trial = runner.add("t0")
    for result in ({"loss": 1e9}, {"training_iteration": 10**6}, {}):
        assert runner.report(trial, **result) == "CONTINUE"
    assert trial.status == "RUNNING"


def waiting(*statuses):
    return [FakeTrial(f"t{i}", status=s) for i, s in enumerate(statuses)]


def test_fifo_runs_pending_trials_first_in_creation_order():
    trials = waiting("PAUSED", "PENDING", "PENDING")
    runner = FakeRunner(FIFOScheduler(), search_finished=True)
    assert FIFOScheduler().choose_trial_to_run(runner, trials) is trials[1]


def test_fifo_does_not_run_a_paused_trial_again():
    trials = waiting("PAUSED", "TERMINATED", "PAUSED")
    fifo = FIFOScheduler()
    assert fifo.choose_trial_to_run(FakeRunner(fifo, search_finished=True), trials) is None
    assert fifo.choose_trial_to_run(None, trials) is None


def test_fifo_chooses_nothing_when_nothing_waits():
    runner = FakeRunner(FIFOScheduler(), search_finished=True)
    assert FIFOScheduler().choose_trial_to_run(runner, waiting("RUNNING", "ERROR")) is None
    assert FIFOScheduler().choose_trial_to_run(runner, []) is None


def test_a_custom_scheduler_on_the_base_class_runs_only_pending_trials():
    class StopAtThree(TrialScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            return self.STOP if result["training_iteration"] >= 3 else self.CONTINUE

    scheduler = StopAtThree()
    runner = FakeRunner(scheduler, search_finished=True)
    trial = runner.add("t0")
    assert [runner.report(trial, training_iteration=i) for i in (1, 2, 3)] == [
        "CONTINUE",
        "CONTINUE",
        "STOP",
    ]
    assert trial.status == "TERMINATED"
    trials = waiting("PAUSED", "PENDING")
    assert scheduler.choose_trial_to_run(runner, trials) is trials[1]
    assert scheduler.choose_trial_to_run(runner, trials[:1]) is None


def test_search_properties_fill_only_what_the_scheduler_lacks():
    fifo = FIFOScheduler()
    assert fifo.metric is None
    assert fifo.set_search_properties("loss", "min") is True
    assert (fifo.metric, fifo._mode) == ("loss", "min")
    fifo.set_search_properties("acc", "max")  # its own stay
    assert (fifo.metric, fifo._mode) == ("loss", "min")


def test_a_mode_other_than_min_or_max_is_refused():
    with pytest.raises(ValueError, match='mode must be "min" or "max", got \'maximize\''):
        FIFOScheduler().set_search_properties("acc", "maximize")


def test_the_score_is_the_metric_signed_so_that_higher_is_better():
    scheduler = FIFOScheduler()
    scheduler.set_search_properties("loss", "min")
    assert scheduler._score({"loss": 2}) == -2.0
    assert scheduler._score({"acc": 2}) is None
    maximise = FIFOScheduler()
    maximise.set_search_properties("acc", "max")
    assert maximise._score({"acc": 0.5}) == 0.5


@pytest.mark.parametrize("metric, mode", [(None, "max"), ("acc", None), (None, None)])
def test_a_scheduler_that_needs_a_metric_and_a_mode_names_both(metric, mode):
    scheduler = FIFOScheduler()
    scheduler.set_search_properties(metric, mode)
    with pytest.raises(ValueError, match=r"Median needs a metric and a mode. HINT: pass metric="):
        scheduler._require_metric("Median")


def test_an_exploit_names_its_donor_and_config_and_cannot_change():
    donor = FakeTrial("good", {"lr": 0.1})
    exploit = Exploit(donor=donor, config={"lr": 0.12})
    assert exploit.donor is donor and exploit.config == {"lr": 0.12}
    assert Exploit(donor=donor).config == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        exploit.donor = None  # type: ignore[misc]
