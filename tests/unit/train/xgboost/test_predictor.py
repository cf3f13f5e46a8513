"""XGBoostPredictor on batches: several outputs per row, chosen feature columns."""

import numpy as np
import pandas as pd
import xgboost

from lockstep.train.xgboost import XGBoostPredictor


def test_multiclass_probabilities_are_one_column_per_class():
    frame = pd.DataFrame({"x": np.arange(30.0), "y": np.arange(30) // 10})
    data = xgboost.DMatrix(frame[["x"]], label=frame["y"])
    booster = xgboost.train({"objective": "multi:softprob", "num_class": 3}, data, 5)
    predicted = XGBoostPredictor(booster).predict(frame)
    assert list(predicted.columns) == ["predictions_0", "predictions_1", "predictions_2"]
    assert (predicted.to_numpy().argmax(axis=1) == frame["y"].to_numpy()).all()


def test_feature_columns_and_predict_arguments():
    x = np.arange(20.0).reshape(10, 2)
    booster = xgboost.train({}, xgboost.DMatrix(x, label=x[:, 0]), 4)  # unnamed features
    frame = pd.DataFrame({"id": range(10), "u": x[:, 0], "v": x[:, 1]})
    predicted = XGBoostPredictor(booster).predict(
        frame, feature_columns=["u", "v"], iteration_range=(0, 2)
    )
    expected = booster.predict(xgboost.DMatrix(x), iteration_range=(0, 2))
    np.testing.assert_allclose(predicted["predictions"], expected)
