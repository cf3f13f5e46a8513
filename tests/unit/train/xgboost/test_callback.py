"""The xgboost report callback's pieces that need no workers."""

import os

import numpy as np
import pytest
import xgboost

from lockstep.train import Checkpoint
from lockstep.train.xgboost import RayTrainReportCallback, ReportCallback, XGBoostConfig
from lockstep.train.xgboost._callback import flatten


def test_evaluation_log_is_flattened_to_the_last_values():
    log = {"train": {"logloss": [0.5, 0.4]}, "valid": {"error": [0.2, 0.1], "auc": [(0.9, 0.01)]}}
    assert flatten(log) == {"train-logloss": 0.4, "valid-error": 0.1, "valid-auc": 0.9}


def test_report_callback_is_also_called_report_callback():
    assert ReportCallback is RayTrainReportCallback


def test_get_model_with_another_filename(tmp_path):
    booster = xgboost.train({}, xgboost.DMatrix(np.eye(3), label=[0, 1, 2]), 3)
    booster.save_model(os.path.join(tmp_path, "booster.json"))
    checkpoint = Checkpoint.from_directory(tmp_path)
    loaded = RayTrainReportCallback.get_model(checkpoint, filename="booster.json")
    assert loaded.get_dump() == booster.get_dump()
    with pytest.raises(ValueError, match=r"no booster file 'model\.ubj' \(it holds \['booster"):
        RayTrainReportCallback.get_model(checkpoint)
    with pytest.raises(ValueError, match="get_model takes a Checkpoint"):
        RayTrainReportCallback.get_model(str(tmp_path))  # type: ignore[arg-type]


def test_bad_callback_arguments():
    with pytest.raises(ValueError, match="frequency must be"):
        RayTrainReportCallback(frequency=-2)


def test_backend_config():
    assert XGBoostConfig().backend_cls.__name__ == "XGBoostBackend"
