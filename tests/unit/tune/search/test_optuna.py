"""OptunaSearch on the real Optuna: ask and tell, seeds, states, points, saving."""

from __future__ import annotations

import math
import os

import optuna
import pytest

from lockstep import tune
from lockstep.tune.search.optuna import OptunaSearch
from tests.unit.tune.fakes import through_experiment_state

SPACE = {
    "lr": tune.loguniform(1e-4, 1e-1),
    "layers": tune.randint(1, 5),
    "act": tune.choice(["relu", "tanh"]),
    "nested": {"dropout": tune.uniform(0, 0.5), "fixed": "kept"},
    "batch": 32,
}


def search(space=SPACE, **kwargs):
    kwargs.setdefault("metric", "loss")
    kwargs.setdefault("mode", "min")
    searcher = OptunaSearch(**kwargs)
    searcher.set_search_properties(None, None, space)
    return searcher


def states(searcher):
    return [t.state.name for t in searcher.study.get_trials(deepcopy=False)]


def run_study(searcher, count):
    """``count`` trials, each told the loss (lr - 0.01)^2."""
    configs = []
    for i in range(count):
        config = searcher.suggest(f"t{i}")
        configs.append(config)
        searcher.on_trial_complete(f"t{i}", {"loss": (config["lr"] - 0.01) ** 2})
    return configs


def test_a_config_has_the_sampled_values_and_the_constants_nested_as_the_space():
    config = search(seed=0).suggest("t0")
    assert set(config) == {"lr", "layers", "act", "nested", "batch"}
    assert 1e-4 <= config["lr"] <= 1e-1 and config["layers"] in range(1, 5)
    assert config["act"] in ("relu", "tanh") and 0 <= config["nested"]["dropout"] <= 0.5
    assert (config["nested"]["fixed"], config["batch"]) == ("kept", 32)


def test_the_same_seed_gives_the_same_suggestions_past_tpes_startup_trials():
    first, second = run_study(search(seed=5), 15), run_study(search(seed=5), 15)
    assert first == second
    assert run_study(search(seed=6), 15) != first


def test_a_given_sampler_is_used():
    sampler = optuna.samplers.RandomSampler(seed=1)
    searcher = search(sampler=sampler)
    assert searcher.study.sampler is sampler
    again = search(sampler=optuna.samplers.RandomSampler(seed=1))
    assert run_study(searcher, 3) == run_study(again, 3)


def test_the_study_optimises_in_the_direction_of_the_mode():
    assert search(mode="min").study.direction == optuna.study.StudyDirection.MINIMIZE
    assert search(mode="max").study.direction == optuna.study.StudyDirection.MAXIMIZE


def test_a_search_given_its_space_still_takes_the_tuners_mode():
    searcher = OptunaSearch(space={"x": tune.uniform(0, 1)})
    searcher.set_search_properties("acc", "max", {"ignored": tune.uniform(5, 6)})
    assert searcher.study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert set(searcher.suggest("t0")) == {"x"}


def test_without_a_metric_or_a_mode_there_is_no_study_to_suggest_from():
    with pytest.raises(ValueError, match=r"OptunaSearch needs a metric and a mode, got metric="):
        OptunaSearch(space={"x": tune.uniform(0, 1)}, metric="loss").suggest("t0")
    with pytest.raises(RuntimeError, match=r"OptunaSearch has no search space. HINT"):
        OptunaSearch(metric="loss", mode="min").suggest("t0")


def test_completed_trials_are_told_with_their_metric():
    searcher = search(seed=0)
    run_study(searcher, 3)
    trials = searcher.study.trials
    assert states(searcher) == ["COMPLETE"] * 3
    assert [t.value for t in trials] == [(t.params["lr"] - 0.01) ** 2 for t in trials]


def test_failed_pruned_and_unscorable_trials_are_told_so():
    searcher = search(seed=0)
    for trial_id in "abcde":
        searcher.suggest(trial_id)
    searcher.on_trial_complete("a", None, error=True)  # raised
    searcher.on_trial_complete("b", {"loss": 2.0}, error=True)  # raised after its last report
    searcher.on_trial_complete("c", {"training_iteration": 3})  # stopped before any loss
    searcher.on_trial_complete("d", {"loss": math.nan})
    searcher.on_trial_complete("e", {"loss": "n/a"})
    assert states(searcher) == ["FAIL", "COMPLETE", "PRUNED", "FAIL", "FAIL"]
    searcher.on_trial_complete("a", {"loss": 1.0})  # told once only
    assert states(searcher)[0] == "FAIL"


def test_intermediate_results_are_reported_at_their_iteration():
    searcher = search(seed=0)
    searcher.suggest("t0")
    for step, loss in [(1, 0.9), (2, 0.5), (3, 0.4)]:
        searcher.on_trial_result("t0", {"training_iteration": step, "loss": loss})
    searcher.on_trial_result("t0", {"loss": 0.1})  # no iteration: not reported
    searcher.on_trial_result("t0", {"training_iteration": 4})  # no loss: not reported
    searcher.on_trial_complete("t0", {"loss": 0.4})
    assert searcher.study.trials[0].intermediate_values == {1: 0.9, 2: 0.5, 3: 0.4}


