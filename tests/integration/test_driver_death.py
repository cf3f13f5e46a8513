"""A driver killed at any moment (start-up, mid-commit, mid-training), then the run continued
by running the script again and by restore(): every row once, restore accepted, no leftovers.

The kills are deterministic: ``LOCKSTEP_FAULT_POINT`` makes the driver SIGKILL itself at a
named point of its run record (see ``lockstep._core.flags.fault_point``).
"""

import csv
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

from lockstep import train
from lockstep.testing import fit_all_ranks, train_epochs
from lockstep.train import (
    Checkpoint,
    CheckpointUploadMode,
    DataParallelTrainer,
    Result,
    RunConfig,
    ScalingConfig,
)

EPOCHS = 6

# Rows without a checkpoint too (checkpoint_every=2): they are kept, as after a worker restart.
SCRIPT = textwrap.dedent(f"""
    import sys
    from lockstep.testing import train_epochs
    from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

    DataParallelTrainer(
        train_epochs, train_loop_config={{"epochs": {EPOCHS}, "checkpoint_every": 2}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="killed", storage_path=sys.argv[1], verbose=0),
    ).fit()
""")


def run_driver(tmp_path, fault_point, storage=None, source=SCRIPT):
    """Run ``source`` as a driver process that is killed (by itself at ``fault_point``, or
    by its own workers); wait until it and every process it started are gone."""
    storage = storage or str(tmp_path / "runs")
    script = tmp_path / "train.py"
    script.write_text(source)
    tag = str(tmp_path)
    scratch = tmp_path / "tmp"  # what killed workers leave in their temporary directories
    scratch.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "LOCKSTEP_FAULT_POINT": fault_point,
        "LOCKSTEP_TEST_DRIVER": tag,
        "TMPDIR": str(scratch),
    }
    driver = subprocess.run(
        [sys.executable, str(script), storage],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    # The fork server and the workers die with the driver (parent-death signal), a moment
    # later: the next driver must not share the run with them.
    deadline = time.monotonic() + 30
    while (left := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left
    return f"{storage}/killed"


def _tagged(tag):
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("LOCKSTEP_TEST_DRIVER") == tag:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def assert_whole(run_dir, result):
    """result.json, progress.csv and metrics_dataframe: iterations 1..N, each once."""
    with open(os.path.join(run_dir, "result.json")) as f:
        lines = [json.loads(line) for line in f]
    with open(os.path.join(run_dir, "progress.csv")) as f:
        table = list(csv.DictReader(f))
    iterations = [row["training_iteration"] for row in lines]
    assert iterations == list(range(1, len(lines) + 1))
    assert [int(row["training_iteration"]) for row in table] == iterations
    assert result.metrics_dataframe["training_iteration"].tolist() == iterations
    assert Result.from_path(run_dir).metrics_dataframe["training_iteration"].tolist() == (
        iterations
    )
    # Every epoch trained shows up, the last one last; redone steps keep their first rows.
    epochs = [row["epoch"] for row in lines]
    assert set(epochs) == set(range(EPOCHS)) and epochs[-1] == EPOCHS - 1
    # Each row names a checkpoint that was committed, or none.
    named = [row["checkpoint_dir_name"] for row in lines if row["checkpoint_dir_name"]]
    assert named == sorted(set(named))
    assert result.checkpoint is not None and os.path.basename(result.checkpoint.path) == named[-1]
    assert not os.path.exists(os.path.join(run_dir, ".staging"))
    leftovers = {n for n in os.listdir(run_dir) if n.startswith("checkpoint_")}
    assert leftovers == {os.path.basename(c.path) for c, _ in result.best_checkpoints}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("run_opened", "checkpoint_moved:2"),  # at start-up, before any worker starts
        ("checkpoint_moved:2", "row_written:1"),  # mid-commit: renamed, state not saved
        ("row_written:2", "run_opened"),  # row durable, checkpoint not yet committed
        ("step_recorded:3", "step_recorded:2"),  # mid-training
    ],
)
def test_driver_killed_twice_then_restored(tmp_path, first, second, caplog):
    run_dir = run_driver(tmp_path, first)
    assert DataParallelTrainer.can_restore(run_dir)
    run_driver(tmp_path, second)  # the script run again, killed again
    assert DataParallelTrainer.can_restore(run_dir)
    with caplog.at_level(logging.WARNING, logger="lockstep"):
        result = DataParallelTrainer.restore(run_dir).fit()
    assert result.metrics["epoch"] == EPOCHS - 1
    assert_whole(run_dir, result)
    swept = [r for r in caplog.records if "interrupted driver left" in r.getMessage()]
    assert len(swept) <= 1


