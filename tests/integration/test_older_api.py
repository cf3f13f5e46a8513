"""The older API the material uses: lockstep.air, Ray 1.x session functions and Trainer,
AIR framework checkpoints, and Checkpoint.load_model()."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

import lockstep.data as ld
from lockstep import air, train
from lockstep.air import session
from lockstep.data.preprocessors import StandardScaler
from lockstep.train import Checkpoint, DataParallelTrainer, Model, RunConfig, ScalingConfig, Trainer
from tests.helpers import run_python


def test_air_names_are_the_train_ones():
    assert air.ScalingConfig is train.ScalingConfig
    assert air.RunConfig is train.RunConfig
    assert air.CheckpointConfig is train.CheckpointConfig
    assert air.FailureConfig is train.FailureConfig
    assert air.Result is train.Result and air.Checkpoint is train.Checkpoint
    assert air.config.ScalingConfig is train.ScalingConfig


def test_air_session_inside_a_training_function(run_config, tmp_path):
    def train_func():
        assert session.get_checkpoint() is None
        session.report(
            {
                "rank": session.get_world_rank(),
                "size": session.get_world_size(),
                "local": session.get_local_rank(),
                "node": session.get_node_rank(),
                "name": session.get_experiment_name(),
            }
        )

    result = DataParallelTrainer(
        train_func, scaling_config=air.ScalingConfig(num_workers=2), run_config=run_config
    ).fit()
    assert result.metrics == {"rank": 0, "size": 2, "local": 0, "node": 0, "name": "run"}


def test_ray1_session_functions_with_trainer(tmp_path):
    def train_func(config):
        state = train.load_checkpoint() or {"epoch": -1}
        for epoch in range(state["epoch"] + 1, config["epochs"]):
            train.report(epoch=epoch, rank=train.world_rank())
            train.save_checkpoint(epoch=epoch, weights=[epoch] * 2)
        return (train.world_rank(), train.local_rank(), train.world_size(), train.load_checkpoint())

    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    results = trainer.run(train_func, config={"epochs": 3})
    trainer.shutdown()
    last = {"epoch": 2, "weights": [2, 2]}
    assert results == [(0, 0, 2, last), (1, 1, 2, last)]


def test_run_iterator_yields_each_step_then_the_final_results(tmp_path):
    def train_func():
        for i in range(3):
            train.report(step=i, rank=train.world_rank())
        return train.world_rank() * 10

    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    iterator = trainer.run_iterator(train_func)
    seen = [[(m["step"], m["rank"]) for m in step] for step in iterator]
    trainer.shutdown()
    assert seen == [[(i, 0), (i, 1)] for i in range(3)]
    assert iterator.is_finished()
    assert iterator.get_final_results() == [0, 10]


def test_run_iterator_raises_the_workers_error(tmp_path):
    def train_func():
        train.report(step=0)
        raise KeyError("late failure")

    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    iterator = trainer.run_iterator(train_func)
    assert [m["step"] for m in next(iterator)] == [0, 0]
    with pytest.raises(train.WorkerGroupError, match="late failure"):
        next(iterator)
    trainer.shutdown()


def test_train_torch_is_an_attribute_of_train_in_a_fresh_interpreter():
    code = (
        "import sys; import lockstep.train as train\n"
        "assert 'lockstep.train.torch' not in sys.modules\n"
        "print(train.torch.prepare_model.__name__)"
    )
    assert run_python(code).strip() == "prepare_model"


def test_train_torch_inside_a_ray1_worker(tmp_path):
    def train_func():
        import torch

        import lockstep.train as train_module

        model = train_module.torch.prepare_model(torch.nn.Linear(2, 1))
        return type(model).__name__

    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    names = trainer.run(train_func)
    trainer.shutdown()
    assert names == ["DistributedDataParallel", "DistributedDataParallel"]


@pytest.fixture
def frame():
    x = np.arange(40.0)
    return pd.DataFrame({"x": x, "y": 3 * x + 1})


def test_framework_checkpoints_round_trip(frame):
    import lightgbm
    import torch
    import xgboost
    from sklearn.linear_model import LinearRegression

    from lockstep.train.lightgbm import LightGBMCheckpoint
    from lockstep.train.sklearn import SklearnCheckpoint
    from lockstep.train.torch import TorchCheckpoint
    from lockstep.train.xgboost import XGBoostCheckpoint

    booster = xgboost.train({}, xgboost.DMatrix(frame[["x"]], label=frame["y"]), 5)
    lgb = lightgbm.train(
        {"verbose": -1, "min_data_in_leaf": 2}, lightgbm.Dataset(frame[["x"]], label=frame["y"]), 5
    )
    linear = torch.nn.Linear(1, 1)
    checkpoints = [
        XGBoostCheckpoint.from_model(booster),
        LightGBMCheckpoint.from_model(lgb),
        SklearnCheckpoint.from_model(LinearRegression().fit(frame[["x"]], frame["y"])),
        TorchCheckpoint.from_model(linear),
        TorchCheckpoint.from_state_dict(linear.state_dict()),
    ]
    try:
        xgb_ckpt, lgb_ckpt, sk_ckpt, torch_ckpt, state_ckpt = checkpoints
        assert xgb_ckpt.get_model().num_boosted_rounds() == 5
        assert lgb_ckpt.get_model().current_iteration() == 5
        assert sk_ckpt.get_estimator().coef_.round(6).tolist() == [3.0]
        assert torch.equal(torch_ckpt.get_model().weight, linear.weight)
        restored = state_ckpt.get_model(torch.nn.Linear(1, 1))
        assert torch.equal(restored.weight, linear.weight)
        with pytest.raises(ValueError, match=r"holds a state dict.*HINT"):
            state_ckpt.get_model()
    finally:
        for checkpoint in checkpoints:
            shutil.rmtree(checkpoint.path)


def test_load_model_predicts_a_dataset_with_the_saved_preprocessor(frame, run_config):
    """The material's export example: result.checkpoint.load_model().predict(dataset)."""
    from sklearn.linear_model import LinearRegression

    from lockstep.train.sklearn import SklearnTrainer

    scaler = StandardScaler(["x"])
    trainer = SklearnTrainer(
        estimator=LinearRegression(),
        datasets={"train": ld.from_pandas(frame)},
        label_column="y",
        preprocessor=scaler,
        run_config=run_config,
    )
    result = trainer.fit()
    model = result.checkpoint.load_model()
    assert isinstance(model, Model)
    predicted = model.predict(ld.from_pandas(frame[["x"]]))
    assert isinstance(predicted, ld.Dataset)
    values = predicted.to_pandas()["predictions"].to_numpy()
    # the preprocessor is applied before the model: predictions match the labels
    np.testing.assert_allclose(values, frame["y"].to_numpy(), rtol=1e-6)
    assert type(model.get_preprocessor()).__name__ == "StandardScaler"


