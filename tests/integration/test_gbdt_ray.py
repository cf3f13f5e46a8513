"""The GBDT trainers on a real Ray cluster: the xgboost tracker and LightGBM's machine list
use the workers' node addresses."""

from __future__ import annotations

import pytest

from lockstep.train import RunConfig, ScalingConfig
from lockstep.train.lightgbm import LightGBMTrainer
from lockstep.train.xgboost import XGBoostTrainer
from tests.integration.gbdt_data import datasets

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("ray_connected")]


@pytest.mark.parametrize(
    ("trainer", "params", "metric"),
    [
        (XGBoostTrainer, {"objective": "binary:logistic", "eval_metric": "error"}, "valid-error"),
        (
            LightGBMTrainer,
            {"objective": "binary", "metric": "binary_error", "verbose": -1},
            "valid-binary_error",
        ),
    ],
)
def test_classic_form_on_two_ray_workers(tmp_path, trainer, params, metric):
    result = trainer(
        datasets=datasets(),
        label_column="target",
        params=params,
        num_boost_round=5,
        scaling_config=ScalingConfig(num_workers=2, executor="ray"),
        run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert result.metrics[metric] < 0.1
    assert result.return_value["train"] == 200
