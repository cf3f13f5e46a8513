"""Every part of lockstep may die: SIGKILL to the fork server (the process the workers are
forked from) mid-run is a worker-group failure, answered by a restart with a new server."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import pytest

from lockstep import train
from lockstep._internal.execution.worker_group import forkserver
from lockstep.train import (
    Checkpoint,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)

STEPS = 6


# These tests start fork servers of their own (see the fixture).
pytestmark = pytest.mark.usefixtures("fork_safe_driver")


def counting(config):
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "step")) as f:
            start = int(f.read()) + 1
    for step in range(start, STEPS):
        if step == 2:
            die_with_a_killed_server(config["killed_file"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
    return start


def die_with_a_killed_server(killed_file):
    """Wait for the driver to kill this worker's fork server after step 1's report (a
    report returns before the driver's callbacks run: without the wait, the run could end
    first), then for the death that follows; a worker of a new server goes on."""
    while not os.path.exists(killed_file):
        time.sleep(0.01)
    with open(killed_file) as f:
        killed = int(f.read())
    while os.getppid() == killed:
        time.sleep(0.01)


class KillForkServer(train.UserCallback):
    """At the driver's second report, SIGKILL the fork server the workers came from."""

    def __init__(self, killed_file) -> None:
        self.killed_file = killed_file  # the workers learn the server's pid from it
        self.killed: list[int] = []
        self.children: list[int] = []  # the server's when it was killed: the workers

    def after_report(self, run_context, metrics, checkpoint):
        if metrics[0]["step"] == 1 and not self.killed:
            pid = forkserver.server_pid()
            assert pid is not None
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                self.children = [int(child) for child in f.read().split()]
            self.killed.append(pid)
            with open(f"{self.killed_file}.tmp", "w") as f:
                f.write(str(pid))
            os.rename(f"{self.killed_file}.tmp", self.killed_file)
            os.kill(pid, signal.SIGKILL)


def fit(tmp_path, max_failures, killer):
    return DataParallelTrainer(
        counting,
        train_loop_config={"killed_file": killer.killed_file},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp_path),
            verbose=0,
            callbacks=[killer],
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    ).fit()


def test_a_killed_fork_server_is_restarted_and_the_run_completes(tmp_path):
    killer = KillForkServer(str(tmp_path / "killed"))
    result = fit(tmp_path, 1, killer)
    assert killer.killed and len(killer.children) == 2, "the workers were forked from it"
    assert result.metrics == {"step": STEPS - 1}
    assert result.return_value >= 2  # resumed from a checkpoint after the kill
    assert forkserver.server_pid() not in (None, killer.killed[0])  # a new server


def test_a_killed_fork_server_with_no_restarts_left_names_it(tmp_path):
    killer = KillForkServer(str(tmp_path / "killed"))
    with pytest.raises(TrainingFailedError) as raised:
        fit(tmp_path, 0, killer)
    message = str(raised.value)
    assert f"lockstep's fork server (pid {killer.killed[0]}) was killed by SIGKILL" in message
