"""Ported from Ray AIR's python/ray/train/tests/test_data_parallel_trainer.py and
test_torch_trainer.py (Ray 2.0 to 2.6; imports changed to lockstep, Ray's cluster
fixtures dropped, every assertion kept; runs write into the test's directory).

Left out, for needing Ray's internals (``ray.available_resources``, a patched
``BackendExecutor``, ``DataParallelTrainer._report``, ``trainer._train_loop_config``, fake
GPUs, ``ray.cluster_utils``): test_scaling_config, test_fast_slow, test_mismatch_report,
test_world_rank, test_gpu_requests, test_tune's last line, test_tune_torch_get_device_gpu.
Not applicable, AIR's behaviour that later Ray changed as lockstep has it: test_datasets
(AIR split only "train"; every dataset is split since Ray 2.7), test_single_worker_failure
(AIR raised the worker's ValueError; ``TrainingFailedError`` since), test_torch_auto_unwrap
(``result.checkpoint`` was a TorchCheckpoint; a Checkpoint since: use
``TorchCheckpoint.from_checkpoint``), test_torch_e2e_dir (``torch.load`` of a whole
model needs ``weights_only=False`` since torch 2.6), test_checkpoint_freq (the error comes
when the trainer is built, not at ``fit()``).
"""

from __future__ import annotations

import os

import pytest
import torch

import lockstep.data as ld
import lockstep.train as train
from lockstep import tune
from lockstep.air import Result, session
from lockstep.air.checkpoint import Checkpoint
from lockstep.air.config import CheckpointConfig, RunConfig, ScalingConfig
from lockstep.data.preprocessor import Preprocessor
from lockstep.train.batch_predictor import BatchPredictor
from lockstep.train.data_parallel_trainer import DataParallelTrainer
from lockstep.train.torch import TorchCheckpoint, TorchPredictor, TorchTrainer
from lockstep.tune.tune_config import TuneConfig
from lockstep.tune.tuner import Tuner
from tests.integration.ray_train.helpers import FlagPreprocessor

PREPROCESSOR_KEY = "_preprocessor"  # ray.train.constants.PREPROCESSOR_KEY
scale_config = ScalingConfig(num_workers=2)


@pytest.fixture
def run_config(tmp_path):
    return RunConfig(storage_path=str(tmp_path / "runs"), verbose=0)


def test_fit_train(run_config):
    def train_func():
        session.report({"loss": 1})

    trainer = DataParallelTrainer(train_func, scaling_config=scale_config, run_config=run_config)
    assert trainer.fit().metrics["loss"] == 1


def test_fit_train_config(run_config):
    def train_func(config):
        session.report({"loss": config["x"]})

    trainer = DataParallelTrainer(
        train_func, scaling_config=scale_config, train_loop_config={"x": 100}, run_config=run_config
    )
    assert trainer.fit().metrics["loss"] == 100


def test_checkpoint(run_config):
    def train_func():
        for i in range(3):
            session.report({"epoch": i}, checkpoint=Checkpoint.from_dict({"model": i}))

    result = DataParallelTrainer(
        train_func, scaling_config=scale_config, run_config=run_config
    ).fit()
    assert result.checkpoint.to_dict()["model"] == 2


def test_preprocessor_in_checkpoint(run_config):
    class DummyPreprocessor(Preprocessor):
        def __init__(self):
            super().__init__()
            self.is_same = True

    def train_func():
        for i in range(3):
            session.report({"epoch": i}, checkpoint=Checkpoint.from_dict({"model": i}))

    result = DataParallelTrainer(
        train_func,
        scaling_config=scale_config,
        preprocessor=DummyPreprocessor(),  # no datasets: saved unfitted, as in AIR
        run_config=run_config,
    ).fit()
    assert result.checkpoint.to_dict()["model"] == 2
    assert result.checkpoint.to_dict()[PREPROCESSOR_KEY].is_same


def test_resume_from_checkpoint(run_config, tmp_path):
    def train_func():
        checkpoint = session.get_checkpoint()
        epoch = checkpoint.to_dict()["epoch"] if checkpoint else 0
        for i in range(epoch, epoch + 2):
            session.report({"epoch": i}, checkpoint=Checkpoint.from_dict({"epoch": i}))

    result = DataParallelTrainer(
        train_func, scaling_config=scale_config, run_config=run_config
    ).fit()
    assert result.checkpoint.to_dict()["epoch"] == 1
    # moved to another directory
    moved = Checkpoint.from_dict(result.checkpoint.to_dict()).to_directory(str(tmp_path / "moved"))
    result = DataParallelTrainer(
        train_func,
        scaling_config=scale_config,
        resume_from_checkpoint=Checkpoint.from_directory(moved),
        run_config=run_config,
    ).fit()
    assert result.checkpoint.to_dict()["epoch"] == 2


def test_invalid_train_loop():
    def train_loop(config, extra_arg):
        pass

    with pytest.raises(ValueError):
        DataParallelTrainer(train_loop_per_worker=train_loop)


def test_bad_return_in_train_loop(run_config):
    """A return value that cannot be pickled is dropped, not an error."""

    class FailOnUnpickle:
        def __reduce__(self):
            raise RuntimeError("Failing")

    def train_loop(config):
        session.report({"loss": 1})
        return FailOnUnpickle()

    DataParallelTrainer(train_loop, scaling_config=scale_config, run_config=run_config).fit()


