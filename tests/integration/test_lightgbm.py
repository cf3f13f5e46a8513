"""LightGBMTrainer on 2 real workers: one model trained over both shards, both forms,
resuming, metrics combined across workers, and prediction from the checkpoint."""

from __future__ import annotations

import hashlib
import json

import lightgbm
import numpy as np
import pytest

from lockstep import train
from lockstep.data.preprocessors import StandardScaler
from lockstep.testing import fit_all_ranks
from lockstep.train import CheckpointConfig, DataConfig
from lockstep.train.lightgbm import (
    LightGBMPredictor,
    LightGBMTrainer,
    RayTrainReportCallback,
    get_network_params,
)
from tests.helpers import EveryRank
from tests.integration import gbdt_data as gbdt

PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "verbose": -1}


def classic(tmp_path, **kwargs):
    return gbdt.classic_trainer(LightGBMTrainer, PARAMS, tmp_path, **kwargs)


def test_breast_cancer_on_two_workers(tmp_path):
    ranks = EveryRank()
    config = gbdt.run(
        tmp_path, checkpoint_config=CheckpointConfig(checkpoint_frequency=4), callbacks=[ranks]
    )
    result = classic(tmp_path, num_boost_round=10, run_config=config).fit()

    assert result.metrics["valid-binary_error"] < 0.1
    assert set(result.metrics) == {
        "train-binary_logloss",
        "train-binary_error",
        "valid-binary_logloss",
        "valid-binary_error",
    }
    frame = result.metrics_dataframe
    assert len(frame) == 10 and frame["train-binary_logloss"].is_monotonic_decreasing
    assert frame["checkpoint_dir_name"].notna().tolist() == [i in (4, 8, 10) for i in range(1, 11)]
    # each worker evaluates its own rows; the callback reports the same values everywhere
    assert all(rank0 == rank1 for rank0, rank1 in ranks.steps)
    booster = LightGBMTrainer.get_model(result.checkpoint)
    assert booster.current_iteration() == 10

    assert gbdt.batch_predicted_accuracy(result.checkpoint, LightGBMPredictor) > 0.9


def test_combined_metrics_are_those_of_all_the_rows(tmp_path):
    result = classic(tmp_path, num_boost_round=5).fit()
    booster = LightGBMTrainer.get_model(result.checkpoint)
    train_frame, valid_frame = gbdt.breast_cancer()
    for name, frame in (("train", train_frame), ("valid", valid_frame)):
        shards = frame.iloc[: 2 * (len(frame) // 2)]  # the rows the 2 equal shards hold
        predicted = booster.predict(shards.drop(columns=["target"]))
        error = float(((predicted > 0.5) != shards["target"].to_numpy()).mean())
        assert result.metrics[f"{name}-binary_error"] == pytest.approx(error)


def test_the_function_form_trains_one_model_over_both_shards(tmp_path):
    def train_func():
        frame = train.get_dataset_shard("train").materialize().to_pandas()
        data = lightgbm.Dataset(frame.drop(columns=["target"]), label=frame["target"])
        params = {
            **PARAMS,
            **get_network_params(),
            "tree_learner": "data",
            "pre_partition": True,
        }
        booster = lightgbm.train(
            params,
            data,
            num_boost_round=4,
            valid_sets=[data],
            valid_names=["train"],
            callbacks=[RayTrainReportCallback(metrics="train-binary_error")],
        )
        trees = json.dumps(booster.dump_model()["tree_info"])  # not the per-worker params
        train.report({"model": hashlib.sha256(trees.encode()).hexdigest()})
        return len(frame)

    ranks = EveryRank()
    result = LightGBMTrainer(
        train_func,
        datasets={"train": gbdt.datasets()["train"]},
        scaling_config=gbdt.TWO,
        run_config=gbdt.run(tmp_path, callbacks=[ranks]),
    ).fit()
    assert result.return_value == gbdt.NUM_TRAIN // 2
    # one model, the same on both workers (each alone on its shard would differ)
    rank0, rank1 = ranks.steps[-1]
    assert rank0["model"] == rank1["model"]
    assert [set(step[0]) for step in ranks.steps[:4]] == [{"train-binary_error"}] * 4
    assert LightGBMTrainer.get_model(result.checkpoint).current_iteration() == 4


def test_get_network_params_gives_every_worker_the_machine_list(tmp_path):
    ranks = EveryRank()
    LightGBMTrainer(
        lambda: train.report(get_network_params()),
        scaling_config=gbdt.TWO,
        run_config=gbdt.run(tmp_path, callbacks=[ranks]),
    ).fit()
    ((rank0, rank1),) = ranks.steps
    assert rank0["machines"] == rank1["machines"]
    machines = rank0["machines"].split(",")
    ports = [rank0["local_listen_port"], rank1["local_listen_port"]]
    assert machines == [f"127.0.0.1:{port}" for port in ports]
    assert rank0["num_machines"] == rank1["num_machines"] == 2


def test_get_network_params_outside_a_worker_warns():
    with pytest.warns(UserWarning, match="outside one there is no network"):
        assert get_network_params() == {}


def test_each_worker_builds_its_dataset_from_its_shard_only(tmp_path):
    half_valid = (569 - gbdt.NUM_TRAIN) // 2
    assert (
        fit_all_ranks(classic(tmp_path, num_boost_round=2))
        == [{"train": gbdt.NUM_TRAIN // 2, "valid": half_valid}] * 2
    )
    whole_valid = classic(
        tmp_path, num_boost_round=2, dataset_config=DataConfig(datasets_to_split=["train"])
    ).fit()
    assert whole_valid.return_value == {"train": gbdt.NUM_TRAIN // 2, "valid": 569 - gbdt.NUM_TRAIN}


def test_resume_from_checkpoint_adds_only_the_missing_rounds(tmp_path):
    first, resumed = gbdt.fit_then_resume(classic, tmp_path, 3, 5)
    booster = LightGBMTrainer.get_model(resumed.checkpoint)
    assert booster.current_iteration() == 5
    before = LightGBMTrainer.get_model(first.checkpoint).dump_model()["tree_info"]
    assert booster.dump_model()["tree_info"][:3] == before


def test_preprocessor_is_applied_at_training_and_at_prediction(tmp_path):
    _, valid_frame = gbdt.breast_cancer()
    features = [c for c in valid_frame.columns if c != "target"]
    result = classic(tmp_path, num_boost_round=10, preprocessor=StandardScaler(features)).fit()
    predictor = LightGBMPredictor.from_checkpoint(result.checkpoint)
    raw = valid_frame.drop(columns=["target"])
    predicted = predictor.predict(raw)["predictions"].to_numpy()
    scaled = predictor.get_preprocessor().transform_batch(raw)
    np.testing.assert_allclose(predicted, predictor.model.predict(scaled))
    assert gbdt.accuracy(predictor.predict(raw)["predictions"], valid_frame["target"]) > 0.9
