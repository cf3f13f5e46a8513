"""Ported from Ray AIR's python/ray/train/tests/test_sklearn_trainer.py and
test_lightgbm_trainer.py (Ray 2.0 to 2.6; imports changed to lockstep, Ray's cluster
fixtures dropped, every assertion kept; runs write into the test's directory).

Left out: both files' test_tune (``tune.run`` and ``trainer.as_trainable()``, Tune's
older entry point), test_default_parameters_* (``trainer._ray_params`` of
xgboost_ray/lightgbm_ray), test_checkpoint_freq's ordering by ``Checkpoint._local_path``
(Ray's internal attribute). Not applicable: test_resume_from_checkpoint's 10 trees (AIR
boosted ``num_boost_round`` more; since Ray 2.3, as lockstep, up to ``num_boost_round``).
"""

from __future__ import annotations

import math

import lightgbm as lgbm
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

import lockstep.data as ld
from lockstep.air import RunConfig
from lockstep.air.checkpoint import Checkpoint
from lockstep.air.config import CheckpointConfig, ScalingConfig
from lockstep.data.preprocessor import Preprocessor
from lockstep.train import TRAIN_DATASET_KEY
from lockstep.train.lightgbm import LightGBMCheckpoint, LightGBMTrainer
from lockstep.train.sklearn import SklearnTrainer

data_raw = load_breast_cancer()
dataset_df = pd.DataFrame(data_raw["data"], columns=data_raw["feature_names"])
dataset_df["target"] = data_raw["target"]
train_df, test_df = train_test_split(dataset_df, test_size=0.3, random_state=0)
params = {"objective": "binary", "metric": ["binary_logloss", "binary_error"]}


@pytest.fixture
def datasets():
    return {TRAIN_DATASET_KEY: ld.from_pandas(train_df), "valid": ld.from_pandas(test_df)}


@pytest.fixture
def run_config(tmp_path):
    return RunConfig(storage_path=str(tmp_path / "runs"), verbose=0)


def sklearn_trainer(datasets, run_config, **kwargs):
    return SklearnTrainer(
        estimator=kwargs.pop("estimator", RandomForestClassifier(n_estimators=10)),
        scaling_config=kwargs.pop("scaling_config", ScalingConfig(trainer_resources={"CPU": 2})),
        label_column="target",
        datasets=datasets,
        run_config=run_config,
        **kwargs,
    )


def test_sklearn_fit(datasets, run_config):
    result = sklearn_trainer(datasets, run_config).fit()
    assert "valid" in result.metrics
    assert "cv" not in result.metrics


def test_sklearn_fit_cv(datasets, run_config):
    result = sklearn_trainer(datasets, run_config, cv=5, return_train_score_cv=True).fit()
    assert "valid" in result.metrics
    assert "cv" in result.metrics
    for key in ("test_score", "test_score_mean", "train_score", "train_score_mean"):
        assert key in result.metrics["cv"]
    assert len(result.metrics["cv"]["test_score"]) == 5  # one per fold


def test_sklearn_no_auto_cpu_params(datasets, run_config):
    trainer = sklearn_trainer(
        datasets, run_config, estimator=RandomForestClassifier(n_jobs=1), set_estimator_cpus=False
    )
    assert SklearnTrainer.get_model(trainer.fit().checkpoint).n_jobs == 1


def test_sklearn_validation(datasets, run_config):
    with pytest.raises(KeyError, match=TRAIN_DATASET_KEY):
        sklearn_trainer({"valid": datasets["valid"]}, run_config)
    with pytest.raises(KeyError, match="cv"):
        sklearn_trainer({TRAIN_DATASET_KEY: datasets["train"], "cv": datasets["valid"]}, run_config)
    with pytest.raises(ValueError, match="are not allowed to be updated"):
        sklearn_trainer(datasets, run_config, scaling_config=ScalingConfig(num_workers=2))
    with pytest.raises(ValueError, match="parallelize_cv"):
        sklearn_trainer(
            datasets,
            run_config,
            scaling_config=ScalingConfig(trainer_resources={"GPU": 1}),
            cv=5,
            parallelize_cv=True,
        )


