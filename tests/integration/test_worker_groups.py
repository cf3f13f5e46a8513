"""Each executor passes the worker-group contract."""

import os
import subprocess
import sys

import pytest

from lockstep.train import ScalingConfig
from tests.contracts.worker_group import (
    ProcessDeathContract,
    StoppedRankContract,
    WorkerGroupContract,
)


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


MEMBER = """
import sys
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

while True:  # every fit of the test: join it, serve it, then the next
    try:
        run = RunConfig(storage_path=sys.argv[1], verbose=0)
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2),
                            run_config=run).fit()
    except SystemExit:
        pass
"""


def torchrun_variables(rank: int) -> dict[str, str]:
    """torchrun's variables of process ``rank`` of two on this machine."""
    return {
        "TORCHELASTIC_RUN_ID": "contract",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
    }


class TestClusterWorkerGroup(StoppedRankContract):
    """Two processes a launcher started on this machine (as ``torchrun --nproc-per-node
    2``): the test's own drives each fit, a second one joins it and starts its worker."""

    @pytest.fixture
    def scaling_config(self, monkeypatch, run_config):
        for name, value in torchrun_variables(0).items():
            monkeypatch.setenv(name, value)
        env = {**os.environ, **torchrun_variables(1)}
        member = subprocess.Popen(
            [sys.executable, "-c", MEMBER, str(run_config.storage_path)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        yield ScalingConfig(num_workers=2)
        # (a joined process passes SIGTERM on to its driver: it may be between two fits)
        member.kill()
        member.wait(timeout=30)
