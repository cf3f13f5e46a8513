"""Turning a param_space into configs: paths, grid combinations, resolution, tags."""

from __future__ import annotations

import numpy as np

from lockstep import tune
from lockstep.tune._variants import (
    get_path,
    grid_paths,
    grid_variant,
    num_grid_variants,
    resolve,
    set_path,
    tag,
    walk,
)

SPACE = {
    "z": tune.grid_search([1, 2]),
    "opt": {"lr": tune.uniform(0, 1), "name": "sgd", "m": tune.grid_search([0.0, 0.9, 0.99])},
    "a": tune.grid_search(["x"]),
}


def test_walk_yields_every_leaf_with_its_path_and_grid_entries_as_leaves():
    leaves = dict(walk(SPACE))
    assert list(leaves) == [("z",), ("opt", "lr"), ("opt", "name"), ("opt", "m"), ("a",)]
    assert leaves[("z",)] == {"grid_search": [1, 2]}


def test_paths_set_and_get_nested_values():
    config: dict = {}
    set_path(config, ("a", "b", "c"), 1)
    set_path(config, ("a", "d"), 2)
    assert config == {"a": {"b": {"c": 1}, "d": 2}}
    assert get_path(config, ("a", "b", "c")) == 1


def test_grids_are_ordered_by_path_and_counted_together():
    assert [path for path, _ in grid_paths(SPACE)] == [("a",), ("opt", "m"), ("z",)]
    assert num_grid_variants(SPACE) == 6
    assert num_grid_variants({"x": 1}) == 1
    combos = [grid_variant(SPACE, i) for i in range(6)]
    assert [(c[("opt", "m")], c[("z",)]) for c in combos] == [
        (0.0, 1),
        (0.9, 1),
        (0.99, 1),
        (0.0, 2),
        (0.9, 2),
        (0.99, 2),
    ]
    assert {c[("a",)] for c in combos} == {"x"}


def test_resolve_takes_grid_values_draws_the_rest_and_runs_functions_last():
    space = {
        "double": tune.sample_from(lambda spec: spec.config.g * 2),
        "g": tune.grid_search([5]),
        "u": tune.uniform(0, 1),
        "given": tune.uniform(0, 1),
        "const": [1, 2],
    }
    rng = np.random.default_rng(0)
    config = resolve(space, {("g",): 5}, rng, drawn={("given",): 0.5})
    assert config["double"] == 10 and config["g"] == 5 and config["given"] == 0.5
    assert 0 <= config["u"] <= 1 and config["const"] == [1, 2]
    assert config["const"] is not space["const"]


def test_tags_name_the_searched_values_only():
    config = {"z": 2, "opt": {"lr": 0.123456, "name": "sgd", "m": 0.9}, "a": "x"}
    assert tag(config, SPACE) == "z=2,opt/lr=0.1235,opt/m=0.9,a=x"
    assert tag({"obj": object()}, {"obj": tune.choice([object()])}) == "obj=object"


def test_a_constant_that_cannot_be_copied_is_shared():
    def numbers():
        yield 1

    generator = numbers()
    config = resolve({"items": [generator]}, {}, np.random.default_rng(0))
    assert config["items"][0] is generator
