"""Each executor passes the worker-group contract."""

import json
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


OPENMP_SLEEPING = """
import json, os, sys, warnings
from lockstep._internal.execution.capacity import usable_cpus
from lockstep._internal.execution.worker_group import forkserver
from lockstep.testing import fit_all_ranks
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

def threads():
    return os.environ.get("OMP_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY"), os.getppid()

def fit(num_workers):
    scaling = ScalingConfig(num_workers=num_workers, resources_per_worker={"CPU": usable_cpus()})
    trainer = DataParallelTrainer(
        threads, scaling_config=scaling, run_config=RunConfig(storage_path=sys.argv[1], verbose=0)
    )
    return fit_all_ranks(trainer)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ranks = [fit(1), fit(2)]
said = [str(w.message) for w in caught]
print(json.dumps({"ranks": ranks, "cpus": usable_cpus(), "driver": os.getpid(),
                  "server": forkserver.server_pid(), "said": said}))
"""


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_workers_with_more_threads_than_cpus_start_with_openmp_sleeping(start, tmp_path):
    """OpenMP's idle threads spin by default: where the workers' threads outnumber the
    CPUs, that spinning takes the CPUs the other workers' threads wait for. In a fresh
    driver: workers of several threads are forked only from a server forked before an
    OpenMP pool ran, which this test session's process has long passed."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["LOCKSTEP_WORKER_START"] = start
    out = subprocess.run(
        [sys.executable, "-c", OPENMP_SLEEPING, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(out.stdout)
    have = str(seen["cpus"])
    one, two = [[(n, policy) for n, policy, _ in ranks] for ranks in seen["ranks"]]
    assert one == [(have, None)]
    assert two == [(have, "PASSIVE")] * 2
    assert any("the workers will share CPUs" in line for line in seen["said"])
    parents = {parent for ranks in seen["ranks"] for _, _, parent in ranks}
    assert parents == ({seen["server"]} if start == "fork" else {seen["driver"]})
