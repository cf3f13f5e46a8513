"""Preprocessors written for Ray's base class (``ray.data.preprocessor``) work unchanged."""

from __future__ import annotations

import base64
import pickle
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import lockstep.data as ld
from lockstep.data.preprocessor import Preprocessor, PreprocessorNotFittedException
from lockstep.data.preprocessors import Chain, Pipeline, StandardScaler


class CenterByMean(Preprocessor):
    """As Ray's guide writes one: state in an attribute ending in ``_``, pandas transform."""

    def __init__(self, column):
        self.column = column

    def _fit(self, dataset):
        self.mean_ = dataset.mean(self.column)
        return self

    def _transform_pandas(self, df):
        df[self.column] = df[self.column] - self.mean_
        return df


class TimesTwo(Preprocessor):
    _is_fittable = False

    def _transform_numpy(self, batch):
        return {k: v * 2 for k, v in batch.items()}


class Both(Preprocessor):
    _is_fittable = False

    def _transform_pandas(self, df):
        return df.assign(kind="pandas")

    def _transform_numpy(self, batch):
        return {**batch, "kind": np.array(["numpy"] * len(batch["x"]))}

    @classmethod
    def preferred_batch_format(cls):
        return "numpy"


def data():
    return ld.from_items([{"x": float(i)} for i in range(5)])


def test_a_custom_preprocessor_in_rays_style_fits_and_transforms():
    prep = CenterByMean("x")
    assert prep.fit_status() is Preprocessor.FitStatus.NOT_FITTED
    with pytest.raises(PreprocessorNotFittedException, match="`fit` must be called"):
        prep.transform(data())
    assert prep.fit(data()) is prep
    assert prep.fit_status() is Preprocessor.FitStatus.FITTED and prep.mean_ == 2.0
    assert [r["x"] for r in prep.transform(data()).take_all()] == [-2.0, -1.0, 0.0, 1.0, 2.0]
    out = prep.transform_batch(pd.DataFrame({"x": [2.0, 4.0]}))
    assert isinstance(out, pd.DataFrame) and out["x"].tolist() == [0.0, 2.0]
    assert prep.transform_batch({"x": np.array([3.0])})["x"].tolist() == [1.0]  # pandas out


def test_state_ending_in_an_underscore_counts_as_fitted_as_in_ray():
    prep = CenterByMean("x")
    prep.mean_ = 10.0  # e.g. restored by hand
    assert prep.fit_status() is Preprocessor.FitStatus.FITTED
    assert prep.transform_batch(pd.DataFrame({"x": [10.0]}))["x"].tolist() == [0.0]


def test_fitting_again_warns_and_replaces_the_state():
    prep = CenterByMean("x").fit(data())
    with pytest.warns(UserWarning, match="already been called"):
        prep.fit(ld.from_items([{"x": 10.0}]))
    assert prep.mean_ == 10.0


def test_a_stateless_numpy_preprocessor_needs_no_fit():
    prep = TimesTwo()
    assert prep.fit_status() is Preprocessor.FitStatus.NOT_FITTABLE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert prep.fit(data()) is prep  # a no-op, as in Ray
    assert [r["x"] for r in prep.transform(data()).take_all()] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert prep.transform_batch(pd.DataFrame({"x": [1.0]}))["x"].tolist() == [2.0]


def test_with_several_transforms_the_preferred_batch_format_chooses():
    assert Both().transform(data()).take(1)[0]["kind"] == "numpy"
    assert Preprocessor.preferred_batch_format() == "pandas"


def test_no_transform_method_is_a_clear_error():
    class Nothing(Preprocessor):
        _is_fittable = False

    with pytest.raises(NotImplementedError, match="At least one of these transform"):
        Nothing().transform(data())


def test_transform_takes_rays_keywords_and_the_arrow_hook():
    class Arrow(Preprocessor):
        _is_fittable = False

        def _transform_arrow(self, table):
            return table.append_column("rows", pa.array([table.num_rows] * table.num_rows))

    out = Arrow().transform(data(), batch_size=2, num_cpus=1, memory=1e9, concurrency=2)
    assert [r["rows"] for r in out.take_all()] == [2, 2, 2, 2, 1]
    fitted = CenterByMean("x").fit_transform(data(), transform_batch_size=2, transform_num_cpus=1)
    assert fitted.count() == 5


def test_serialize_round_trips_and_rays_older_string_format_loads():
    prep = CenterByMean("x").fit(data())
    again = Preprocessor.deserialize(prep.serialize())
    assert type(again) is CenterByMean and again.mean_ == 2.0
    legacy = base64.b64encode(pickle.dumps(StandardScaler(["x"]).fit(data()))).decode("ascii")
    assert Preprocessor.deserialize(legacy).stats_["mean(x)"] == 2.0
    with pytest.raises(ValueError, match="not made by serialize"):
        Preprocessor.deserialize("not base64!")


def test_custom_and_built_in_preprocessors_chain_and_pipeline():
    for kind in (Chain, Pipeline):
        prep = kind(CenterByMean("x"), TimesTwo(), StandardScaler(["x"]))
        assert prep.fit_status() is Preprocessor.FitStatus.NOT_FITTED
        out = prep.fit_transform(data()).to_pandas()["x"]
        np.testing.assert_allclose(out, [-1.414214, -0.707107, 0.0, 0.707107, 1.414214], atol=1e-6)
        batch = prep.transform_batch(pd.DataFrame({"x": [2.0]}))
        assert batch["x"].tolist() == [0.0]


def test_built_ins_follow_the_same_contract():
    scaler = StandardScaler(["x"])
    assert isinstance(scaler, Preprocessor) and scaler.fit_status().value == "NOT_FITTED"
    assert scaler._fit(data()) is scaler and scaler.stats_["mean(x)"] == 2.0
    assert scaler.get_input_columns() == ["x"] and scaler.get_output_columns() == ["x"]
