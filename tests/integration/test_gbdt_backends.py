"""The XGBoost and LightGBM backends pass the backend contract."""

from __future__ import annotations

import pytest

from lockstep._internal.backends.lightgbm import LightGBMConfig
from lockstep._internal.backends.xgboost import XGBoostConfig
from tests.contracts.backend import BackendContract


class TestXGBoostBackend(BackendContract):
    @pytest.fixture
    def backend_config(self):
        return XGBoostConfig()

    @staticmethod
    def probe():
        import numpy as np
        import xgboost

        from lockstep import train

        rank = train.get_context().get_world_rank()
        total = xgboost.collective.allreduce(np.array([rank + 1.0]), xgboost.collective.Op.SUM)
        return [xgboost.collective.get_rank(), xgboost.collective.get_world_size(), total[0]]

    def check_probe(self, results, world_size):
        total = world_size * (world_size + 1) / 2
        assert results == [[rank, world_size, total] for rank in range(world_size)]


class TestLightGBMBackend(BackendContract):
    @pytest.fixture
    def backend_config(self):
        return LightGBMConfig()

    @staticmethod
    def probe():
        from lockstep.train.lightgbm import get_network_params

        return get_network_params()

    def check_probe(self, results, world_size):
        machines = results[0]["machines"].split(",")
        assert len(machines) == world_size == len({r["local_listen_port"] for r in results})
        assert all(r["machines"] == results[0]["machines"] for r in results)
        assert all(r["num_machines"] == world_size for r in results)


def test_xgboost_config_checks_the_communicator():
    with pytest.raises(ValueError, match="unknown xgboost_communicator 'nccl'"):
        XGBoostConfig(xgboost_communicator="nccl")
