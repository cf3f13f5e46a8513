"""Scalers against scikit-learn: the same statistics and the same transform."""

import warnings

import numpy as np
import pytest
import sklearn.preprocessing as skp
from hypothesis import given, settings

import lockstep.data as ld
from lockstep.data.preprocessors import (
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    Scaler,
    StandardScaler,
)
from tests.unit.data.preprocessors.strategies import matrix, numeric_blocks, transformed
from tests.unit.data.strategies import SETTINGS

PAIRS = [
    (lambda: StandardScaler(["a", "b"]), skp.StandardScaler),
    (lambda: MinMaxScaler(["a", "b"]), skp.MinMaxScaler),
    (lambda: MaxAbsScaler(["a", "b"]), skp.MaxAbsScaler),
    (lambda: RobustScaler(["a", "b"]), skp.RobustScaler),
]


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda p: getattr(p, "__name__", ""))
@settings(**SETTINGS)
@given(parts=numeric_blocks())
def test_scalers_match_scikit_learn(ours, theirs, parts):
    data = matrix(parts, ["a", "b"])
    present = ~np.isnan(data).all(axis=0)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns about all-NaN columns
        expected = theirs().fit(data).transform(data)
    got = transformed(ours(), parts, ["a", "b"])
    # scikit-learn leaves a column with no values as it is; lockstep gives nulls (NaN)
    np.testing.assert_allclose(got[:, present], expected[:, present], rtol=1e-9, atol=1e-9)
    assert np.isnan(got[:, ~present]).all()


@settings(**SETTINGS)
@given(parts=numeric_blocks(missing=False))
def test_standard_scaler_statistics_are_population_mean_and_std(parts):
    data = matrix(parts, ["a", "b"])
    stats = StandardScaler(["a", "b"]).fit(ld.from_arrow(parts)).stats_
    assert stats["mean(a)"] == pytest.approx(data[:, 0].mean())
    assert stats["std(b)"] == pytest.approx(data[:, 1].std(), abs=1e-9)


def test_output_columns_and_integer_inputs():
    ds = ld.from_items([{"x": 1}, {"x": 3}])
    out = StandardScaler(["x"], output_columns=["x_scaled"]).fit_transform(ds).take_all()
    assert out == [{"x": 1, "x_scaled": -1.0}, {"x": 3, "x_scaled": 1.0}]


def test_float32_columns_stay_float32():
    import pyarrow as pa

    ds = ld.from_arrow(pa.table({"x": pa.array([1.0, 2.0], pa.float32())}))
    assert MinMaxScaler(["x"]).fit_transform(ds).schema().field("x").type == pa.float32()


def test_scaler_is_the_older_name_of_standard_scaler():
    assert Scaler is StandardScaler


def test_robust_scaler_quantile_range():
    ds = ld.range(101)
    stats = RobustScaler(["id"], quantile_range=(0.1, 0.9)).fit(ds).stats_
    assert (stats["low_quantile(id)"], stats["median(id)"], stats["high_quantile(id)"]) == (
        10.0,
        50.0,
        90.0,
    )
    with pytest.raises(ValueError, match="quantile_range"):
        RobustScaler(["id"], quantile_range=(0.9, 0.1))


@pytest.mark.parametrize("bad", [[], [1], None, ["a", 2]])
def test_bad_columns(bad):
    with pytest.raises(ValueError, match="non-empty list of column names"):
        StandardScaler(bad)


def test_output_columns_must_match_columns():
    with pytest.raises(ValueError, match="one output column per input column"):
        MinMaxScaler(["a", "b"], output_columns=["c"])