def test_asking_twice_for_the_same_trial_gives_the_same_config():
    searcher = search(seed=0)
    assert searcher.suggest("t0") == searcher.suggest("t0")
    assert len(searcher.study.trials) == 1


def test_points_to_evaluate_are_suggested_first():
    points = [{"lr": 0.05, "layers": 2, "act": "tanh", "nested": {"dropout": 0.1}}]
    searcher = search(seed=0, points_to_evaluate=points)
    assert searcher.suggest("t0") == {
        **points[0],
        "nested": {"dropout": 0.1, "fixed": "kept"},
        "batch": 32,
    }
    assert searcher.suggest("t1")["lr"] != 0.05


def test_points_with_known_rewards_join_the_study_without_being_run():
    points = [{"x": 0.1}, {"x": 0.9}]
    searcher = search(
        {"x": tune.uniform(0, 1)}, points_to_evaluate=points, evaluated_rewards=[1.0, 0.2], seed=0
    )
    trials = searcher.study.trials
    assert [(t.state.name, t.params, t.value) for t in trials] == [
        ("COMPLETE", {"x": 0.1}, 1.0),
        ("COMPLETE", {"x": 0.9}, 0.2),
    ]
    assert searcher.suggest("t0")["x"] not in (0.1, 0.9)
    with pytest.raises(ValueError, match=r"one score per point of points_to_evaluate"):
        OptunaSearch(points_to_evaluate=points, evaluated_rewards=[1.0])


def test_optuna_distributions_may_stand_in_the_space():
    space = {"x": optuna.distributions.FloatDistribution(2, 3), "y": tune.uniform(0, 1)}
    config = search(space, seed=0).suggest("t0")
    assert 2 <= config["x"] <= 3 and 0 <= config["y"] <= 1


def test_a_grid_search_in_the_space_is_refused_at_once():
    with pytest.raises(ValueError, match=r"a/b: grid_search cannot be used with OptunaSearch"):
        OptunaSearch(space={"a": {"b": tune.grid_search([1, 2])}})


def test_a_grid_sampler_finishes_the_search_when_its_grid_is_done():
    sampler = optuna.samplers.GridSampler({"x": [1, 2]}, seed=0)
    searcher = search({"x": tune.choice([1, 2])}, sampler=sampler)
    values = []
    for trial_id in ("a", "b"):
        values.append(searcher.suggest(trial_id)["x"])
        assert not searcher.is_finished()
        searcher.on_trial_complete(trial_id, {"loss": 1.0})
    assert sorted(values) == [1, 2] and searcher.is_finished()


def test_a_restored_search_tells_the_study_of_trials_asked_before_the_save(tmp_path):
    searcher = search(seed=0)
    run_study(searcher, 2)
    running = searcher.suggest("running")
    restored = through_experiment_state(tmp_path, searcher=searcher)["searcher"]
    restored.on_trial_complete("running", {"loss": 0.125})
    trials = restored.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert trials[2].params == {k: running[k] for k in ("lr", "layers", "act")} | {
        "nested/dropout": running["nested"]["dropout"]
    }
    assert trials[2].value == 0.125
    assert restored.suggest("next") == searcher.suggest("next")  # the same study, and sampler


def test_a_trial_asked_after_the_save_is_asked_again_with_its_params(tmp_path):
    searcher = search(seed=0)
    restored = through_experiment_state(tmp_path, searcher=searcher)["searcher"]
    config = searcher.suggest("lost")  # asked after the state was written
    restored.restore_trial("lost", config)
    restored.on_trial_complete("lost", {"loss": 3.0})
    (trial,) = restored.study.trials
    assert trial.params["lr"] == config["lr"] and trial.value == 3.0


def test_finished_trials_are_saved_to_sqlite_for_optunas_own_reader(tmp_path):
    searcher = search(seed=0)
    run_study(searcher, 3)
    searcher.suggest("still running")
    path = str(tmp_path / "optuna.db")
    searcher.save_to_sqlite(path)
    searcher.on_trial_complete("still running", None, error=True)
    searcher.save_to_sqlite(path)  # adds only what is new
    searcher.save_to_sqlite(path)
    storage = f"sqlite:///{path}"
    loaded = optuna.load_study(study_name="lockstep", storage=storage)
    mine = searcher.study.trials
    assert [(t.state, t.params, t.value) for t in loaded.trials] == [
        (t.state, t.params, t.value) for t in mine
    ]
    assert loaded.direction == optuna.study.StudyDirection.MINIMIZE
    assert loaded.best_trial.params == searcher.study.best_trial.params
    optuna.storages.RDBStorage(storage).engine.dispose()


def test_the_tuners_metric_and_mode_are_taken_by_a_search_built_without_them():
    searcher = OptunaSearch(seed=0)
    searcher.set_search_properties("acc", "max", {"x": tune.uniform(0, 1)})
    searcher.set_search_properties("loss", "min", {"y": tune.uniform(0, 1)})  # the first stays
    assert (searcher.metric, searcher.mode) == ("acc", "max")
    assert searcher.study.direction == optuna.study.StudyDirection.MAXIMIZE
    searcher.suggest("t0")
    searcher.on_trial_complete("t0", {"acc": 0.75, "loss": 9.0})
    assert searcher.study.trials[0].value == 0.75


