"""Ray Train V2's checkpoint API: dir names, upload modes, reported checkpoints, errors."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile
import threading

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from lockstep import train
from lockstep.testing import fit_all_ranks
from lockstep.train import (
    Checkpoint,
    CheckpointConfig,
    CheckpointUploadMode,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
    WorkerGroupError,
)
from tests.helpers import fit_on

fit = functools.partial(fit_on, DataParallelTrainer)


def report_files(epoch, **kwargs):
    with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
        if train.get_context().get_world_rank() == 0:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(epoch))
        train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d), **kwargs)


def read_epoch(checkpoint):
    with checkpoint.as_directory() as d:
        return int(open(os.path.join(d, "epoch.txt")).read())


def committed(result_or_path):
    path = getattr(result_or_path, "path", result_or_path)
    with open(os.path.join(path, "run_state.json")) as f:
        return [c["dir_name"] for c in json.load(f)["checkpoints"]]


def test_get_all_reported_checkpoints_lists_the_kept_ones_with_metrics(run_config):
    def train_func():
        for epoch in range(4):
            report_files(epoch)
        return [
            (os.path.basename(c.checkpoint.path), c.metrics)
            for c in train.get_all_reported_checkpoints()
        ]

    config = dataclasses.replace(
        run_config, name="all", checkpoint_config=CheckpointConfig(num_to_keep=2)
    )
    result = fit(train_func, config)
    assert result.return_value == [
        ("checkpoint_000002", {"epoch": 2}),
        ("checkpoint_000003", {"epoch": 3}),
    ]


def test_checkpoint_dir_name_names_the_committed_directory(run_config):
    def train_func():
        rank = train.get_context().get_world_rank()
        for epoch in range(2):
            # rank 0's name wins, as Ray broadcasts it
            report_files(epoch, checkpoint_dir_name=f"epoch-{epoch}-rank{rank}")

    result = fit(train_func, run_config)
    assert committed(result) == ["epoch-0-rank0", "epoch-1-rank0"]
    assert os.path.basename(result.checkpoint.path) == "epoch-1-rank0"
    assert read_epoch(result.checkpoint) == 1


@pytest.mark.parametrize(
    ("mode", "delete", "emptied"),
    [
        (CheckpointUploadMode.SYNC, None, False),
        (CheckpointUploadMode.SYNC, True, True),
        (CheckpointUploadMode.ASYNC, None, True),
        (CheckpointUploadMode.ASYNC, False, False),
    ],
)
def test_delete_local_checkpoint_after_upload(run_config, mode, delete, emptied):
    def train_func():
        with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write("0")
            train.report(
                {"epoch": 0},
                checkpoint=Checkpoint.from_directory(d),
                checkpoint_upload_mode=mode,
                delete_local_checkpoint_after_upload=delete,
            )
            return os.listdir(d)

    result = fit(train_func, run_config)
    assert result.return_value == ([] if emptied else ["epoch.txt"])
    assert read_epoch(result.checkpoint) == 0


def test_async_checkpoints_of_a_finished_run_are_all_committed(run_config):
    def train_func():
        for epoch in range(5):
            report_files(epoch, checkpoint_upload_mode=CheckpointUploadMode.ASYNC)

    result = fit(train_func, run_config)
    assert committed(result) == [f"checkpoint_{i:06d}" for i in range(5)]
    assert read_epoch(result.checkpoint) == 4
    rows = result.metrics_dataframe.to_dict("records")
    assert [r["checkpoint_dir_name"] for r in rows] == committed(result)
    assert not os.path.exists(os.path.join(result.path, ".staging"))


def test_async_upload_survives_the_worker(run_config):
    """Both ranks report ASYNC, then rank 1 dies at once: the driver still uploads and
    commits the checkpoint, and leaves no partial directory."""

    def train_func():
        report_files(0, checkpoint_upload_mode=CheckpointUploadMode.ASYNC)
        if train.get_context().get_world_rank() == 1:
            os._exit(1)
        report_files(1, checkpoint_upload_mode=CheckpointUploadMode.ASYNC)

    with pytest.raises(WorkerGroupError, match="rank 1"):
        fit(train_func, run_config)
    run_dir = os.path.join(run_config.storage_path, run_config.name)
    assert committed(run_dir) == ["checkpoint_000000"]
    names = sorted(os.listdir(run_dir))
    assert [n for n in names if n.startswith("checkpoint_")] == ["checkpoint_000000"]
    assert ".staging" not in names
    assert read_epoch(Checkpoint(os.path.join(run_dir, "checkpoint_000000"))) == 0


class GatedMemoryFileSystem(MemoryFileSystem):
    """In-memory storage whose uploads wait until the training function opens the gate,
    and whose first ``failures`` uploads fail, as a flaky object store's would."""

    protocol = "gatedmem"
    gate = threading.Event()
    failures = 0

    def put_file(self, lpath, rpath, *args, **kwargs):
        type(self).gate.wait()
        if type(self).failures > 0:
            type(self).failures -= 1
            raise ConnectionError("the store dropped the connection")
        return super().put_file(lpath, rpath, *args, **kwargs)


