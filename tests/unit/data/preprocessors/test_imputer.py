"""SimpleImputer against scikit-learn's."""

import numpy as np
import pytest
import sklearn.impute as ski
from hypothesis import given, settings

import lockstep.data as ld
from lockstep.data.preprocessors import (
    SimpleImputer,
)
from tests.unit.data.preprocessors.strategies import matrix, numeric_blocks, transformed
from tests.unit.data.strategies import SETTINGS


@pytest.mark.filterwarnings("ignore:Skipping features without any observed values")
@pytest.mark.parametrize("strategy", ["mean", "most_frequent"])
@settings(**SETTINGS)
@given(parts=numeric_blocks())
def test_simple_imputer_matches_scikit_learn(strategy, parts):
    data = matrix(parts, ["a", "b"])
    if np.isnan(data).all(axis=0).any():
        # a column with no value at all: scikit-learn drops it, Ray (and lockstep) refuse
        with pytest.raises(ValueError, match="has no fill value"):
            transformed(SimpleImputer(["a", "b"], strategy=strategy), parts, ["a", "b"])
        return
    expected = ski.SimpleImputer(strategy=strategy).fit_transform(data)
    got = transformed(SimpleImputer(["a", "b"], strategy=strategy), parts, ["a", "b"])
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_simple_imputer_constant_needs_no_fit_and_adds_missing_columns():
    imputer = SimpleImputer(["x", "z"], strategy="constant", fill_value=0)
    ds = ld.from_items([{"x": 1}, {"x": None}])
    assert imputer.transform(ds).take_all() == [{"x": 1, "z": 0}, {"x": 0, "z": 0}]
    with pytest.raises(ValueError, match="needs a fill_value"):
        SimpleImputer(["x"], strategy="constant")
    with pytest.raises(ValueError, match="unknown strategy"):
        SimpleImputer(["x"], strategy="median")


def test_simple_imputer_most_frequent_on_strings_breaks_ties_by_the_smallest():
    ds = ld.from_items([{"s": "b"}, {"s": "a"}, {"s": None}])
    assert [r["s"] for r in SimpleImputer(["s"], "most_frequent").fit_transform(ds).take_all()] == [
        "b",
        "a",
        "a",
    ]
