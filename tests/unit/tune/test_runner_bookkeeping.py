"""The runner's bookkeeping: kept as trials change, not scanned, with the same decisions;
trial threads kept for the next trial; what a function trial flushes to the disk."""

from __future__ import annotations

import random
import threading
import warnings

import pytest

from lockstep import tune
from lockstep.tune._resources import machine_resources
from lockstep.tune._threads import TrialThreads
from lockstep.tune._trial import ERROR, PAUSED, PENDING, RUNNING, TERMINATED
from lockstep.tune._waiting import WaitingTrials
from lockstep.tune.schedulers import HyperBandScheduler
from tests.helpers import add_lr_to_a_score, pbt_every_two_iterations
from tests.unit.tune.test_tuner import resumable_constant


class Trial:
    def __init__(self, trial_id, status=PENDING):
        self.trial_id, self.status = trial_id, status


def test_the_waiting_trials_are_those_a_scan_finds_in_creation_order_after_any_changes():
    rng = random.Random(0)
    trials = [Trial(f"t{i}", rng.choice([PENDING, PAUSED, RUNNING])) for i in range(20)]
    waiting = WaitingTrials(trials)
    for step in range(2000):
        if step % 10 == 0:
            trials.append(Trial(f"t{len(trials)}"))
            waiting.add(trials[-1])
        trial = rng.choice(trials)
        waiting.set_status(trial, rng.choice([PENDING, PAUSED, RUNNING, TERMINATED, ERROR]))
        scanned = [t for t in trials if t.status in (PENDING, PAUSED)]
        assert waiting.ordered() == scanned and len(waiting) == len(scanned)


def pbt_trainable(config):
    add_lr_to_a_score(config, tune.get_checkpoint, tune.report, steps=6)


class Checked:
    """A scheduler whose choice of the next trial is checked: the runner must give it
    exactly the waiting trials a scan of every trial finds, in the same order."""

    def __init__(self, scheduler):
        self.scheduler, self.calls, self.paused = scheduler, 0, 0
        original = scheduler.choose_trial_to_run

        def choose(runner, waiting):
            self.calls += 1
            self.paused += sum(t.status == PAUSED for t in waiting)
            scanned = [t for t in runner.trials if t.status in (PENDING, PAUSED)]
            assert list(waiting) == scanned
            return original(runner, waiting)

        scheduler.choose_trial_to_run = choose


@pytest.mark.parametrize("kind", ["hyperband", "pbt"])
def test_schedulers_that_pause_choose_from_exactly_the_trials_a_scan_finds(tmp_path, kind):
    if kind == "hyperband":
        scheduler = HyperBandScheduler(max_t=4, reduction_factor=2)
        trainable, metric = resumable_constant, "acc"
        space = {"acc": tune.grid_search([i / 8 for i in range(8)])}
    else:
        scheduler = pbt_every_two_iterations({"lr": [0.1, 1.0, 10.0]})
        trainable, metric = pbt_trainable, "score"
        space = {"lr": tune.grid_search([10.0, 0.1, 1.0, 0.1])}
    checked = Checked(scheduler)
    results = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric=metric, mode="max", scheduler=scheduler, max_concurrent_trials=2
        ),
        run_config=tune.RunConfig(name=kind, storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert results.num_errors == 0 and checked.calls > 0
    if kind == "hyperband":
        assert checked.paused > 0  # paused trials were among those it chose from


def test_a_trial_thread_runs_trial_after_trial_and_is_gone_after_the_experiment(tmp_path):
    names = []

    def objective(config):
        names.append(threading.current_thread().name)
        tune.report({"x": config["x"]})

    results = tune.Tuner(
        objective,
        param_space={"x": tune.grid_search(list(range(12)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(name="seq", storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert sorted(r.config["x"] for r in results) == list(range(12))
    assert len(names) == 12
    assert not [t for t in threading.enumerate() if t.name.startswith("lockstep-trial")]


def test_trial_threads_are_reused_and_closed():
    threads = TrialThreads()
    seen = []
    for _ in range(5):
        done = threading.Event()
        threads.run(lambda done=done: (seen.append(threading.current_thread()), done.set()))
        done.wait()
    threads.close()
    assert len(set(seen)) <= 2  # an idle thread takes the next job
    assert not any(t.is_alive() for t in seen)


def test_a_cap_the_cpus_do_not_allow_is_warned_with_the_fraction_that_fits(tmp_path):
    def objective(config):
        tune.report({"x": 1})

    cpus = machine_resources()["CPU"]

    def fit(name, cpu):
        tune.Tuner(
            tune.with_resources(objective, {"cpu": cpu}),
            param_space={"i": tune.grid_search([1, 2, 3])},
            tune_config=tune.TuneConfig(max_concurrent_trials=8),
            run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
        ).fit()

    hint = f"tune.with_resources\\(trainable, {{'cpu': {cpus / 8:.3g}}}\\)"
    with pytest.warns(UserWarning, match=rf"max_concurrent_trials=8, but only 2 trials.*{hint}"):
        fit("capped", cpus / 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fraction that fits is not warned about
        fit("fits", cpus / 8)
