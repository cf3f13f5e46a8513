"""The backend contract: every framework backend passes these tests.

A new backend subclasses BackendContract and overrides ``backend_config`` and, to prove the
framework is set up inside each worker, ``probe`` (a function returning JSON data that
``check_probe`` asserts on).
"""

from __future__ import annotations

import dataclasses

import pytest

from lockstep import train
from lockstep.testing import Fault, train_epochs
from lockstep.train import (
    BackendConfig,
    DataParallelTrainer,
    FailureConfig,
    ScalingConfig,
    TrainingFailedError,
)
from tests.helpers import EveryRank


class BackendContract:
    num_workers = 2

    @pytest.fixture
    def backend_config(self) -> BackendConfig:
        raise NotImplementedError

    @staticmethod
    def probe() -> object:
        """Runs in each worker after the backend set up; returns what check_probe checks."""
        return True

    def check_probe(self, results: list[object], world_size: int) -> None:
        assert results == [True] * world_size

    def trainer(self, backend_config, run_config, fn, **kwargs):
        return DataParallelTrainer(
            fn,
            backend_config=backend_config,
            scaling_config=ScalingConfig(num_workers=self.num_workers),
            run_config=run_config,
            **kwargs,
        )

    def test_framework_is_set_up_in_every_worker(self, backend_config, run_config):
        probe = type(self).probe
        ranks = EveryRank()
        config = dataclasses.replace(run_config, name="probe", callbacks=[ranks])
        self.trainer(backend_config, config, lambda: train.report({"probe": probe()})).fit()
        self.check_probe([m["probe"] for m in ranks.steps[0]], self.num_workers)

    def test_set_up_again_after_a_restart(self, backend_config, run_config):
        probe = type(self).probe

        def train_func(config):
            train_epochs(config)
            train.report({"probe": probe()})

        ranks = EveryRank()
        config = dataclasses.replace(
            run_config,
            name="restart",
            callbacks=[ranks],
            failure_config=FailureConfig(max_failures=1),
        )
        fault = Fault(kind="raise", rank=self.num_workers - 1, at_epoch=1)
        self.trainer(
            backend_config, config, train_func, train_loop_config={"epochs": 2, "faults": [fault]}
        ).fit()
        self.check_probe([m["probe"] for m in ranks.steps[-1]], self.num_workers)

    def test_a_failing_rank_does_not_hang_the_others(self, backend_config, run_config):
        fault = Fault(kind="exit", rank=self.num_workers - 1, at_epoch=1)
        with pytest.raises(TrainingFailedError, match="exited with code 1"):
            self.trainer(
                backend_config,
                run_config,
                train_epochs,
                train_loop_config={"epochs": 3, "faults": [fault]},
            ).fit()
