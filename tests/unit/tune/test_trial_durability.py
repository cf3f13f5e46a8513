"""What reaches the disk when: a function trial's files at the experiment's snapshot (one
filesystem sync before it), a checkpoint commit at once, a Train run's record as before."""

from __future__ import annotations

import os
import tempfile

import pytest

from lockstep import train, tune
from lockstep._core import storage
from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig


@pytest.fixture
def disk_events(monkeypatch):
    """Every fsync (the path it flushed) and every whole-filesystem sync, in order."""
    events = []
    fsync, sync_all = os.fsync, storage.LocalDir.sync_all

    def recording_fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recording_sync_all(self):
        events.append(("sync", self.path))
        sync_all(self)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(storage.LocalDir, "sync_all", recording_sync_all)
    return events


def test_function_trials_flush_nothing_themselves_and_the_snapshot_syncs_them_first(
    tmp_path, disk_events
):
    def objective(config):
        for step in range(3):
            tune.report({"loss": config["x"] * step})

    results = tune.Tuner(
        objective,
        param_space={"x": tune.grid_search([1, 2, 3])},
        run_config=tune.RunConfig(name="exp", storage_path=str(tmp_path), verbose=0),
    ).fit()
    trial_dirs = [r.path for r in results]
    assert len(trial_dirs) == 3
    flushed = [path for kind, path in disk_events if kind == "fsync"]
    assert not [p for p in flushed if any(p.startswith(d) for d in trial_dirs)]
    # the trials' files are on the disk before the last snapshot that counts them
    last_state = max(
        i for i, (kind, path) in enumerate(disk_events) if "experiment_state.pkl" in path
    )
    assert ("sync", str(tmp_path / "exp")) in disk_events[:last_state]
    for trial_dir in trial_dirs:
        assert {"params.json", "result.json", "progress.csv", "run_state.json"} <= set(
            os.listdir(trial_dir)
        )
        assert len(train.Result.from_path(trial_dir).metrics_dataframe) == 3


def test_a_function_trials_checkpoint_commit_is_flushed_at_once(tmp_path, disk_events):
    def objective(config):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "weights"), "w").close()
            tune.report({"loss": 1.0}, checkpoint=Checkpoint.from_directory(d))

    (result,) = tune.Tuner(
        objective, run_config=tune.RunConfig(name="exp", storage_path=str(tmp_path), verbose=0)
    ).fit()
    flushed = [path for kind, path in disk_events if kind == "fsync"]
    inside = [os.path.relpath(p, result.path) for p in flushed if p.startswith(result.path)]
    assert "result.json" in inside  # the row naming the checkpoint, before the commit
    assert any(p.startswith("run_state.json.tmp") for p in inside)  # the commit itself
    assert result.checkpoint is not None


def test_a_train_runs_record_is_flushed_as_it_is_written(tmp_path, disk_events):
    def train_func():
        train.report({"loss": 1.0})

    result = DataParallelTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=0),
        run_config=RunConfig(name="run", storage_path=str(tmp_path), verbose=0),
    ).fit()
    flushed = [os.path.relpath(p, result.path) for kind, p in disk_events if kind == "fsync"]
    assert any(p.startswith("run_state.json.tmp") for p in flushed)
    assert "result.json" in flushed  # at the end of the run
    assert os.path.exists(os.path.join(result.path, storage.MARKER_FILE))