def test_restore_after_a_kill_at_start_up_is_a_fresh_start(tmp_path):
    run_dir = run_driver(tmp_path, "run_opened")
    interrupted = Result.from_path(run_dir)
    assert interrupted.checkpoint is None and interrupted.metrics is None
    result = DataParallelTrainer.restore(run_dir).fit()
    # the same configuration: train_epochs ran every epoch, from the start
    assert result.return_value == EPOCHS
    assert result.metrics_dataframe["epoch"].tolist() == list(range(EPOCHS))
    assert_whole(run_dir, result)


@pytest.mark.parametrize("by", ["fit", "restore"])
def test_leftovers_of_a_killed_commit_are_swept_with_one_line(tmp_path, caplog, by):
    run_dir = run_driver(tmp_path, "checkpoint_moved:2")
    assert os.path.exists(os.path.join(run_dir, "checkpoint_000001"))  # renamed, uncommitted
    assert os.path.exists(os.path.join(run_dir, ".staging"))
    with caplog.at_level(logging.WARNING, logger="lockstep"):
        if by == "restore":
            trainer = DataParallelTrainer.restore(run_dir)
            assert not os.path.exists(os.path.join(run_dir, ".staging"))
            assert not os.path.exists(os.path.join(run_dir, "checkpoint_000001"))
        else:
            trainer = DataParallelTrainer(
                train_epochs,
                train_loop_config={"epochs": EPOCHS, "checkpoint_every": 2},
                run_config=RunConfig(name="killed", storage_path=str(tmp_path / "runs"), verbose=0),
                scaling_config=ScalingConfig(num_workers=2),
            )
        result = trainer.fit()
    swept = [r.getMessage() for r in caplog.records if "interrupted driver" in r.getMessage()]
    assert len(swept) == 1
    assert ".staging, checkpoint_000001, 1 result row(s)" in swept[0]
    assert_whole(run_dir, result)


@pytest.mark.slow
def test_rows_journalled_for_s3_survive_a_driver_kill(tmp_path, s3_endpoint, monkeypatch):
    journal = tmp_path / "journal"
    monkeypatch.setenv("LOCKSTEP_JOURNAL_DIR", str(journal))
    # Killed after the third step, which has no checkpoint: its row is in the local
    # journal only (rows are uploaded with each checkpoint).
    run_dir = run_driver(tmp_path, "step_recorded:3", storage="s3://lockstep-runs/exp")
    assert len(os.listdir(journal)) == 1
    result = DataParallelTrainer.restore(run_dir).fit()
    # epoch 2 was reported, then redone from the checkpoint of epoch 1: both rows are kept
    assert result.metrics_dataframe["epoch"].tolist() == [0, 1, 2, 2, 3, 4, 5]
    assert result.metrics_dataframe["training_iteration"].tolist() == list(range(1, 8))
    assert os.listdir(journal) == []


def last_line(run_dir):
    """The last line of result.json, as read from the file."""
    with open(os.path.join(run_dir, "result.json")) as f:
        return json.loads(f.read().splitlines()[-1])


def assert_table_follows(run_dir):
    """progress.csv holds result.json's first rows, as a table: the same values, none
    that result.json lacks (it may not have the last ones yet)."""
    with open(os.path.join(run_dir, "result.json")) as f:
        lines = [json.loads(line) for line in f]
    with open(os.path.join(run_dir, "progress.csv")) as f:
        table = list(csv.DictReader(f))
    assert len(table) <= len(lines)
    for row, line in zip(table, lines, strict=False):
        assert row["training_iteration"] == str(line["training_iteration"])
        assert row["epoch"] == str(line["epoch"])


