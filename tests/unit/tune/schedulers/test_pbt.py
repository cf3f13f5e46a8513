"""Population based training: when and whom a trial exploits, how configs are explored
(cases after Ray Tune's PopulationBasedTestingSuite)."""

from __future__ import annotations

import pytest

from lockstep import tune
from lockstep.tune.schedulers import Exploit, PopulationBasedTraining
from tests.unit.tune.fakes import FakeRunner

MUTATIONS = {"float_factor": lambda: 100.0, "int_factor": lambda: 10, "id_factor": [100]}


def result(t, reward):
    return {"training_iteration": t, "reward": reward}


def pbt(**kwargs):
    kwargs.setdefault("hyperparam_mutations", MUTATIONS)
    kwargs.setdefault("perturbation_interval", 10)
    kwargs.setdefault("resample_probability", 0.0)
    return PopulationBasedTraining(
        time_attr="training_iteration", metric="reward", mode="max", seed=0, **kwargs
    )


def population(scheduler, size=5):
    """``size`` trials with checkpoints, scored 0, 50, 100, ... at their first perturbation
    point (10): nobody exploits yet, as each is not the worst when it gets there."""
    runner = FakeRunner(scheduler)
    for i in range(size):
        config = {"float_factor": 2.0, "const_factor": 3, "int_factor": 10, "id_factor": i}
        runner.add(f"t{i}", config).checkpoint = f"checkpoint of t{i}"
    assert {runner.report(t, **result(10, 50 * i)) for i, t in enumerate(runner.trials)} == {
        "CONTINUE"
    }
    return runner, runner.trials


def scores(scheduler, trials):
    return [scheduler._scores[t.trial_id] for t in trials]


def test_a_trial_in_the_bottom_quantile_exploits_a_top_trial_at_its_perturbation_point():
    scheduler = pbt()
    runner, trials = population(scheduler)
    assert runner.report(trials[0], **result(15, -100)) == "CONTINUE"  # not at 20 yet
    assert scores(scheduler, trials) == [0, 50, 100, 150, 200]
    decision = runner.report(trials[0], **result(20, -100))
    assert isinstance(decision, Exploit)
    assert decision.donor in (trials[3], trials[4])
    assert scheduler.num_perturbations == 1
    assert scores(scheduler, trials) == [-100, 50, 100, 150, 200]
    # ceil(5 * 0.25) = 2 trials are bottom: the third one, now at 40, exploits too
    assert isinstance(runner.report(trials[2], **result(20, 40)), Exploit)
    assert scheduler.num_perturbations == 2


def test_the_exploited_config_is_the_donors_perturbed():
    scheduler = pbt()
    runner, trials = population(scheduler)
    decision = runner.report(trials[0], **result(20, -100))
    donor = decision.donor.config
    assert decision.config["id_factor"] == 100  # a list of one value
    assert decision.config["float_factor"] in (2.4, 1.6)
    assert isinstance(decision.config["float_factor"], float)
    assert decision.config["int_factor"] in (8, 12)
    assert isinstance(decision.config["int_factor"], int)
    assert decision.config["const_factor"] == donor["const_factor"] == 3
    assert trials[0].config == decision.config  # the runner takes it, and restarts the trial


def test_resampling_draws_from_the_mutations_own_values():
    scheduler = pbt(resample_probability=1.0)
    runner, trials = population(scheduler)
    config = runner.report(trials[0], **result(20, -100)).config
    assert (config["float_factor"], config["int_factor"], config["id_factor"]) == (100.0, 10, 100)
    assert isinstance(config["float_factor"], float) and isinstance(config["int_factor"], int)
    domains = pbt(
        resample_probability=1.0,
        hyperparam_mutations={"id_factor": tune.choice([100]), "lr": tune.uniform(0.5, 0.6)},
    )
    explored = domains.explore({"id_factor": 3, "lr": 0.1})
    assert explored["id_factor"] == 100 and 0.5 <= explored["lr"] <= 0.6


def test_scores_count_only_at_perturbation_points():
    scheduler = pbt()
    runner, trials = population(scheduler)
    runner.report(trials[0], **result(15, 200))
    assert scores(scheduler, trials) == [0, 50, 100, 150, 200]
    runner.report(trials[0], **result(20, 200))
    runner.report(trials[1], **result(30, 201))
    assert scores(scheduler, trials) == [200, 201, 100, 150, 200]
    assert scheduler.num_perturbations == 0  # the top ones never exploit


