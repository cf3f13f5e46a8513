"""Stoppers: RunConfig(stop=...) as a dict, a function or a Stopper."""

from __future__ import annotations

import pytest

from lockstep import tune
from lockstep.tune._stopper import as_stopper
from lockstep.tune.stopper import MaximumIterationStopper, Stopper


def test_the_maximum_iteration_stopper_stops_at_max_iter():
    stopper = MaximumIterationStopper(3)
    assert [stopper("t", {"training_iteration": i}) for i in (1, 2, 3, 4)] == [
        False,
        False,
        True,
        True,
    ]
    assert stopper("t", {}) is False and stopper.stop_all() is False


def test_a_dict_stops_a_trial_once_any_metric_reaches_its_threshold():
    stopper = as_stopper({"training_iteration": 10, "acc": 0.9})
    assert stopper("t", {"training_iteration": 9, "acc": 0.5}) is False
    assert stopper("t", {"training_iteration": 10, "acc": 0.5}) is True
    assert stopper("t", {"training_iteration": 1, "acc": 0.95}) is True
    assert stopper("t", {"loss": 1}) is False  # missing metrics never stop it
    assert stopper.stop_all() is False


def test_a_nested_metric_is_named_by_its_path_as_in_ray_tunes_flattened_results():
    result = {"val": {"loss": -1.0, "acc": 0.5}, "train/acc": 0.2}
    assert as_stopper({"val/acc": 0.5})("t", result) is True
    assert as_stopper({"val": {"acc": 0.6}})("t", result) is False
    assert as_stopper({"val": {"acc": 0.5}})("t", result) is True
    assert as_stopper({"train/acc": 0.2})("t", result) is True  # a flat key with a slash
    assert as_stopper({"val/missing": 0})("t", result) is False
    assert as_stopper({"val/acc/deeper": 0})("t", result) is False


def test_a_function_stops_a_trial_when_it_returns_true():
    seen = []

    def stop(trial_id, result):
        seen.append(trial_id)
        return result["loss"] < 0.1

    stopper = as_stopper(stop)
    assert stopper("a", {"loss": 1.0}) is False and stopper("b", {"loss": 0.0}) is True
    assert seen == ["a", "b"]


def test_a_stopper_is_used_as_it_is_and_its_stop_all_ends_the_experiment():
    class AfterTwo(tune.Stopper):
        def __init__(self):
            self.results = 0

        def __call__(self, trial_id, result):
            self.results += 1
            return False

        def stop_all(self):
            return self.results >= 2

    stopper = AfterTwo()
    assert as_stopper(stopper) is stopper
    stopper("a", {}), stopper("b", {})
    assert stopper.stop_all() is True
    assert Stopper()("t", {"x": 1}) is False and Stopper().stop_all() is False
    assert as_stopper(None) is None


def test_anything_else_is_refused_with_the_forms_allowed():
    with pytest.raises(ValueError, match=r"stop must be a dict, a function.*HINT: stop="):
        as_stopper(10)
