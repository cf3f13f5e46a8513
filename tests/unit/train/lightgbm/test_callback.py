"""The LightGBM report callback's pieces that need no workers: combining workers' metrics."""

import os

import lightgbm
import numpy as np
import pytest
from lightgbm.callback import EvalResult

from lockstep.train import Checkpoint
from lockstep.train.lightgbm import LightGBMConfig, RayTrainReportCallback, ReportCallback
from lockstep.train.lightgbm._callback import _combine, _with_value


def test_means_are_weighted_by_rows():
    assert _combine("binary_error", [(0.1, 100), (0.4, 50)]) == pytest.approx(0.2)


def test_root_mean_squares_combine_as_squares():
    value = _combine("rmse", [(1.0, 1), (3.0, 1)])
    assert value == pytest.approx(np.sqrt(5.0))


def test_a_result_takes_the_combined_value():
    result = EvalResult("valid", "auc", 0.7, True)
    assert _with_value(result, 0.8) == EvalResult("valid", "auc", 0.8, True)
    assert _with_value(("valid", "auc", 0.7, True), 0.8) == ("valid", "auc", 0.8, True)


def test_callback_runs_before_lightgbms_own_callbacks():
    assert RayTrainReportCallback().order < 0
    assert ReportCallback is RayTrainReportCallback


def test_get_model(tmp_path):
    data = lightgbm.Dataset(np.arange(20.0).reshape(10, 2), label=np.arange(10.0))
    booster = lightgbm.train({"verbose": -1, "min_data_in_leaf": 2}, data, 3)
    booster.save_model(os.path.join(tmp_path, "model.txt"))
    loaded = RayTrainReportCallback.get_model(Checkpoint.from_directory(tmp_path))
    assert loaded.current_iteration() == 3


def test_backend_config():
    assert LightGBMConfig().backend_cls.__name__ == "LightGBMBackend"
