"""Ported from Ray's python/ray/train/v2/tests/test_data_parallel_trainer.py and
test_torch_trainer.py (imports changed to lockstep, Ray's cluster fixture dropped, every
assertion kept; runs write into the test's directory).

test_backend_setup is tests/integration/test_ray_behaviour.py's test_rays_backend_hooks_are_called.
Left out: ``test_setup_working_directory`` (Ray's session directory and
``RAY_CHDIR_TO_TRIAL_DIR``) and ``test_sigint_abort`` (Ray actors, Ray's controller).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow.fs
import pytest

from lockstep import train
from lockstep.train import (
    Checkpoint,
    Result,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
    UserCallback,
    WorkerGroupError,
)
from lockstep.train.data_parallel_trainer import DataParallelTrainer
from lockstep.train.torch import TorchTrainer
from tests.integration.ray_train.helpers import dict_checkpoint


def quiet(tmp_path, **kwargs):
    return RunConfig(storage_path=str(tmp_path), verbose=0, **kwargs)


def test_result_output(tmp_path):
    result = DataParallelTrainer(
        lambda: None,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=quiet(tmp_path, name="test"),
    ).fit()
    assert isinstance(result, Result)
    assert result.path == str(tmp_path / "test")
    assert isinstance(result.filesystem, pyarrow.fs.FileSystem)


def test_no_optional_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKSTEP_STORAGE_PATH", str(tmp_path))  # the default storage
    DataParallelTrainer(lambda: "not used").fit()


def test_train_loop_config(tmp_path):
    def train_fn(config):
        with dict_checkpoint({}) as checkpoint:
            train.report(metrics=config, checkpoint=checkpoint)

    result = DataParallelTrainer(
        train_fn,
        train_loop_config={"x": 1},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=quiet(tmp_path),
    ).fit()
    assert result.metrics == {"x": 1}


def test_report_checkpoint_rank0(tmp_path):
    def train_fn():
        rank = train.get_context().get_world_rank()
        if rank == 0:
            with dict_checkpoint({}) as checkpoint:
                train.report(metrics={"rank": rank}, checkpoint=checkpoint)
        else:
            train.report(metrics={"rank": rank}, checkpoint=None)

    result = DataParallelTrainer(
        train_fn, scaling_config=ScalingConfig(num_workers=2), run_config=quiet(tmp_path)
    ).fit()
    assert result.metrics == {"rank": 0}
    assert result.checkpoint


def test_report_checkpoint_multirank(tmp_path):
    ranks_to_report = [1, 3]

    def train_fn():
        rank = train.get_context().get_world_rank()
        if rank in ranks_to_report:
            with tempfile.TemporaryDirectory() as d:
                Path(d, str(rank)).touch()
                train.report(metrics={"rank": rank}, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report(metrics={"rank": rank}, checkpoint=None)

    result = DataParallelTrainer(
        train_fn, scaling_config=ScalingConfig(num_workers=4), run_config=quiet(tmp_path / "r")
    ).fit()
    assert result.checkpoint
    result.checkpoint.to_directory(tmp_path / "validate")
    for rank in ranks_to_report:
        assert tmp_path.joinpath("validate", str(rank)).exists()


def test_report_get_all_reported_checkpoints(tmp_path):
    def train_fn():
        if train.get_context().get_world_rank() == 0:
            train.report(metrics={}, checkpoint=None)
            with dict_checkpoint({}) as checkpoint:
                train.report(metrics={}, checkpoint=checkpoint)
            assert len(train.get_all_reported_checkpoints()) == 1
            with dict_checkpoint({}) as checkpoint:
                train.report(metrics={}, checkpoint=checkpoint)
        else:
            for _ in range(3):
                train.report(metrics={}, checkpoint=None)
            assert len(train.get_all_reported_checkpoints()) == 2

    DataParallelTrainer(
        train_fn, scaling_config=ScalingConfig(num_workers=2), run_config=quiet(tmp_path)
    ).fit()


def test_error(tmp_path):
    def error_on_rank_0():
        if train.get_context().get_world_rank() == 0:
            raise ValueError("error")

    trainer = DataParallelTrainer(
        error_on_rank_0,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=quiet(tmp_path, name="test"),
    )
    with pytest.raises(TrainingFailedError) as exc_info:
        trainer.fit()
    # Ray's test asserts these inside the raises block, where they never run
    assert isinstance(exc_info.value, WorkerGroupError)
    assert isinstance(exc_info.value.__cause__, ValueError)


def test_user_callback(tmp_path):
    num_workers = 2

    class MyUserCallback(UserCallback):
        def after_report(self, run_context, metrics, checkpoint):
            assert len(metrics) == num_workers
            assert not checkpoint

        def after_exception(self, run_context, worker_exceptions):
            assert len(worker_exceptions) == 1
            assert worker_exceptions.get(0) is not None

    def train_fn(config):
        train.report(metrics={"rank": train.get_context().get_world_rank()})
        if train.get_context().get_world_rank() == 0:
            raise ValueError("error")

    trainer = DataParallelTrainer(
        train_fn,
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=quiet(tmp_path, callbacks=[MyUserCallback()]),
    )
    # the error is the worker's, not an assertion of the callback
    with pytest.raises(WorkerGroupError):
        trainer.fit()


# From test_torch_trainer.py (V2)


def test_minimal(tmp_path):
    TorchTrainer(lambda: None, run_config=quiet(tmp_path)).fit()


@pytest.mark.parametrize("num_workers", [1, 2])
def test_torch_linear(tmp_path, num_workers):
    from tests.integration.ray_train.torch_linear import train_func as linear_train_func

    epochs = 3

    def train_func(config):
        result = linear_train_func(config)
        assert len(result) == epochs
        assert result[-1]["loss"] < result[0]["loss"]

    TorchTrainer(
        train_loop_per_worker=train_func,
        train_loop_config={"lr": 1e-2, "hidden_size": 1, "batch_size": 4, "epochs": epochs},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=quiet(tmp_path),
    ).fit()
