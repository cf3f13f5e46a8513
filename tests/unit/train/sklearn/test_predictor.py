"""SklearnPredictor and SklearnTrainer.get_model on checkpoints written by hand."""

import os

import cloudpickle
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression

from lockstep.train import Checkpoint
from lockstep.train.sklearn import SklearnPredictor, SklearnTrainer


def test_predicts_from_a_checkpoint_with_the_training_columns(tmp_path):
    frame = pd.DataFrame({"a": [0.0, 1.0, 2.0], "b": [1.0, 0.0, 1.0], "y": [1.0, 3.0, 5.0]})
    model = LinearRegression().fit(frame[["a", "b"]], frame["y"])
    with open(os.path.join(tmp_path, "model.pkl"), "wb") as f:
        cloudpickle.dump(model, f)
    predictor = SklearnPredictor.from_checkpoint(Checkpoint.from_directory(tmp_path))
    predicted = predictor.predict(frame[["y", "b", "a"]])["predictions"]
    np.testing.assert_allclose(predicted, frame["y"])


def test_get_model_without_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"holds no estimator file 'model\.pkl'"):
        SklearnTrainer.get_model(Checkpoint.from_directory(tmp_path))