@pytest.mark.slow
def test_tune(tmp_path):
    def train_func(config):
        session.report({"loss": config["x"]})

    trainer = DataParallelTrainer(
        train_func, train_loop_config={"x": 100}, scaling_config=scale_config
    )
    tuner = Tuner(
        trainer,
        param_space={"train_loop_config": {"x": tune.choice([200, 300])}},
        tune_config=TuneConfig(num_samples=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    )
    assert tuner.fit()[0].metrics["loss"] in [200, 300]


def test_checkpoint_config(run_config):
    def train_func():
        for idx, loss in enumerate([float("nan"), 3, 7, 5]):  # nan and 7 are dropped
            session.report({"loss": loss}, checkpoint=Checkpoint.from_dict({"idx": idx}))

    config = CheckpointConfig(
        num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min"
    )
    results = DataParallelTrainer(
        train_func,
        scaling_config=scale_config,
        run_config=RunConfig(
            storage_path=run_config.storage_path, verbose=0, checkpoint_config=config
        ),
    ).fit()
    assert results.checkpoint.to_dict()["idx"] == 3
    assert len(results.best_checkpoints) == 2
    assert results.best_checkpoints[0][0].to_dict()["idx"] == 3
    assert results.best_checkpoints[1][0].to_dict()["idx"] == 1
    assert results.best_checkpoints[0][1]["loss"] == 5
    assert results.best_checkpoints[1][1]["loss"] == 3


# From test_torch_trainer.py (AIR)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_torch_linear(run_config, num_workers):
    from tests.integration.ray_train.torch_linear import train_func as linear_train_func

    def train_func(config):
        result = linear_train_func(config)
        assert len(result) == 3
        assert result[-1]["loss"] < result[0]["loss"]

    TorchTrainer(
        train_func,
        train_loop_config={"lr": 1e-2, "hidden_size": 1, "batch_size": 4, "epochs": 3},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=run_config,
    ).fit()


def fit_linear_3_1(run_config, prepare_model: bool, save) -> Result:
    """A TorchTrainer run whose workers report ``save(model)`` of a Linear(3, 1), with
    Ray's DummyPreprocessor; the checkpoint keeps the preprocessor."""

    def train_func():
        model = torch.nn.Linear(3, 1)
        if prepare_model:
            model = train.torch.prepare_model(model)
        session.report({}, checkpoint=save(model))

    result = TorchTrainer(
        train_func,
        scaling_config=scale_config,
        preprocessor=FlagPreprocessor(),
        run_config=run_config,
    ).fit()
    assert isinstance(result.checkpoint.get_preprocessor(), FlagPreprocessor)
    return result


@pytest.mark.parametrize("prepare_model", (True, False))
def test_torch_e2e(run_config, prepare_model):
    result = fit_linear_3_1(run_config, prepare_model, TorchCheckpoint.from_model)
    batch_predictor = BatchPredictor.from_checkpoint(result.checkpoint, TorchPredictor)
    # a batch of 3 rows is one 1-D input of Linear(3, 1): one prediction per batch
    predictions = batch_predictor.predict(ld.range(9), batch_size=3, dtype=torch.float)
    assert predictions.count() == 3


@pytest.mark.parametrize("prepare_model", (True, False))
def test_torch_e2e_state_dict(run_config, prepare_model):
    result = fit_linear_3_1(
        run_config, prepare_model, lambda m: TorchCheckpoint.from_state_dict(m.state_dict())
    )
    with pytest.raises(ValueError):  # a state dict needs the model
        TorchPredictor.from_checkpoint(result.checkpoint)
    batch_predictor = BatchPredictor.from_checkpoint(
        result.checkpoint, TorchPredictor, model=torch.nn.Linear(3, 1)
    )
    predictions = batch_predictor.predict(ld.range(9), batch_size=3, dtype=torch.float)
    assert predictions.count() == 3


def test_torch_session_errors(run_config):
    """Reporting a state dict (tensors) is a ValueError in the worker, as in Ray."""

    def train_func():
        with pytest.raises(ValueError):
            session.report(torch.nn.Linear(1, 1).state_dict())

    TorchTrainer(train_func, scaling_config=scale_config, run_config=run_config).fit()


def test_torch_amp(run_config):
    def train_fn():
        train.torch.accelerate(amp=True)
        model = train.torch.prepare_model(torch.nn.Linear(1, 1))
        session.report({}, checkpoint=TorchCheckpoint.from_model(model))

    results = TorchTrainer(train_fn, scaling_config=scale_config, run_config=run_config).fit()
    assert results.checkpoint
    model = TorchCheckpoint.from_checkpoint(results.checkpoint).get_model()
    assert "forward" not in vars(model)  # saved without the autocast wrapper


def test_torch_amp_with_custom_get_state(run_config):
    def train_fn():
        train.torch.accelerate(amp=True)

        class CustomLinear(torch.nn.Linear):
            def __getstate__(self):
                return self.__dict__.copy()

        model = train.torch.prepare_model(CustomLinear(1, 1))
        session.report({}, checkpoint=TorchCheckpoint.from_model(model))

    results = TorchTrainer(train_fn, scaling_config=scale_config, run_config=run_config).fit()
    assert results.checkpoint


def test_torch_env_vars(run_config):
    def train_func(config):
        assert os.environ["LOCAL_RANK"] == str(session.get_local_rank())
        assert os.environ["RANK"] == str(session.get_world_rank())
        assert os.environ["LOCAL_WORLD_SIZE"] == str(session.get_local_world_size())
        assert os.environ["WORLD_SIZE"] == str(session.get_world_size())
        assert os.environ["ACCELERATE_TORCH_DEVICE"] == str(train.torch.get_device())

    TorchTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=1), run_config=run_config
    ).fit()