def test_a_domain_optuna_cannot_take_is_refused_with_the_space():
    with pytest.raises(ValueError, match=r"has no Optuna equivalent. HINT"):
        OptunaSearch(space={"noise": tune.randn(0, 1)})
    searcher = OptunaSearch(metric="loss", mode="min")
    with pytest.raises(ValueError, match=r"has no Optuna equivalent"):
        searcher.set_search_properties(None, None, {"f": tune.sample_from(lambda: 1)})


def test_results_of_trials_it_never_gave_are_ignored():
    searcher = search(seed=0)
    searcher.on_trial_result("stranger", {"training_iteration": 1, "loss": 1.0})
    searcher.on_trial_complete("stranger", {"loss": 1.0})
    assert searcher.study.trials == []


def test_restoring_a_trial_asks_again_for_the_searched_values_only(tmp_path):
    searcher = search(seed=0)
    config = {"lr": 0.02, "layers": 3, "act": "relu", "nested": {"dropout": 0.2}, "batch": 64}
    searcher.restore_trial("t0", config)
    (trial,) = searcher.study.trials
    assert trial.params == {"lr": 0.02, "layers": 3, "act": "relu", "nested/dropout": 0.2}
    searcher.on_trial_result("t0", {"training_iteration": 1, "loss": 0.5})
    searcher.on_trial_complete("t0", {"loss": 0.25})
    assert searcher.study.trials[0].intermediate_values == {1: 0.5}
    assert searcher.study.trials[0].value == 0.25


def test_an_empty_study_is_saved_as_a_study_without_trials(tmp_path):
    searcher = search(seed=0)
    path = str(tmp_path / "optuna.db")
    searcher.save_to_sqlite(path)
    storage = f"sqlite:///{path}"
    assert optuna.load_study(study_name="lockstep", storage=storage).trials == []
    optuna.storages.RDBStorage(storage).engine.dispose()
    assert OptunaSearch().save_to_sqlite(str(tmp_path / "none.db")) is None
    assert not (tmp_path / "none.db").exists()  # no study yet: nothing to save


def test_the_saved_study_keeps_every_state_distribution_and_intermediate_value(tmp_path):
    searcher = search(seed=0)
    for trial_id in "abc":
        searcher.suggest(trial_id)
        searcher.on_trial_result(trial_id, {"training_iteration": 1, "loss": 0.5})
    searcher.on_trial_complete("a", {"loss": 0.1})
    searcher.on_trial_complete("b", {"training_iteration": 1})
    searcher.on_trial_complete("c", None, error=True)
    path = str(tmp_path / "optuna.db")
    searcher.save_to_sqlite(path)
    storage = f"sqlite:///{path}"
    loaded = optuna.load_study(study_name="lockstep", storage=storage).trials
    assert [t.state.name for t in loaded] == ["COMPLETE", "PRUNED", "FAIL"]
    assert [t.distributions for t in loaded] == [t.distributions for t in searcher.study.trials]
    assert loaded[0].distributions["act"] == optuna.distributions.CategoricalDistribution(
        ["relu", "tanh"]
    )
    assert [t.number for t in loaded] == [0, 1, 2]
    optuna.storages.RDBStorage(storage).engine.dispose()


def test_wrapped_searches_save_their_studies_too(tmp_path):
    from lockstep.tune.search import ConcurrencyLimiter, Repeater

    inner = search(seed=0)
    wrapped = ConcurrencyLimiter(Repeater(inner, repeat=2), max_concurrent=2)
    wrapped.suggest("a"), wrapped.suggest("b")
    wrapped.on_trial_complete("a", {"loss": 1.0})
    wrapped.on_trial_complete("b", {"loss": 2.0})
    path = str(tmp_path / "optuna.db")
    inner.save_to_sqlite(path)
    storage = f"sqlite:///{path}"
    (trial,) = optuna.load_study(study_name="lockstep", storage=storage).trials
    assert trial.value == 1.5
    optuna.storages.RDBStorage(storage).engine.dispose()


def test_the_sqlite_copy_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from lockstep.tune.search import _optuna

    searcher = search(seed=0)
    run_study(searcher, 3)
    path = str(tmp_path / "optuna.db")
    searcher.save_to_sqlite(path)
    run_study(searcher, 2)

    def fails(*args):
        raise OSError("disk full")

    monkeypatch.setattr(_optuna, "_add_trials", fails)
    with pytest.raises(OSError, match="disk full"):
        searcher.save_to_sqlite(path)
    assert os.listdir(tmp_path) == ["optuna.db"]  # no half-written copy left
    storage = f"sqlite:///{path}"
    assert len(optuna.load_study(study_name="lockstep", storage=storage).trials) == 3
    optuna.storages.RDBStorage(storage).engine.dispose()
