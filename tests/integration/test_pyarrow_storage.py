"""Storage as Ray's users pass it: pyarrow filesystems, and URIs with pyarrow's options."""

from __future__ import annotations

import os
import tempfile

import fsspec
import pyarrow.fs as pafs
import pytest

from lockstep import train
from lockstep.testing import train_epochs
from lockstep.train import Checkpoint, DataParallelTrainer, Result, RunConfig, ScalingConfig


def fit(run_config, num_workers=2, epochs=2):
    return DataParallelTrainer(
        train_epochs,
        train_loop_config={"epochs": epochs},
        scaling_config=ScalingConfig(num_workers=num_workers),
        run_config=run_config,
    ).fit()


def read_epoch(checkpoint):
    with checkpoint.as_directory() as d, open(os.path.join(d, "epoch.txt")) as f:
        return int(f.read())


def test_storage_filesystem_pyarrow_local(tmp_path):
    config = RunConfig(
        name="pa",
        storage_path=str(tmp_path / "runs"),
        storage_filesystem=pafs.LocalFileSystem(),
        verbose=0,
    )
    result = fit(config)
    assert isinstance(result.filesystem, pafs.LocalFileSystem)
    assert isinstance(result.checkpoint.filesystem, pafs.LocalFileSystem)
    assert read_epoch(result.checkpoint) == 1
    again = Result.from_path(
        str(tmp_path / "runs" / "pa"), storage_filesystem=pafs.LocalFileSystem()
    )
    assert again.checkpoint == result.checkpoint
    assert again.metrics_dataframe["epoch"].tolist() == [0, 1]


def test_storage_filesystem_pyarrow_wrapping_fsspec_memory():
    memory = fsspec.filesystem("memory")
    wrapped = pafs.PyFileSystem(pafs.FSSpecHandler(memory))
    config = RunConfig(name="mem", storage_path="/pa-runs", storage_filesystem=wrapped, verbose=0)
    try:
        result = fit(config, num_workers=0)
        assert memory.exists("/pa-runs/mem/checkpoint_000001/epoch.txt")
        assert isinstance(result.checkpoint.filesystem, pafs.FileSystem)
        assert read_epoch(result.checkpoint) == 1
        again = Result.from_path("/pa-runs/mem", storage_filesystem=wrapped)
        assert read_epoch(again.checkpoint) == 1
    finally:
        memory.rm("/pa-runs", recursive=True)


def test_storage_filesystem_fsspec_is_accepted_and_exposed_as_pyarrow():
    memory = fsspec.filesystem("memory")
    config = RunConfig(name="f", storage_path="/fs-runs", storage_filesystem=memory, verbose=0)
    try:
        result = fit(config, num_workers=0)
        filesystem = result.checkpoint.filesystem
        assert isinstance(filesystem, pafs.PyFileSystem)
        info = filesystem.get_file_info(result.checkpoint.path + "/epoch.txt")
        assert info.type == pafs.FileType.File
    finally:
        memory.rm("/fs-runs", recursive=True)


def test_storage_path_with_a_prefix_and_a_filesystem_is_a_clear_error():
    with pytest.raises(ValueError, match=r"without a URI prefix.*HINT"):
        RunConfig(storage_path="s3://bucket/runs", storage_filesystem=pafs.LocalFileSystem())
    with pytest.raises(ValueError, match=r"pyarrow.fs.FileSystem or an fsspec.*HINT"):
        RunConfig(storage_path="runs", storage_filesystem="s3")


def test_checkpoint_with_a_pyarrow_filesystem(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "epoch.txt").write_text("4")
    checkpoint = Checkpoint(str(tmp_path / "ckpt"), filesystem=pafs.LocalFileSystem())
    assert read_epoch(checkpoint) == 4
    assert isinstance(checkpoint.filesystem, pafs.LocalFileSystem)
    checkpoint.set_metadata({"a": 1})
    assert checkpoint.get_metadata() == {"a": 1}


def test_checkpoint_filesystem_of_a_uri_is_pyarrow(s3_endpoint):
    s3 = fsspec.filesystem("s3", skip_instance_cache=True)
    s3.pipe("lockstep-runs/c/epoch.txt", b"9")
    checkpoint = Checkpoint("s3://lockstep-runs/c")
    assert isinstance(checkpoint.filesystem, pafs.FileSystem)
    assert read_epoch(checkpoint) == 9


def test_uri_with_pyarrow_query_options(s3_endpoint):
    """A run written to S3, read back through URIs that carry pyarrow's options."""
    result = fit(RunConfig(name="query", storage_path="s3://lockstep-runs/q", verbose=0))
    host = s3_endpoint.removeprefix("http://")
    options = f"endpoint_override={host}&scheme=http&region=us-east-1"
    again = Result.from_path(f"s3://lockstep-runs/q/query?{options}")
    assert isinstance(again.filesystem, pafs.S3FileSystem)
    assert again.metrics_dataframe["epoch"].tolist() == [0, 1]
    assert read_epoch(again.checkpoint) == 1
    checkpoint = Checkpoint(f"s3://lockstep-runs/q/query/checkpoint_000000?{options}")
    assert isinstance(checkpoint.filesystem, pafs.S3FileSystem)
    assert read_epoch(checkpoint) == 0
    assert result.checkpoint.path == again.checkpoint.path


def test_workers_read_checkpoints_through_pyarrow(tmp_path):
    def train_func():
        checkpoint = train.get_checkpoint()
        start = 0
        if checkpoint is not None:
            assert isinstance(checkpoint.filesystem, pafs.FileSystem)
            start = read_epoch(checkpoint) + 1
        with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(start))
            train.report({"epoch": start}, checkpoint=Checkpoint.from_directory(d))
        return start

    config = RunConfig(
        name="again",
        storage_path=str(tmp_path),
        storage_filesystem=pafs.LocalFileSystem(),
        verbose=0,
    )
    DataParallelTrainer(train_func, run_config=config).fit()
    assert DataParallelTrainer(train_func, run_config=config).fit().return_value == 1
