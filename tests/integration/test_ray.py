"""The Ray executor on a real Ray cluster started by the tests (`ray start`, not mocked)."""

from __future__ import annotations

import os

import psutil
import pytest

from lockstep import train
from lockstep._core import storage
from lockstep.testing import train_epochs
from lockstep.train import (
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from tests.contracts.worker_group import ProcessDeathContract
from tests.helpers import hang_of

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_connected")]


def live_placement_groups():
    import ray

    return [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]


class TestRayWorkerGroup(ProcessDeathContract):
    @pytest.fixture
    def scaling_config(self):
        return ScalingConfig(num_workers=2, executor="ray")

    @pytest.fixture
    def death_causes(self):
        # Ray does not report the exit code of an actor's process, only that it died.
        return {"exit": r"died", "signal": r"died"}


def test_no_actors_or_placement_groups_are_left(run_config):
    def train_func():
        train.report({"pid": os.getpid()})
        return os.getpid()

    class Pids(train.UserCallback):
        pids: list[int] = []

        def after_report(self, run_context, metrics, checkpoint):
            self.pids.extend(m["pid"] for m in metrics)

    config = RunConfig(storage_path=run_config.storage_path, verbose=0, callbacks=[Pids()])
    DataParallelTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=2), run_config=config
    ).fit()
    with pytest.raises(TrainingFailedError):
        DataParallelTrainer(
            lambda: 1 / 0, scaling_config=ScalingConfig(num_workers=2), run_config=config
        ).fit()
    assert live_placement_groups() == []
    assert len(Pids.pids) == 2
    _, alive = psutil.wait_procs(
        [psutil.Process(p) for p in Pids.pids if psutil.pid_exists(p)], timeout=10
    )
    assert alive == []


def test_ray_is_chosen_when_initialised(run_config):
    result = DataParallelTrainer(
        lambda: train.get_context().node_ip,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    ).fit()
    import ray

    assert result.return_value == ray.util.get_node_ip_address()


def test_workers_that_cannot_see_the_run_directory_fail_at_once_naming_the_node(
    tmp_path, monkeypatch
):
    trainer = DataParallelTrainer(
        train_epochs,
        train_loop_config={"epochs": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="m", verbose=0),
    )
    # What a node without the shared storage sees: no marker in the run directory (the
    # driver writes its marker under another name; the workers look for the real one).
    monkeypatch.setattr(storage, "MARKER_FILE", ".not-the-marker")
    with pytest.raises(
        TrainingFailedError,
        match=r"on node \d+\.\d+\.\d+\.\d+ .*cannot see the run directory.*shares",
    ):
        trainer.fit()
    assert not list((tmp_path / "m").glob("checkpoint_*"))


def test_cluster_too_small_is_a_warning_at_construction_naming_asked_and_existing():
    # an autoscaler may still add the nodes: Ray itself warns and waits
    with pytest.warns(UserWarning) as caught:
        DataParallelTrainer(
            lambda: None,
            scaling_config=ScalingConfig(num_workers=3, resources_per_worker={"CPU": 10}),
        )
    (warning,) = [w for w in caught if "cannot hold" in str(w.message)]
    assert "cannot hold 3 workers" in str(warning.message)
    assert "CPU: 30 asked, 4 in the cluster" in str(warning.message)
    assert warning.filename == __file__


def test_use_gpu_on_a_cluster_without_gpus_is_an_error():
    with pytest.raises(ValueError, match=r"use_gpu=True but the Ray cluster has no GPU.*HINT"):
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(use_gpu=True))


# Ray Data copies its DataContext field by field, deprecated fields too, and warns of them
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_ray_data_datasets_stream_into_the_workers(run_config):
    import ray

    ds = ray.data.range(40)

    def train_func():
        shard = train.get_dataset_shard("train")
        seen = [int(row["id"]) for row in shard.iter_rows()]
        again = [int(row["id"]) for row in shard.iter_rows()]  # every epoch re-iterates
        train.report({"seen": sorted(seen), "again": sorted(again)})

    class Shards(train.UserCallback):
        shards: list = []

        def after_report(self, run_context, metrics, checkpoint):
            self.shards.extend(metrics)

    config = RunConfig(storage_path=run_config.storage_path, verbose=0, callbacks=[Shards()])
    DataParallelTrainer(
        train_func,
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=config,
    ).fit()
    first, second = (m["seen"] for m in Shards.shards)
    assert len(first) == len(second) == 20 and not set(first) & set(second)
    assert sorted(first + second) == list(range(40))
    # Ray Data hands blocks to the splits as they ask: an epoch's rows per worker may
    # differ from the last one's, but each epoch still covers every row once.
    first_again, second_again = (m["again"] for m in Shards.shards)
    assert len(first_again) == len(second_again) == 20
    assert sorted(first_again + second_again) == list(range(40))


def test_ray_datasets_need_the_ray_executor():
    import ray

    with pytest.raises(ValueError, match=r"\['train'\] are ray.data Datasets.*executor='ray'"):
        DataParallelTrainer(
            lambda: None,
            datasets={"train": ray.data.range(4)},
            scaling_config=ScalingConfig(num_workers=2, executor="process"),
        )


CTRL_C_SCRIPT = """
import sys
from lockstep.testing import train_epochs
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig
DataParallelTrainer(train_epochs, train_loop_config={"epochs": 50, "sleep_s": 0.3},
                    scaling_config=ScalingConfig(num_workers=2),
                    run_config=RunConfig(name="c", storage_path=sys.argv[1], verbose=0)).fit()
"""


def test_ctrl_c_releases_the_placement_group(ray_cluster, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "driver.py"
    script.write_text(CTRL_C_SCRIPT)
    # time enough to end their function (and its temporary directory) however loaded the
    # machine: a Ray actor is killed once the grace has passed
    env = {
        **os.environ,
        "RAY_ADDRESS": ray_cluster.address,
        "LOCKSTEP_WORKER_SHUTDOWN_GRACE_S": "60",
    }
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        state = tmp_path / "c" / "run_state.json"
        deadline = time.monotonic() + 120
        while not (state.exists() and '"checkpoint_000000"' in state.read_text()):
            assert time.monotonic() < deadline and driver.poll() is None, "no checkpoint came"
            time.sleep(0.1)
        assert live_placement_groups() != []
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
        driver.wait()
    # stopped on Ctrl-C: the workers are stopped and the program ends as a shell's does
    assert driver.returncode == 130, err
    deadline = time.monotonic() + 30
    while live_placement_groups() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_placement_groups() == []


def test_a_hung_actor_is_named_with_its_stack(tmp_path):
    import threading

    def stuck_in_actor():
        threading.Event().wait()

    def train_func():
        train.report({"step": 0})
        if train.get_context().get_world_rank() == 1:
            stuck_in_actor()
        train.report({"step": 1})

    trainer = DataParallelTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp_path),
            name="hung",
            verbose=0,
            failure_config=FailureConfig(hang_timeout_s=2.0),
        ),
    )
    failure = hang_of(trainer)
    assert ", in stuck_in_actor() at test_ray.py:" in failure.summary
    assert failure.summary.endswith("; rank 0 waiting in report() for step 2")
    assert "in stuck_in_actor" in (tmp_path / "hung" / "errors" / "attempt_0.txt").read_text()
    assert live_placement_groups() == []