@pytest.fixture
def gated_storage():
    fsspec.register_implementation("gatedmem", GatedMemoryFileSystem, clobber=True)
    GatedMemoryFileSystem.gate = threading.Event()
    GatedMemoryFileSystem.failures = 0
    yield "gatedmem://runs"
    GatedMemoryFileSystem.gate.set()
    MemoryFileSystem.store.clear()
    MemoryFileSystem.pseudo_dirs[:] = [""]


def test_async_report_returns_before_the_upload_ends(gated_storage):
    """The upload cannot finish before report() returns: the function opens the gate
    after it, so a report that waited for its upload would never return."""

    def train_func():
        report_files(0, checkpoint_upload_mode=CheckpointUploadMode.ASYNC)
        GatedMemoryFileSystem.gate.set()
        return [c.metrics for c in train.get_all_reported_checkpoints()]

    config = RunConfig(name="gated", storage_path=gated_storage, verbose=0)
    result = fit(train_func, config, num_workers=0)
    assert result.return_value == [{"epoch": 0}]
    assert read_epoch(result.checkpoint) == 0


def test_failed_async_uploads_are_retried_with_backoff(gated_storage):
    GatedMemoryFileSystem.gate.set()
    GatedMemoryFileSystem.failures = 2

    def train_func():
        report_files(0, checkpoint_upload_mode=CheckpointUploadMode.ASYNC)

    config = RunConfig(name="flaky", storage_path=gated_storage, verbose=0)
    result = fit(train_func, config, num_workers=0)
    assert GatedMemoryFileSystem.failures == 0
    assert read_epoch(result.checkpoint) == 0


def test_no_upload_commits_the_checkpoint_where_it_is(run_config):
    def train_func():
        run_dir = train.get_context().get_trial_dir()
        target = os.path.join(run_dir, "written-in-place")
        if train.get_context().get_world_rank() == 0:
            os.makedirs(target)
            with open(os.path.join(target, "epoch.txt"), "w") as f:
                f.write("7")
        train.report(
            {"epoch": 7},
            checkpoint=Checkpoint(target),
            checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
        )

    result = fit(train_func, run_config)
    assert committed(result) == ["written-in-place"]
    assert read_epoch(result.checkpoint) == 7


def test_checkpoint_upload_fn_uploads_and_its_checkpoint_is_committed(run_config):
    def upload(checkpoint, dir_name):
        import shutil

        target = os.path.join(train.get_context().get_trial_dir(), f"custom-{dir_name}")
        if train.get_context().get_world_rank() == 0:
            shutil.copytree(checkpoint.path, target)
        return Checkpoint(target)

    def train_func():
        report_files(3, checkpoint_dir_name="three", checkpoint_upload_fn=upload)

    result = fit(train_func, run_config)
    assert committed(result) == ["custom-three"]
    assert read_epoch(result.checkpoint) == 3


def test_worker_group_error_chains_the_workers_exception(run_config):
    def train_func():
        if train.get_context().get_world_rank() == 1:
            raise KeyError("missing column")
        train.report({"x": 1})

    with pytest.raises(WorkerGroupError) as info:
        fit(train_func, run_config)
    assert isinstance(info.value, TrainingFailedError)
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.__cause__.args == ("missing column",)


def test_restart_resumes_from_an_async_checkpoint(run_config):
    def train_func():
        start = read_epoch(train.get_checkpoint()) + 1 if train.get_checkpoint() else 0
        for epoch in range(start, 3):
            report_files(epoch, checkpoint_upload_mode=CheckpointUploadMode.ASYNC)
            marker = os.path.join(train.get_context().get_trial_dir(), "died")
            if epoch == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)
        return start

    config = dataclasses.replace(
        run_config, name="restart", failure_config=FailureConfig(max_failures=1)
    )
    result = fit(train_func, config, num_workers=1)
    assert result.return_value == 2
    assert read_epoch(result.checkpoint) == 2


def test_get_all_reported_checkpoints_when_one_rank_attaches_files(run_config):
    """Ray's test_report_get_all_reported_checkpoints: every rank sees the commits."""

    def train_func():
        if train.get_context().get_world_rank() == 0:
            train.report(metrics={}, checkpoint=None)
            report_files(1)
            first = len(train.get_all_reported_checkpoints())
            report_files(2)
            return first
        for _ in range(3):
            train.report(metrics={}, checkpoint=None)
        return len(train.get_all_reported_checkpoints())

    trainer = DataParallelTrainer(
        train_func, scaling_config=ScalingConfig(num_workers=2), run_config=run_config
    )
    assert fit_all_ranks(trainer) == [1, 2]


def test_a_step_mixing_sync_and_async_ranks_commits_every_rank_s_files(run_config):
    def train_func():
        rank = train.get_context().get_world_rank()
        mode = CheckpointUploadMode.ASYNC if rank == 0 else CheckpointUploadMode.SYNC
        with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
            with open(os.path.join(d, f"rank{rank}.txt"), "w") as f:
                f.write(str(rank))
            train.report(
                {"r": rank}, checkpoint=Checkpoint.from_directory(d), checkpoint_upload_mode=mode
            )

    result = fit(train_func, run_config)
    with result.checkpoint.as_directory() as d:
        assert sorted(os.listdir(d)) == ["rank0.txt", "rank1.txt"]
