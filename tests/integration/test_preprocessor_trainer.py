"""A trainer's preprocessor: fitted on "train", applied to every dataset in the workers,
saved in every checkpoint, and re-applied exactly at serving time."""

from __future__ import annotations

import dataclasses
import os
import tempfile

import numpy as np
import pandas as pd
import pytest

import lockstep.data as ld
from lockstep import train
from lockstep.data.preprocessors import MinMaxScaler, StandardScaler
from lockstep.train import Checkpoint, DataParallelTrainer, ScalingConfig


def frames():
    rng = np.random.default_rng(0)
    train_frame = pd.DataFrame({"x": rng.normal(5, 2, 40), "y": rng.normal(size=40)})
    valid_frame = pd.DataFrame({"x": rng.normal(5, 2, 10), "y": rng.normal(size=10)})
    return train_frame, valid_frame


def report_scaled_values():
    rows = {}
    for name in ("train", "valid"):
        shard = train.get_context().get_dataset_shard(name)  # the seed material's spelling
        rows[name] = [float(v) for b in shard.iter_batches(batch_size=8) for v in b["x"]]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model.txt"), "w") as f:
            f.write("weights")
        train.report(rows, checkpoint=Checkpoint.from_directory(d))


class EveryRank(train.UserCallback):
    def __init__(self):
        self.metrics = []

    def after_report(self, run_context, metrics, checkpoint):
        self.metrics.extend(metrics)


def test_fitted_on_train_applied_everywhere_and_saved_in_checkpoints(run_config):
    train_frame, valid_frame = frames()
    ranks = EveryRank()
    config = dataclasses.replace(run_config, name="prep", callbacks=[ranks])
    scaler = StandardScaler(columns=["x"])
    result = DataParallelTrainer(
        report_scaled_values,
        datasets={"train": ld.from_pandas(train_frame), "valid": ld.from_pandas(valid_frame)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=config,
        preprocessor=scaler,
    ).fit()
    mean, std = train_frame["x"].mean(), train_frame["x"].std(ddof=0)
    seen_train = sorted(v for m in ranks.metrics for v in m["train"])
    assert seen_train == pytest.approx(sorted((train_frame["x"] - mean) / std))
    # validation data is transformed with the statistics of the training data
    seen_valid = sorted(v for m in ranks.metrics for v in m["valid"])
    assert seen_valid == pytest.approx(sorted((valid_frame["x"] - mean) / std))
    # the checkpoint carries the fitted preprocessor next to the user's files
    restored = result.checkpoint.get_preprocessor()
    served = restored.transform_batch(valid_frame.copy())
    assert served["x"].tolist() == pytest.approx(((valid_frame["x"] - mean) / std).tolist())
    assert sorted(os.listdir(result.checkpoint.path)) == [".metadata.json", "model.txt"]


def test_the_older_fit_form(run_config):
    train_frame, _ = frames()
    trainer = DataParallelTrainer(
        report_scaled_values_train_only,
        run_config=run_config,
        scaling_config=ScalingConfig(num_workers=2),
    )
    result = trainer.fit(
        dataset=ld.from_pandas(train_frame), preprocessor=MinMaxScaler(columns=["x"])
    )
    assert min(result.metrics["train"]) >= 0.0 and max(result.metrics["train"]) <= 1.0
    assert result.checkpoint.get_preprocessor().stats_ == pytest.approx(
        {"min(x)": train_frame["x"].min(), "max(x)": train_frame["x"].max()}
    )


def report_scaled_values_train_only():
    shard = train.get_dataset_shard("train")
    values = [float(v) for b in shard.iter_batches(batch_size=8) for v in b["x"]]
    with tempfile.TemporaryDirectory() as d:
        train.report({"train": values}, checkpoint=Checkpoint.from_directory(d))


def test_a_fitted_preprocessor_is_not_fitted_again(run_config):
    train_frame, _ = frames()
    scaler = StandardScaler(columns=["x"]).fit(ld.from_pandas(pd.DataFrame({"x": [0.0, 2.0]})))
    result = DataParallelTrainer(
        report_scaled_values_train_only,
        datasets={"train": ld.from_pandas(train_frame)},
        run_config=run_config,
        preprocessor=scaler,
    ).fit()
    assert result.checkpoint.get_preprocessor().stats_ == {"mean(x)": 1.0, "std(x)": 1.0}
    assert sorted(result.metrics["train"]) == pytest.approx(sorted(train_frame["x"] - 1.0))


def test_restore_keeps_the_fitted_preprocessor(run_config):
    train_frame, _ = frames()
    first = DataParallelTrainer(
        report_scaled_values_train_only,
        datasets={"train": ld.from_pandas(train_frame)},
        run_config=run_config,
        preprocessor=StandardScaler(columns=["x"]),
    ).fit()
    with pytest.raises(ValueError, match=r"datasets \['train'\] that are not saved.*HINT"):
        DataParallelTrainer.restore(first.path)
    restored = DataParallelTrainer.restore(
        first.path, datasets={"train": ld.from_pandas(train_frame)}
    )
    assert restored.preprocessor.stats_ == first.checkpoint.get_preprocessor().stats_


def test_restore_keeps_datasets_read_from_files(run_config, tmp_path):
    train_frame, _ = frames()
    path = str(tmp_path / "train.parquet")
    train_frame.to_parquet(path)
    first = DataParallelTrainer(
        report_scaled_values_train_only,
        datasets={"train": ld.read_parquet(path)},
        run_config=run_config,
    ).fit()
    restored = DataParallelTrainer.restore(first.path)
    assert restored.datasets["train"].input_files() == [path]


@pytest.mark.parametrize(
    ("datasets", "message"),
    [
        ({"valid": "x"}, r"fitted on datasets\['train'\]"),
        ({"train": [1, 2]}, r"transforms lockstep\.data Datasets"),
    ],
)
def test_bad_preprocessor_setups_fail_at_construction(datasets, message):
    from lockstep.train import DataConfig

    with pytest.raises(ValueError, match=message):
        DataParallelTrainer(
            lambda: None,
            datasets=datasets,
            dataset_config=DataConfig(datasets_to_split=[]),
            preprocessor=StandardScaler(columns=["x"]),
        )


def test_the_preprocessor_must_be_one():
    with pytest.raises(ValueError, match=r"must be a lockstep\.data\.preprocessors\.Preprocessor"):
        DataParallelTrainer(lambda: None, preprocessor=object())


def test_a_checkpoint_without_a_preprocessor(tmp_path):
    assert Checkpoint.from_directory(tmp_path).get_preprocessor() is None


def test_context_outside_a_worker_has_no_datasets():
    from lockstep.train import TrainContext

    context = TrainContext.single_worker(
        experiment_name="x",
    )
    with pytest.raises(RuntimeError, match="inside the training function"):
        context.get_dataset_shard("train")
