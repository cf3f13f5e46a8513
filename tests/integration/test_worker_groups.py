"""Each executor passes the worker-group contract."""

import pytest

from lockstep.train import ScalingConfig
from tests.contracts.worker_group import ProcessDeathContract, WorkerGroupContract


class TestProcessWorkerGroup(ProcessDeathContract):
    @pytest.fixture
    def scaling_config(self):
        return ScalingConfig(num_workers=2, executor="process")


class TestSpawnedProcessWorkerGroup(ProcessDeathContract):
    """Workers started as fresh Python processes, as when forking is not safe."""

    @pytest.fixture
    def scaling_config(self, monkeypatch):
        monkeypatch.setenv("LOCKSTEP_WORKER_START", "spawn")
        return ScalingConfig(num_workers=2, executor="process")


class TestInlineWorkerGroup(WorkerGroupContract):
    can_kill_workers = False

    @pytest.fixture
    def scaling_config(self):
        return ScalingConfig(num_workers=0)