def lightgbm_trainer(datasets, run_config, **kwargs):
    return LightGBMTrainer(
        scaling_config=ScalingConfig(num_workers=2),
        label_column="target",
        params=kwargs.pop("params", params),
        datasets=datasets,
        run_config=run_config,
        **kwargs,
    )


def num_trees(booster: lgbm.Booster) -> int:
    return booster.current_iteration()


def with_categories(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    column = (["A", "B"] * math.ceil(len(frame) / 2))[: len(frame)]
    frame["categorical_column"] = pd.Series(column, index=frame.index).astype("category")
    return frame


@pytest.mark.slow
def test_lightgbm_fit_with_categoricals(run_config):
    datasets = {
        TRAIN_DATASET_KEY: ld.from_pandas(with_categories(train_df)),
        "valid": ld.from_pandas(with_categories(test_df)),
    }
    result = lightgbm_trainer(datasets, run_config).fit()
    model = LightGBMCheckpoint.from_checkpoint(result.checkpoint).get_model()
    assert model.pandas_categorical == [["A", "B"]]


@pytest.mark.slow
def test_lightgbm_resume_from_checkpoint(datasets, run_config, tmp_path):
    result = lightgbm_trainer(datasets, run_config, num_boost_round=5).fit()
    assert num_trees(LightGBMCheckpoint.from_checkpoint(result.checkpoint).get_model()) == 5
    moved = Checkpoint.from_dict(result.checkpoint.to_dict()).to_directory(str(tmp_path / "moved"))
    result = lightgbm_trainer(
        datasets,
        run_config,
        num_boost_round=10,  # Ray 2.3+: the target number of trees
        resume_from_checkpoint=Checkpoint.from_directory(moved),
    ).fit()
    assert num_trees(LightGBMCheckpoint.from_checkpoint(result.checkpoint).get_model()) == 10


@pytest.mark.slow
@pytest.mark.parametrize(
    ("freq", "end", "expected"),
    [(4, True, 7), (4, False, 6), (5, True, 5), (0, True, 1), (0, False, 0)],
)
def test_lightgbm_checkpoint_freq(datasets, tmp_path, freq, end, expected):
    run_config = RunConfig(
        storage_path=str(tmp_path),
        verbose=0,
        checkpoint_config=CheckpointConfig(checkpoint_frequency=freq, checkpoint_at_end=end),
    )
    result = lightgbm_trainer(datasets, run_config, num_boost_round=25).fit()
    assert len(result.best_checkpoints) == expected
    paths = [checkpoint.path for checkpoint, _ in result.best_checkpoints]
    assert paths == sorted(paths)  # in the order they were taken


@pytest.mark.slow
def test_lightgbm_preprocessor_in_checkpoint(datasets, run_config, tmp_path):
    class DummyPreprocessor(Preprocessor):
        def __init__(self):
            super().__init__()
            self.is_same = True

        def fit(self, dataset):
            self.fitted_ = True

        def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
            return df

    result = lightgbm_trainer(datasets, run_config, preprocessor=DummyPreprocessor()).fit()
    moved = Checkpoint.from_dict(result.checkpoint.to_dict()).to_directory(str(tmp_path / "moved"))
    resume_from = LightGBMCheckpoint.from_checkpoint(Checkpoint.from_directory(moved))
    preprocessor = resume_from.get_preprocessor()
    assert num_trees(resume_from.get_model()) == 10
    assert preprocessor.is_same
    assert preprocessor.fitted_


def test_lightgbm_validation(datasets, run_config):
    with pytest.raises(KeyError, match=TRAIN_DATASET_KEY):
        lightgbm_trainer({"valid": datasets["valid"]}, run_config)
    with pytest.raises(KeyError, match="dmatrix_params"):
        lightgbm_trainer(datasets, run_config, dmatrix_params={"data": {}})