def test_only_donors_with_a_checkpoint_are_exploited():
    scheduler = pbt()
    runner, trials = population(scheduler)
    trials[4].checkpoint = None
    assert runner.report(trials[0], **result(20, -100)).donor is trials[3]
    trials[3].checkpoint = None
    assert runner.report(trials[1], **result(20, -100)) == "CONTINUE"  # nobody to copy
    assert scheduler.num_perturbations == 1


def test_nothing_is_exploited_before_the_burn_in_period():
    scheduler = pbt(burn_in_period=25)
    runner = FakeRunner(scheduler)
    good, bad = runner.add("good"), runner.add("bad")
    good.checkpoint = "checkpoint"
    runner.report(good, **result(30, 100))
    assert runner.report(bad, **result(20, -100)) == "CONTINUE"
    assert isinstance(runner.report(bad, **result(30, -100)), Exploit)


def test_the_next_perturbation_point_is_an_interval_after_the_last():
    scheduler = pbt()
    runner, trials = population(scheduler)
    assert isinstance(runner.report(trials[0], **result(20, -100)), Exploit)
    runner.resume(trials[0])  # it goes on with its own count (as the Tuner runs it)
    assert runner.report(trials[0], **result(29, -100)) == "CONTINUE"
    assert isinstance(runner.report(trials[0], **result(30, -100)), Exploit)
    assert scheduler.num_perturbations == 2


def test_a_trial_that_ended_still_ranks_and_can_be_exploited():
    scheduler = pbt(quantile_fraction=0.5)
    runner = FakeRunner(scheduler)
    finished = runner.add("finished")
    finished.checkpoint = "its last checkpoint"
    runner.report(finished, **result(10, 100))
    runner.complete(finished)
    late = runner.add("late")
    assert runner.report(late, **result(10, 1)).donor is finished


def test_a_zero_quantile_fraction_exploits_nothing():
    scheduler = pbt(quantile_fraction=0.0)
    runner, trials = population(scheduler)
    assert runner.report(trials[0], **result(20, -1000)) == "CONTINUE"
    assert scheduler._quantiles() == ([], [])


def test_mode_min_exploits_the_highest_losses():
    scheduler = PopulationBasedTraining(
        time_attr="step",
        metric="loss",
        mode="min",
        perturbation_interval=1,
        hyperparam_mutations={"lr": [0.1, 0.2]},
        quantile_fraction=0.5,
        seed=0,
    )
    runner = FakeRunner(scheduler)
    low, high = runner.add("low", {"lr": 0.1}), runner.add("high", {"lr": 0.2})
    low.checkpoint = "checkpoint"
    assert runner.report(low, step=1, loss=0.1) == "CONTINUE"
    assert runner.report(high, step=1, loss=0.9).donor is low


def test_the_waiting_trial_that_trained_least_runs_first():
    scheduler = pbt()
    runner, trials = population(scheduler)
    for trial, t, reward in zip(trials, (800, 700, 600, 500, 700), range(1000, 1005), strict=True):
        runner.report(trial, **result(t, reward))
    assert runner.next_to_run() is None
    for trial in trials:
        trial.status = "PENDING"
    assert runner.next_to_run() is trials[3]
    trials[3].status = "RUNNING"
    trials[1].status = "PAUSED"
    assert runner.next_to_run() is trials[2]  # 600; then 700 before 700 in creation order
    trials[2].status = "RUNNING"
    assert runner.next_to_run() is trials[1]


@pytest.mark.parametrize(
    "value, space, produced",
    [
        (4, [3, 4, 8, 10], {3, 8}),  # a step to a neighbour
        (3, [3, 4, 8, 10], {3, 4}),  # at the edge: stays or steps in
        (10, [3, 4, 8, 10], {8, 10}),
        (7, [3, 4, 8, 10], {3, 4, 8, 10}),  # not among them: any of them
        (4, (3, 4, 8, 10), {3, 8}),
        (100, lambda: 5, {80, 120}),  # an integer stays an integer
        (7, lambda: 5, {6, 8}),  # 5.6 and 8.4, rounded as Ray Tune does
        (100.0, lambda: 5, {80.0, 120.0}),
        (True, lambda: False, {True}),  # a flag stays a flag
    ],
)
def test_explored_values(value, space, produced):
    scheduler = pbt(hyperparam_mutations={"v": space})
    seen = [scheduler.explore({"v": value})["v"] for _ in range(100)]
    assert set(seen) == produced
    assert {type(v) for v in seen} == {type(value)}


