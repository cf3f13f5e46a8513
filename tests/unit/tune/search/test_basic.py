"""The default search: grid expansion, samples, seeds, points to evaluate, limits, restore."""

from __future__ import annotations

import numpy as np

from lockstep import tune
from lockstep.tune.search import BasicVariantGenerator, Searcher
from tests.unit.tune.fakes import through_experiment_state


def generator(space, num_samples=1, **kwargs):
    gen = BasicVariantGenerator(**kwargs)
    assert gen.set_search_properties(None, None, space, num_samples=num_samples) is True
    return gen


def drain(gen, limit=1000):
    configs = []
    for i in range(limit):
        config = gen.suggest(f"t{i}")
        if config == Searcher.FINISHED:
            return configs
        configs.append(config)
    raise AssertionError(f"more than {limit} configs")


def test_every_grid_value_once_per_sample():
    gen = generator({"x": tune.grid_search([1, 2, 3]), "k": "const"}, num_samples=2)
    assert gen.total_trials == 6
    assert drain(gen) == [{"x": x, "k": "const"} for x in (1, 2, 3)] * 2
    assert gen.is_finished() and gen.suggest("again") == "FINISHED"


def test_grids_vary_in_ray_tunes_order_the_first_sorted_path_fastest():
    space = {
        "b": tune.grid_search(["x", "y", "z"]),
        "a": tune.grid_search([1, 2]),
        "n": {"c": tune.grid_search([7, 8])},
    }
    configs = drain(generator(space))
    assert len(configs) == 12
    assert [(c["a"], c["b"], c["n"]["c"]) for c in configs[:7]] == [
        (1, "x", 7),
        (2, "x", 7),
        (1, "y", 7),
        (2, "y", 7),
        (1, "z", 7),
        (2, "z", 7),
        (1, "x", 8),
    ]


def test_random_domains_are_drawn_anew_for_every_trial():
    space = {"g": tune.grid_search([0, 1]), "u": tune.uniform(0, 1), "n": tune.randn(0, 1)}
    configs = drain(generator(space, num_samples=3, random_state=0))
    assert len({c["u"] for c in configs}) == 6 and len({c["n"] for c in configs}) == 6
    assert all(0 <= c["u"] <= 1 for c in configs)


def test_constant_grid_search_keeps_a_samples_random_values_over_its_grid():
    space = {
        "g": tune.grid_search([1, 2, 3]),
        "u": tune.uniform(0, 1),
        "n": tune.randn(0, 1),
        "f": tune.sample_from(lambda spec: spec.config.g * 10),
    }
    configs = drain(generator(space, num_samples=2, random_state=0, constant_grid_search=True))
    first, second = configs[:3], configs[3:]
    for sample in (first, second):
        assert len({(c["u"], c["n"]) for c in sample}) == 1
        # a function still sees each grid value
        assert [c["f"] for c in sample] == [10, 20, 30]
    assert first[0]["u"] != second[0]["u"]


def test_the_same_random_state_gives_the_same_configs():
    space = {
        "lr": tune.loguniform(1e-4, 1e-1),
        "layers": tune.randint(1, 5),
        "act": tune.choice(["relu", "tanh"]),
        "noise": tune.randn(0, 1),
        "grid": tune.grid_search([1, 2]),
    }
    same = [drain(generator(space, num_samples=4, random_state=3)) for _ in range(2)]
    assert same[0] == same[1]
    assert drain(generator(space, num_samples=4, random_state=4)) != same[0]


def test_sample_from_sees_the_rest_of_the_config():
    space = {
        "width": tune.grid_search([2, 4]),
        "nested": {"depth": 3},
        "area": tune.sample_from(lambda spec: spec.config.width * spec.config.nested.depth),
        "plain": tune.sample_from(lambda: "no spec"),
    }
    assert [(c["area"], c["plain"]) for c in drain(generator(space))] == [
        (6, "no spec"),
        (12, "no spec"),
    ]


def test_points_to_evaluate_replace_samples_as_in_ray_tunes_documented_example():
    gen = generator(
        {"a": tune.grid_search([1, 2]), "b": tune.randint(0, 3)},
        num_samples=4,
        points_to_evaluate=[{"a": 2, "b": 2}, {"a": 1}, {"b": 2}],
        random_state=0,
    )
    assert gen.total_trials == 6
    configs = drain(gen)
    assert configs[0] == {"a": 2, "b": 2}  # a point that sets the grid key: one trial
    assert configs[1]["a"] == 1 and configs[1]["b"] in (0, 1, 2)
    assert configs[2:4] == [{"a": 1, "b": 2}, {"a": 2, "b": 2}]  # b set, a gridded
    assert [c["a"] for c in configs[4:]] == [1, 2]  # the fourth sample: all random


