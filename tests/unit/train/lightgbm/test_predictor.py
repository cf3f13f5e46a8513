"""LightGBMPredictor: the booster's features found among the batch's columns."""

import lightgbm
import numpy as np
import pandas as pd

from lockstep.train.lightgbm import LightGBMPredictor

PARAMS = {"objective": "binary", "verbose": -1, "min_data_in_leaf": 2, "min_data_in_bin": 1}


def test_columns_with_spaces_match_the_saved_feature_names():
    frame = pd.DataFrame({"mean radius": np.arange(40.0), "y": np.arange(40) >= 20})
    booster = lightgbm.train(PARAMS, lightgbm.Dataset(frame[["mean radius"]], label=frame["y"]), 5)
    assert booster.feature_name() == ["mean_radius"]
    predicted = LightGBMPredictor(booster).predict(frame)["predictions"]
    assert ((predicted > 0.5) == frame["y"]).all()


def test_a_booster_trained_on_an_array_takes_the_columns_in_order():
    x = np.arange(40.0).reshape(20, 2)
    booster = lightgbm.train(PARAMS, lightgbm.Dataset(x, label=x[:, 0] > 19), 3)
    frame = pd.DataFrame({"first": x[:, 0], "second": x[:, 1]})
    predicted = LightGBMPredictor(booster).predict(frame)["predictions"]
    np.testing.assert_allclose(predicted, booster.predict(x))
