"""Every place a training function runs passes the session contract."""

from __future__ import annotations

import os

import pytest

from lockstep import tune
from lockstep.train import (
    CheckpointConfig,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from tests.contracts.session import Outcome, SessionContract


class TrainerPlace(SessionContract):
    """A trainer's fit(), its one worker started as ``scaling_config`` says."""

    scaling_config = ScalingConfig(num_workers=1)

    def run(self, fn, out, storage, *, checkpoint_config=None):
        run_config = RunConfig(
            name="run",
            storage_path=storage,
            verbose=0,
            checkpoint_config=checkpoint_config or CheckpointConfig(),
            failure_config=FailureConfig(max_failures=0),
        )
        trainer = DataParallelTrainer(
            fn,
            train_loop_config={"out": out},
            scaling_config=self.scaling_config,
            run_config=run_config,
        )
        try:
            trainer.fit()
        except TrainingFailedError as error:
            return Outcome(error, os.path.join(storage, "run"))
        return Outcome(None, os.path.join(storage, "run"))


class TestForkedWorker(TrainerPlace):
    pass


class TestSpawnedWorker(TrainerPlace):
    @pytest.fixture(autouse=True)
    def spawn(self, monkeypatch):
        monkeypatch.setenv("LOCKSTEP_WORKER_START", "spawn")


class TestInline(TrainerPlace):
    scaling_config = ScalingConfig(num_workers=0)


class TestFunctionTrial(SessionContract):
    """A Tune function trial: the function itself is the trainable."""

    def run(self, fn, out, storage, *, checkpoint_config=None):
        tuner = tune.Tuner(
            fn,
            param_space={"out": out},
            run_config=tune.RunConfig(
                name="exp",
                storage_path=storage,
                verbose=0,
                checkpoint_config=checkpoint_config or CheckpointConfig(),
                failure_config=FailureConfig(max_failures=0),
            ),
        )
        (result,) = tuner.fit()
        return Outcome(result.error, result.path)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.usefixtures("ray_connected")
class TestRayActor(TrainerPlace):
    scaling_config = ScalingConfig(num_workers=1, executor="ray")