def test_load_model_of_a_torch_checkpoint_predicts_a_dataframe(frame):
    import torch

    from lockstep.train.torch import TorchCheckpoint

    linear = torch.nn.Linear(1, 1)
    with torch.no_grad():
        linear.weight.fill_(2.0)
        linear.bias.fill_(1.0)
    checkpoint = TorchCheckpoint.from_model(linear)
    try:
        out = checkpoint.load_model().predict(frame[["x"]].head(3))
        assert out["predictions"].tolist() == [1.0, 3.0, 5.0]
    finally:
        shutil.rmtree(checkpoint.path)


def test_normalize_pandas_for_lightgbm_maps_arrow_dtypes():
    import pyarrow as pa

    from lockstep.train.lightgbm import normalize_pandas_for_lightgbm

    df = pd.DataFrame(
        {
            "i": pd.array([1, 2], dtype=pd.ArrowDtype(pa.int64())),
            "u": pd.array([1, 2], dtype=pd.ArrowDtype(pa.uint8())),
            "f": pd.array([0.5, 1.5], dtype=pd.ArrowDtype(pa.float32())),
            "b": pd.array([True, False], dtype=pd.ArrowDtype(pa.bool_())),
            "s": pd.array(["a", "b"], dtype=pd.ArrowDtype(pa.string())),
            "n": [1.0, 2.0],
        }
    )
    out = normalize_pandas_for_lightgbm(df)
    assert out.dtypes.astype(str).tolist()[:4] == ["Int64", "UInt8", "Float32", "boolean"]
    assert isinstance(out.dtypes["s"], pd.ArrowDtype) and out.dtypes["n"] == np.float64


def test_checkpoint_to_bytes_of_a_run_checkpoint(run_config):
    def train_func():
        train.save_checkpoint(epoch=5)

    result = DataParallelTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=2), run_config=run_config
    ).fit()
    copy = Checkpoint.from_bytes(result.checkpoint.to_bytes())
    try:
        assert copy.to_dict() == {"epoch": 5}
    finally:
        shutil.rmtree(copy.path)


def test_report_with_keywords_and_a_dict_is_a_type_error(run_config):
    def train_func():
        train.report({"a": 1}, b=2)

    with pytest.raises(train.TrainingFailedError) as info:
        DataParallelTrainer(
            train_func, run_config=RunConfig(storage_path=run_config.storage_path, verbose=0)
        ).fit()
    assert isinstance(info.value.__cause__, TypeError)


def test_trainer_run_resumes_from_a_dict_checkpoint_and_keeps_the_latest(tmp_path):
    def train_func():
        state = train.load_checkpoint()
        train.save_checkpoint(epoch=state["epoch"] + 1)
        return state["epoch"]

    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    assert trainer.run(train_func, checkpoint={"epoch": 4}) == [4, 4]
    assert trainer.latest_checkpoint == {"epoch": 5}
    trainer.shutdown()