def test_resampling_always_gives_any_value():
    lists = pbt(hyperparam_mutations={"v": [3, 4, 8, 10]}, resample_probability=1.0)
    assert {lists.explore({"v": 4})["v"] for _ in range(100)} == {3, 4, 8, 10}
    functions = pbt(hyperparam_mutations={"v": lambda: 10.0}, resample_probability=1.0)
    assert {functions.explore({"v": 100.0})["v"] for _ in range(20)} == {10.0}


def test_nested_mutations_follow_nested_configs_and_the_custom_function_runs_last():
    calls = []

    def custom(config):
        calls.append(dict(config))
        return {**config, "added": True}

    scheduler = pbt(
        hyperparam_mutations={"a": {"b": [3, 4, 8, 10]}, "1": {"2": {"3": lambda: 0}}},
        custom_explore_fn=custom,
    )
    seen_b, seen_3 = set(), set()
    for _ in range(100):
        new = scheduler.explore({"a": {"b": 4, "c": "kept"}, "1": {"2": {"3": 100}}})
        seen_b.add(new["a"]["b"])
        seen_3.add(new["1"]["2"]["3"])
        assert new["a"]["c"] == "kept" and new["added"] is True
    assert (seen_b, seen_3) == ({3, 8}, {80, 120})
    assert len(calls) == 100 and "added" not in calls[0]


def test_the_same_seed_explores_the_same_way():
    def run(seed):
        scheduler = PopulationBasedTraining(
            hyperparam_mutations={"lr": tune.loguniform(1e-4, 1e-1), "n": [1, 2, 3]}, seed=seed
        )
        return [scheduler.explore({"lr": 0.01, "n": 2}) for _ in range(20)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_a_new_trials_missing_mutated_keys_are_sampled_from_the_mutations():
    scheduler = pbt(
        hyperparam_mutations={
            "choices": [1, 2, 3],
            "lr": tune.loguniform(1e-4, 1e-2),
            "fn": lambda: "called",
            "nested": {"depth": tune.randint(1, 4)},
            "given": [5, 6],
        }
    )
    trial = FakeRunner(scheduler).add("t0", {"given": 99, "nested": {"width": 8}})
    config = trial.config
    assert config["choices"] in (1, 2, 3) and 1e-4 <= config["lr"] <= 1e-2
    assert config["fn"] == "called" and config["given"] == 99
    assert config["nested"]["width"] == 8 and config["nested"]["depth"] in (1, 2, 3)


def test_a_result_without_the_time_or_the_metric_is_an_error_unless_allowed():
    runner, trials = population(pbt())
    with pytest.raises(ValueError, match=r"needs 'training_iteration' in every result"):
        runner.report(trials[0], reward=4)
    with pytest.raises(ValueError, match=r"needs 'reward' in every result.*require_attrs=False"):
        runner.report(trials[0], training_iteration=20, other=10)
    lenient, lenient_trials = population(pbt(require_attrs=False))
    assert lenient.report(lenient_trials[0], reward=4) == "CONTINUE"
    assert lenient.report(lenient_trials[0], training_iteration=20) == "CONTINUE"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hyperparam_mutations": {"x": tune.sample_from(lambda: 1)}}, "sample_from cannot be"),
        ({"hyperparam_mutations": {"x": {3, 4}}}, "must be lists, Tune domains or functions"),
        ({"hyperparam_mutations": {"a": {"x": "nope"}}}, r"got a/x='nope'"),
        ({"hyperparam_mutations": {}}, "needs hyperparam_mutations or custom_explore_fn"),
        ({"quantile_fraction": 0.6}, r"quantile_fraction must be in \[0, 0.5\], got 0.6"),
        ({"perturbation_interval": 0}, "perturbation_interval must be > 0, got 0"),
        ({"synch": True}, r"synch=True\) is not supported.*HINT: leave synch=False"),
    ],
)
def test_bad_arguments_are_refused_at_construction(kwargs, message):
    kwargs.setdefault("hyperparam_mutations", {"x": [1, 2]})
    with pytest.raises(ValueError, match=message):
        PopulationBasedTraining(**kwargs)


def test_a_custom_explore_function_alone_is_enough():
    scheduler = PopulationBasedTraining(custom_explore_fn=lambda c: {**c, "lr": c["lr"] / 2})
    assert scheduler.explore({"lr": 1.0}) == {"lr": 0.5}


def test_a_result_without_metric_or_mode_set_is_an_error():
    runner = FakeRunner(PopulationBasedTraining(hyperparam_mutations={"x": [1]}))
    with pytest.raises(ValueError, match=r"PopulationBasedTraining needs a metric and a mode"):
        runner.report(runner.add("t0"), **result(1, 1))