def test_more_points_than_samples_are_all_tried():
    points = [{"x": 0.25}, {"x": 0.5}]
    gen = generator({"x": tune.uniform(0, 1)}, num_samples=1, points_to_evaluate=points)
    assert drain(gen) == [{"x": 0.25}, {"x": 0.5}]


def test_a_point_may_set_nested_keys_and_keys_outside_the_space():
    space = {"opt": {"lr": tune.uniform(0, 1), "momentum": 0.9}}
    gen = generator(space, points_to_evaluate=[{"opt": {"lr": 0.5}, "extra": True}])
    assert drain(gen) == [{"opt": {"lr": 0.5, "momentum": 0.9}, "extra": True}]
    assert space["opt"]["lr"].lower == 0  # the space itself is left as it was


def test_without_end_the_generator_never_finishes():
    gen = generator({"x": tune.uniform(0, 1)}, num_samples=-1)
    assert gen.total_trials == -1
    assert all(isinstance(gen.suggest(f"t{i}"), dict) for i in range(50))
    assert not gen.is_finished()


def test_max_concurrent_holds_suggestions_until_a_trial_completes():
    gen = generator({"x": tune.grid_search([1, 2, 3])}, max_concurrent=2)
    assert gen.suggest("a") == {"x": 1} and gen.suggest("b") == {"x": 2}
    assert gen.suggest("c") is None
    gen.on_trial_complete("a", {"loss": 1})
    assert gen.suggest("c") == {"x": 3}


def test_constants_are_copied_where_they_are_lists_or_dicts_and_shared_otherwise():
    class Dataset:
        pass

    data, options = Dataset(), {"levels": [1, 2]}
    first, second = drain(generator({"data": data, "options": options}, num_samples=2))
    assert first["data"] is data and second["data"] is data
    first["options"]["levels"].append(3)
    assert second["options"] == options == {"levels": [1, 2]}


def test_a_space_of_constants_gives_one_config_per_sample():
    assert drain(generator({"k": 1}, num_samples=3)) == [{"k": 1}] * 3
    assert drain(generator({}, num_samples=2)) == [{}, {}]


def test_a_restored_generator_goes_on_where_the_saved_one_was(tmp_path):
    space = {"g": tune.grid_search([1, 2, 3]), "u": tune.uniform(0, 1)}
    original = generator(space, num_samples=3, random_state=0)
    first = drain_some(original, 4)
    restored = through_experiment_state(tmp_path, searcher=original)["searcher"]
    assert drain(restored) == drain(original)
    assert len(first) == 4 and restored.is_finished()


def drain_some(gen, count):
    return [gen.suggest(f"t{i}") for i in range(count)]


def test_the_default_search_samples_through_optunas_random_sampler():
    gen = generator({"x": tune.uniform(0, 1)}, num_samples=3, random_state=0)
    drain(gen)
    study = gen._study
    assert type(study.sampler).__name__ == "RandomSampler"
    assert len(study.trials) == 3  # one ask and tell per config


def test_numpy_draws_what_optuna_has_no_distribution_for():
    configs = drain(generator({"n": tune.qrandn(10, 2, 0.5)}, num_samples=200, random_state=1))
    values = np.array([c["n"] for c in configs])
    assert np.allclose(values / 0.5, np.round(values / 0.5))
    assert 9.5 < values.mean() < 10.5 and 1.5 < values.std() < 2.5


def test_restoring_the_trials_asked_after_a_save_repeats_them_and_goes_on(tmp_path):
    space = {"g": tune.grid_search([1, 2]), "u": tune.uniform(0, 1)}
    original = generator(space, num_samples=3, random_state=0)
    saved = through_experiment_state(tmp_path, searcher=original)["searcher"]
    lost = drain_some(original, 2)  # asked after the save: the journal knows them
    for i, config in enumerate(lost):
        saved.restore_trial(f"t{i}", config)
    assert drain(saved) == drain(original)


def test_the_count_of_configs_follows_ray_tunes_for_points_grids_and_samples():
    space = {"a": tune.grid_search([1, 2, 3]), "b": tune.grid_search([4, 5])}
    cases = [
        ([], 2, 12),
        ([{"a": 1}], 2, 2 + 6),
        ([{"a": 1, "b": 4}, {"b": 5}], 2, 1 + 3),
        ([{"a": 1}, {"a": 2}, {"a": 3}], 1, 6),
    ]
    for points, num_samples, total in cases:
        gen = generator(space, num_samples=num_samples, points_to_evaluate=points)
        assert gen.total_trials == total
        assert len(drain(gen)) == total


def test_a_finished_generator_says_so_before_minding_its_limit():
    gen = generator({"x": tune.grid_search([1])}, max_concurrent=1)
    assert gen.suggest("a") == {"x": 1}
    assert gen.suggest("b") == "FINISHED"


def test_the_metric_and_mode_of_the_tuner_are_kept():
    gen = BasicVariantGenerator()
    gen.set_search_properties("loss", "min", {})
    assert (gen.metric, gen.mode) == ("loss", "min")
