"""Continue a run whose driver was killed: workers die with it, restore picks up the rest."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from lockstep.train import DataParallelTrainer, Result
from tests.helpers import latest_checkpoint

# No `if __name__ == "__main__"` guard, as in Ray Train scripts: workers never import __main__.
SCRIPT = textwrap.dedent("""
    import os, sys, tempfile, time
    from lockstep import train
    from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig

    EPOCHS = 8

    def train_func(config):
        start = 0
        if checkpoint := train.get_checkpoint():
            with checkpoint.as_directory() as d:
                start = int(open(os.path.join(d, "epoch.txt")).read()) + 1
        for epoch in range(start, config["epochs"]):
            time.sleep(config["sleep_s"])
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "epoch.txt"), "w").write(str(epoch))
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))
        return config["epochs"] - start

    DataParallelTrainer(
        train_func, train_loop_config={"epochs": EPOCHS, "sleep_s": 0.3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="killed", storage_path=sys.argv[1], verbose=0),
    ).fit()
""")


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def start_driver(tmp_path):
    """Run SCRIPT as its own driver process; return it and its run directory."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "runs")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return driver, str(tmp_path / "runs" / "killed")


def test_restore_after_the_driver_is_killed(tmp_path):
    driver, run_dir = start_driver(tmp_path)
    try:
        wait_for(lambda: latest_checkpoint(run_dir) == "checkpoint_000002")
        # the workers, and the fork server they were forked from
        workers = psutil.Process(driver.pid).children(recursive=True)
        assert len(workers) >= 2
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # workers do not outlive their driver
        wait_for(
            lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers),
            timeout=10,
        )
    finally:
        driver.kill()
        driver.wait()

    assert DataParallelTrainer.can_restore(run_dir)
    assert not DataParallelTrainer.can_restore(str(tmp_path))
    interrupted = Result.from_path(run_dir)
    done_before = interrupted.metrics["epoch"]
    assert done_before >= 2

    result = DataParallelTrainer.restore(
        run_dir, train_loop_config={"epochs": 8, "sleep_s": 0}
    ).fit()
    epochs = result.metrics_dataframe["epoch"].tolist()
    with open(os.path.join(interrupted.checkpoint.path, "epoch.txt")) as f:
        resumed_at = int(f.read()) + 1
    assert epochs[-(8 - resumed_at) :] == list(range(resumed_at, 8))
    assert result.return_value == 8 - resumed_at
    assert result.metrics == {"epoch": 7}
    assert result.metrics_dataframe["training_iteration"].tolist() == list(
        range(1, len(epochs) + 1)
    )
    assert not os.path.exists(os.path.join(run_dir, ".staging"))
    assert Result.from_path(run_dir).checkpoint == result.checkpoint


def test_restore_of_something_that_is_not_a_run(tmp_path):
    import pytest

    with pytest.raises(RuntimeError, match="holds no lockstep run"):  # as Ray raises it
        DataParallelTrainer.restore(str(tmp_path))


def test_ctrl_c_stops_the_workers_and_the_run_can_be_restored(tmp_path):
    driver, run_dir = start_driver(tmp_path)
    try:
        wait_for(lambda: latest_checkpoint(run_dir) == "checkpoint_000001")
        workers = psutil.Process(driver.pid).children(recursive=True)
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=30)
    finally:
        driver.kill()
        driver.wait()
    assert driver.returncode == 130  # stopped gracefully, quietly, as after Ctrl-C
    assert "Traceback" not in err
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    assert not os.path.exists(os.path.join(run_dir, ".staging"))
    assert DataParallelTrainer.can_restore(run_dir)
    config = {"epochs": 8, "sleep_s": 0}
    result = DataParallelTrainer.restore(run_dir, train_loop_config=config).fit()
    assert result.metrics == {"epoch": 7}
