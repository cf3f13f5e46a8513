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


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_workers_with_more_threads_than_cpus_start_with_openmp_sleeping(
    start, monkeypatch, tmp_path
):
    """OpenMP's idle threads spin by default: where the workers' threads outnumber the
    CPUs, that spinning takes the CPUs the other workers' threads wait for."""
    from lockstep._internal.execution.capacity import usable_cpus
    from lockstep.testing import fit_all_ranks
    from lockstep.train import DataParallelTrainer, RunConfig

    monkeypatch.setenv("LOCKSTEP_WORKER_START", start)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    have = usable_cpus()

    def threads():
        return os.environ.get("OMP_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY")

    def fit(num_workers):
        trainer = DataParallelTrainer(
            threads,
            scaling_config=ScalingConfig(
                num_workers=num_workers, resources_per_worker={"CPU": have}
            ),
            run_config=RunConfig(storage_path=str(tmp_path), verbose=0),
        )
        return fit_all_ranks(trainer)

    assert fit(1) == [(str(have), None)]
    with pytest.warns(UserWarning, match="the workers will share CPUs"):
        assert fit(2) == [(str(have), "PASSIVE")] * 2
