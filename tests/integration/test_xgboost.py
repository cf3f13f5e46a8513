"""XGBoostTrainer on 2 real workers: the classic form, the function form, resuming,
shards, preprocessors and prediction from the checkpoint."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
import xgboost

import lockstep.data as ld
from lockstep import train
from lockstep._core import accelerators
from lockstep.data.preprocessors import BatchMapper, Chain, Repartitioner, Scaler, StandardScaler
from lockstep.testing import fit_all_ranks
from lockstep.train import (
    BatchPredictor,
    CheckpointConfig,
    DataConfig,
    FailureConfig,
    ScalingConfig,
)
from lockstep.train.xgboost import RayTrainReportCallback, XGBoostPredictor, XGBoostTrainer
from tests.helpers import EveryRank
from tests.integration import gbdt_data as gbdt

PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "max_depth": 3}


def classic(tmp_path, **kwargs):
    return gbdt.classic_trainer(XGBoostTrainer, PARAMS, tmp_path, **kwargs)


def test_breast_cancer_on_two_workers(tmp_path):
    checkpoints = CheckpointConfig(checkpoint_frequency=5)
    result = classic(
        tmp_path, num_boost_round=12, run_config=gbdt.run(tmp_path, checkpoint_config=checkpoints)
    ).fit()

    assert result.metrics["valid-error"] < 0.1
    assert set(result.metrics) == {"train-logloss", "train-error", "valid-logloss", "valid-error"}
    frame = result.metrics_dataframe
    assert len(frame) == 12  # a report per round, the last one with the final checkpoint
    assert frame["train-logloss"].is_monotonic_decreasing
    # every 5 rounds, and at the end
    assert frame["checkpoint_dir_name"].notna().tolist() == [i in (5, 10, 12) for i in range(1, 13)]
    booster = XGBoostTrainer.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 12

    assert gbdt.batch_predicted_accuracy(result.checkpoint, XGBoostPredictor) > 0.9


def test_each_worker_builds_its_dmatrix_from_its_shard_only(tmp_path):
    trainer = classic(tmp_path, num_boost_round=2)
    half_valid = (569 - gbdt.NUM_TRAIN) // 2
    assert fit_all_ranks(trainer) == [{"train": gbdt.NUM_TRAIN // 2, "valid": half_valid}] * 2

    whole_valid = classic(
        tmp_path, num_boost_round=2, dataset_config=DataConfig(datasets_to_split=["train"])
    ).fit()
    assert whole_valid.return_value == {"train": gbdt.NUM_TRAIN // 2, "valid": 569 - gbdt.NUM_TRAIN}


def test_every_rank_reports_the_same_metrics_over_all_shards(tmp_path):
    ranks = EveryRank()
    classic(tmp_path, num_boost_round=3, run_config=gbdt.run(tmp_path, callbacks=[ranks])).fit()
    assert len(ranks.steps) == 3
    for rank0, rank1 in ranks.steps:
        assert rank0 == rank1


def test_resume_from_checkpoint_adds_only_the_missing_rounds(tmp_path):
    first, resumed = gbdt.fit_then_resume(classic, tmp_path, 4, 7)
    booster = XGBoostTrainer.get_model(resumed.checkpoint)
    assert booster.num_boosted_rounds() == 7
    # the first 4 trees are the checkpoint's
    before = XGBoostTrainer.get_model(first.checkpoint)
    assert booster[:4].get_dump() == before.get_dump()

    done = gbdt.fit_resumed(classic, tmp_path, first, 4, "third")
    assert len(done.metrics_dataframe) == 1  # nothing to train: the booster is reported
    assert done.metrics == first.metrics
    assert XGBoostTrainer.get_model(done.checkpoint).num_boosted_rounds() == 4


class FailOnce(xgboost.callback.TrainingCallback):
    """Raises after round ``at`` the first time only (a marker file remembers)."""

    def __init__(self, marker, at):
        super().__init__()
        self.marker, self.at = str(marker), at

    def after_iteration(self, model, epoch, evals_log):
        due = model.num_boosted_rounds() == self.at and not os.path.exists(self.marker)
        if due and train.get_context().get_world_rank() == 1:
            open(self.marker, "w").close()
            raise RuntimeError("injected failure")
        return False


def test_a_restart_continues_from_the_latest_checkpoint(tmp_path):
    result = classic(
        tmp_path,
        num_boost_round=8,
        callbacks=[FailOnce(tmp_path / "failed", at=6)],
        run_config=gbdt.run(
            tmp_path,
            checkpoint_config=CheckpointConfig(checkpoint_frequency=4),
            failure_config=FailureConfig(max_failures=1),
        ),
    ).fit()
    assert (tmp_path / "failed").exists()
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 8
    # rounds 5 and 6 were trained twice: before the failure, and again from round 4's booster
    rounds = result.metrics_dataframe["training_iteration"].tolist()
    assert len(rounds) == 6 + 4


FEATURES = [c for c in gbdt.breast_cancer()[0].columns if c != "target"]


def far_from_raw(frame):
    """Features far from their raw values: a booster trained on raw data could not use
    these thresholds. (Module level: workers import it; a lambda would not pickle.)"""
    return frame.assign(**{c: -1000 * frame[c] for c in FEATURES})


def test_preprocessor_is_applied_at_training_and_at_prediction(tmp_path):
    _, valid_frame = gbdt.breast_cancer()
    preprocessor = Chain(StandardScaler(FEATURES), BatchMapper(far_from_raw))
    result = classic(tmp_path, num_boost_round=10, preprocessor=preprocessor).fit()
    booster = XGBoostTrainer.get_model(result.checkpoint)

    predictor = XGBoostPredictor.from_checkpoint(result.checkpoint)
    assert predictor.get_preprocessor() is not None
    raw = valid_frame.drop(columns=["target"])
    predicted = predictor.predict(raw)["predictions"]
    assert gbdt.accuracy(predicted, valid_frame["target"]) > 0.9
    expected = booster.predict(xgboost.DMatrix(preprocessor.transform_batch(raw)))
    np.testing.assert_allclose(predicted.to_numpy(), expected)
    # the booster's thresholds are in the preprocessed space: raw data is predicted badly
    unprocessed = pd.Series(booster.predict(xgboost.DMatrix(raw)))
    assert gbdt.accuracy(unprocessed, valid_frame["target"]) < 0.8


def test_the_materials_form_dict_scaling_label_and_fit_arguments(tmp_path):
    frame = gbdt.breast_cancer()[0]
    dataset = ld.from_pandas(frame)
    predict_ds = ld.from_pandas(frame.drop(columns=["target"]))
    trainer = XGBoostTrainer(
        scaling_config={"num_actors": 2, "gpus_per_actor": 0, "cpus_per_actor": 1},
        label="target",
        params={"tree_method": "approx", "objective": "binary:logistic"},
        run_config=gbdt.run(tmp_path),
    )
    result = trainer.fit(
        dataset=dataset,
        preprocessor=Chain(Scaler(["worst radius", "worst area"]), Repartitioner(num_partitions=2)),
    )
    assert result.checkpoint.get_preprocessor() is not None
    predicted = BatchPredictor.from_checkpoint(result.checkpoint, XGBoostPredictor).predict(
        predict_ds
    )
    assert predicted.count() == len(frame)
    assert gbdt.accuracy(predicted.to_pandas()["predictions"], frame["target"]) > 0.9


def test_the_function_form_with_the_report_callback(tmp_path):
    def train_func(config):
        frame = train.get_dataset_shard("train").materialize().to_pandas()
        data = xgboost.DMatrix(frame.drop(columns=["target"]), label=frame["target"])
        start = train.get_checkpoint()
        xgboost.train(
            config["params"],
            data,
            num_boost_round=6,
            evals=[(data, "train")],
            verbose_eval=False,
            xgb_model=RayTrainReportCallback.get_model(start) if start else None,
            callbacks=[RayTrainReportCallback(metrics={"loss": "train-logloss"}, frequency=4)],
        )
        return data.num_row()

    ranks = EveryRank()
    result = XGBoostTrainer(
        train_func,
        train_loop_config={"params": PARAMS},
        datasets={"train": gbdt.datasets()["train"]},
        scaling_config=gbdt.TWO,
        run_config=gbdt.run(tmp_path, callbacks=[ranks]),
    ).fit()
    assert result.return_value == gbdt.NUM_TRAIN // 2
    # 6 rounds, then the final checkpoint after training (round 6 was not one of every 4)
    assert len(ranks.steps) == 7
    assert all(set(m) == {"loss"} and step[0] == step[1] for step in ranks.steps for m in step)
    names = result.metrics_dataframe["checkpoint_dir_name"]
    assert names.notna().tolist() == [False, False, False, True, False, False, True]
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 6


def test_num_workers_zero_trains_in_this_process(tmp_path):
    result = classic(tmp_path, num_boost_round=3, scaling_config=ScalingConfig(num_workers=0)).fit()
    assert result.return_value == {"train": gbdt.NUM_TRAIN, "valid": 569 - gbdt.NUM_TRAIN}
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 3


def test_restore_recreates_the_classic_trainer(tmp_path):
    classic(tmp_path, num_boost_round=3).fit()
    path = tmp_path / "runs" / "run"
    assert XGBoostTrainer.can_restore(path)
    restored = XGBoostTrainer.restore(path, num_boost_round=5, datasets=gbdt.datasets())
    result = restored.fit()
    assert len(result.metrics_dataframe) == 5  # 3 rounds, then 2 more from the checkpoint
    assert XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds() == 5


@pytest.mark.gpu
@pytest.mark.skipif(not accelerators.visible_gpus(), reason="needs a CUDA device")
def test_cuda_device_on_gpu_workers(tmp_path):
    count = min(2, len(accelerators.visible_gpus()))
    result = classic(
        tmp_path,
        num_boost_round=5,
        params={**PARAMS, "device": "cuda", "tree_method": "hist"},
        scaling_config=ScalingConfig(num_workers=count, use_gpu=True),
    ).fit()
    assert result.metrics["valid-error"] < 0.1
    config = XGBoostTrainer.get_model(result.checkpoint).save_config()
    assert '"device":"cuda' in config.replace(" ", "")
