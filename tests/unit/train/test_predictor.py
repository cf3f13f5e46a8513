"""Predictor and BatchPredictor: batch formats, the preprocessor, lazy batch prediction."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xgboost

import lockstep.data as ld
from lockstep.data.preprocessors import StandardScaler
from lockstep.train import BatchPredictor, Checkpoint, Predictor
from lockstep.train._predictor import prediction_frame
from lockstep.train.xgboost import XGBoostPredictor


class Sum(Predictor):
    """Predicts the sum of the features: easy to check by hand."""

    @classmethod
    def from_checkpoint(cls, checkpoint):
        return cls(preprocessor=checkpoint.get_preprocessor())

    def _predict_pandas(self, data, feature_columns=None, scale=1.0):
        return prediction_frame(data.sum(axis=1).to_numpy() * scale, data.index)


@pytest.fixture
def frame():
    return pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [10.0, 20.0, 30.0]})


def test_every_batch_format_comes_back_as_it_went(frame):
    predictor = Sum()
    assert predictor.predict(frame)["predictions"].tolist() == [11.0, 22.0, 33.0]
    # numpy in, numpy out, as Ray gives it: one array for one output column
    as_numpy = predictor.predict({"a": frame["a"].to_numpy(), "b": frame["b"].to_numpy()})
    assert isinstance(as_numpy, np.ndarray) and as_numpy.tolist() == [11.0, 22.0, 33.0]
    as_array = predictor.predict(frame.to_numpy())
    assert isinstance(as_array, np.ndarray) and as_array.tolist() == [11.0, 22.0, 33.0]
    as_arrow = predictor.predict(pa.Table.from_pandas(frame))
    assert as_arrow.column("predictions").to_pylist() == [11.0, 22.0, 33.0]
    with pytest.raises(ValueError, match="takes a pandas DataFrame"):
        predictor.predict([1, 2])


def test_the_preprocessor_runs_before_the_model(frame):
    scaler = StandardScaler(["a", "b"]).fit(ld.from_pandas(frame))
    predicted = Sum(preprocessor=scaler).predict(frame)["predictions"]
    np.testing.assert_allclose(predicted, scaler.transform_batch(frame).sum(axis=1))


def test_keyword_arguments_reach_the_model(frame):
    assert Sum().predict(frame, scale=2.0)["predictions"].tolist() == [22.0, 44.0, 66.0]


def test_several_outputs_per_row():
    out = prediction_frame(np.array([[0.1, 0.9], [0.8, 0.2]]))
    assert list(out.columns) == ["predictions_0", "predictions_1"]


def test_batch_predictor_is_lazy_and_loads_the_model_once_per_process(tmp_path, frame):
    scaler = StandardScaler(["a", "b"]).fit(ld.from_pandas(frame))
    checkpoint = Checkpoint.from_directory(tmp_path)
    checkpoint.set_preprocessor(scaler)
    dataset = ld.from_pandas(frame).map_batches(
        lambda df: df.assign(id=df["a"]), batch_format="pandas"
    )
    predicted = BatchPredictor.from_checkpoint(checkpoint, Sum).predict(
        dataset, feature_columns=["a", "b"], keep_columns=["id"], batch_size=2
    )
    assert predicted.columns() == ["predictions", "id"]
    out = predicted.to_pandas()
    np.testing.assert_allclose(out["predictions"], scaler.transform_batch(frame).sum(axis=1))
    assert out["id"].tolist() == [1.0, 2.0, 3.0]
    assert BatchPredictor(checkpoint, Sum).get_preprocessor().stats_ == scaler.stats_


def test_batch_predictor_checks_its_arguments(tmp_path, frame):
    checkpoint = Checkpoint.from_directory(tmp_path)
    with pytest.raises(ValueError, match="takes a Checkpoint"):
        BatchPredictor(str(tmp_path), Sum)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a Predictor class"):
        BatchPredictor(checkpoint, XGBoostPredictor(None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"takes a lockstep\.data Dataset"):
        BatchPredictor(checkpoint, Sum).predict(frame)


def test_xgboost_predictor_leaves_out_columns_the_booster_was_not_trained_on(tmp_path, frame):
    booster = xgboost.train({}, xgboost.DMatrix(frame, label=[0.0, 1.0, 2.0]), 5)
    booster.save_model(os.path.join(tmp_path, "model.ubj"))
    predictor = XGBoostPredictor.from_checkpoint(Checkpoint.from_directory(tmp_path))
    with_extra = frame.assign(label=[0, 1, 2], id=[7, 8, 9])[["id", "b", "label", "a"]]
    np.testing.assert_allclose(
        predictor.predict(with_extra)["predictions"], booster.predict(xgboost.DMatrix(frame))
    )
    with pytest.raises(ValueError, match=r"trained on columns \['b'\] that the batch lacks"):
        predictor.predict(frame[["a"]])


def test_a_checkpoint_without_the_model_file(tmp_path):
    with pytest.raises(ValueError, match=r"holds no booster file 'model.ubj' \(it holds \[\]\)"):
        XGBoostPredictor.from_checkpoint(Checkpoint.from_directory(tmp_path))