def reads_its_rows_after_each_report(config):
    """Each rank, as soon as report() returns, reads the run's result.json from the disk."""
    run_dir = train.get_context().get_trial_dir()
    seen = []
    for step in range(config["steps"]):
        metrics = {"step": step, "loss": 1.0 / (step + 1)}
        if step == config["steps"] // 2:
            metrics["new_column"] = step  # progress.csv is rewritten with the new column
        if step in config["async_at"]:
            with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
                train.report(
                    metrics,
                    checkpoint=Checkpoint.from_directory(d),
                    checkpoint_upload_mode=CheckpointUploadMode.ASYNC,
                )
        else:
            train.report(metrics)
        line = last_line(run_dir)
        seen.append((line["step"], line["training_iteration"]))
    return seen


def test_a_row_is_on_disk_before_report_returns(run_config):
    steps = 12
    trainer = DataParallelTrainer(
        reads_its_rows_after_each_report,
        train_loop_config={"steps": steps, "async_at": [3, 9]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    )
    expected = [(step, step + 1) for step in range(steps)]
    assert fit_all_ranks(trainer) == [expected, expected]
    # progress.csv, written behind result.json, holds every row once the run ended, with
    # the column that came mid-run
    with open(os.path.join(run_config.storage_path, "run", "progress.csv")) as f:
        table = list(csv.DictReader(f))
    assert [int(row["step"]) for row in table] == list(range(steps))
    added = [str(step) if step == steps // 2 else "" for step in range(steps)]
    assert [row["new_column"] for row in table] == added


# Under a driver that sets KILL_THE_DRIVER (its pid), rank 0 SIGKILLs it as soon as its
# report of epoch 2 (no checkpoint; epoch 1 has one) returns: only the row's durability
# before report() returned can save it. Read at run time: a restore's workers do not kill.
KILLED_BY_ITS_WORKER = textwrap.dedent(f"""
    import os, signal, sys, tempfile
    from lockstep import train
    from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig

    # KILL_THE_DRIVER

    def train_func():
        rank = train.get_context().get_world_rank()
        start = 0
        if checkpoint := train.get_checkpoint():
            with checkpoint.as_directory() as d:
                start = int(open(os.path.join(d, "epoch.txt")).read()) + 1
        for epoch in range(start, {EPOCHS}):
            metrics = {{"epoch": epoch, "rank": rank}}
            if epoch % 2 == 0:
                train.report(metrics)
            else:
                with tempfile.TemporaryDirectory() as d:
                    with open(os.path.join(d, "epoch.txt"), "w") as f:
                        f.write(str(epoch))
                    train.report(metrics, checkpoint=Checkpoint.from_directory(d))
            if os.environ.get("KILL_THE_DRIVER") and epoch == 2 and rank == 0:
                os.kill(int(os.environ["KILL_THE_DRIVER"]), signal.SIGKILL)

    DataParallelTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="killed", storage_path=sys.argv[1], verbose=0),
    ).fit()
""")


@pytest.mark.slow
@pytest.mark.parametrize("by", ["rerun", "restore"])
def test_a_driver_killed_right_after_a_report_keeps_its_row(tmp_path, by):
    killer = KILLED_BY_ITS_WORKER.replace(
        "# KILL_THE_DRIVER", 'os.environ["KILL_THE_DRIVER"] = str(os.getpid())'
    )
    run_dir = run_driver(tmp_path, "", source=killer)
    # The report of epoch 2 returned, so its row was on disk already: nothing to redo.
    line = last_line(run_dir)
    assert (line["epoch"], line["training_iteration"], line["checkpoint_dir_name"]) == (2, 3, None)
    # progress.csv, written behind, may lack it until the run is opened again
    assert_table_follows(run_dir)
    if by == "rerun":
        script = tmp_path / "train.py"
        script.write_text(KILLED_BY_ITS_WORKER)
        subprocess.run([sys.executable, str(script), str(tmp_path / "runs")], check=True)
        result = Result.from_path(run_dir)
    else:
        result = DataParallelTrainer.restore(run_dir).fit()
    # epoch 2 reported, then redone from the checkpoint of epoch 1: both rows are kept
    assert result.metrics_dataframe["epoch"].tolist() == [0, 1, 2, 2, 3, 4, 5]
    assert_whole(run_dir, result)
