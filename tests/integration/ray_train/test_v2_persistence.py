"""Ported from Ray's python/ray/train/v2/tests/test_persistence.py (imports changed to
lockstep, every assertion kept): a run on a local path, on S3 (a real moto server, in
place of Ray's simulated bucket) and on a custom pyarrow filesystem over a directory,
failing twice and restored once; the run's paths and the files in storage are checked.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import uuid

import pyarrow.fs
import pytest

from lockstep import train
from lockstep.train import (
    Checkpoint,
    CheckpointConfig,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)

ITERATIONS = 6  # == checkpoints
WORKERS = 3


def custom_fs(root) -> pyarrow.fs.FileSystem:
    from fsspec.implementations.dirfs import DirFileSystem
    from fsspec.implementations.local import LocalFileSystem

    root.mkdir(parents=True, exist_ok=True)
    return pyarrow.fs.PyFileSystem(
        pyarrow.fs.FSSpecHandler(DirFileSystem(path=str(root), fs=LocalFileSystem()))
    )


def train_fn(config):
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "checkpoint.pkl"), "rb") as f:
            start = pickle.load(f)["iter"] + 1
    got = len(train.get_all_reported_checkpoints())
    assert got == min(start, config["num_to_keep"]), got
    rank = train.get_context().get_world_rank()
    for i in range(start, ITERATIONS):
        metrics, name = {"iter": i, "score": i}, f"checkpoint_epoch={i}"
        if rank in config["no_checkpoint_ranks"]:
            train.report(metrics, checkpoint=None, checkpoint_dir_name=name)
        else:
            with tempfile.TemporaryDirectory() as d:
                for file in ("checkpoint.pkl", f"checkpoint_shard-rank={rank}.pkl"):
                    with open(os.path.join(d, file), "wb") as f:
                        pickle.dump({"iter": i}, f)
                train.report(
                    metrics, checkpoint=Checkpoint.from_directory(d), checkpoint_dir_name=name
                )
                assert os.path.exists(d)  # report() leaves the user's files alone
        train.collective.barrier()
        if i in config["fail_iters"]:
            assert len(train.get_all_reported_checkpoints()) == min(i + 1, config["num_to_keep"])
            raise RuntimeError(f"Failing on iter={i}!!")


def download(fs, fs_path: str, local) -> None:
    for info in fs.get_file_info(pyarrow.fs.FileSelector(fs_path, recursive=True)):
        if info.type == pyarrow.fs.FileType.File:
            target = local / os.path.relpath(info.path, fs_path)
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as src:
                target.write_bytes(src.read())


def storage_for(kind: str, tmp_path, request):
    """``(storage_path, storage_filesystem, filesystem, path on it)`` of each kind."""
    if kind == "nfs":
        path = str(tmp_path / "fake_nfs")
        return path, None, pyarrow.fs.LocalFileSystem(), path
    if kind == "cloud":
        request.getfixturevalue("s3_endpoint")
        path = f"s3://lockstep-runs/{uuid.uuid4().hex}"
        fs, fs_path = pyarrow.fs.FileSystem.from_uri(path)
        return path, None, fs, fs_path
    fs = custom_fs(tmp_path / "custom_fs")
    return "mock_bucket", fs, fs, "mock_bucket"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["nfs", "cloud", "custom_fs"])
@pytest.mark.parametrize(
    "checkpoint_config",
    [
        CheckpointConfig(),
        CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute="score", checkpoint_score_order="max"
        ),
    ],
)
def test_trainer(tmp_path, request, kind, checkpoint_config):
    name = f"trainer_persistence_test-{uuid.uuid4().hex}"
    storage_path, storage_filesystem, fs, fs_path = storage_for(kind, tmp_path, request)
    run_config = RunConfig(
        storage_path=storage_path,
        storage_filesystem=storage_filesystem,
        name=name,
        verbose=0,
        checkpoint_config=checkpoint_config,
        failure_config=FailureConfig(max_failures=2),
    )
    loop_config = {
        "fail_iters": [2, 4],
        "no_checkpoint_ranks": [0],  # rank 0 need not checkpoint
        "num_to_keep": checkpoint_config.num_to_keep or float("inf"),
    }
    for _ in range(2):  # the run, then the same again: restored, it has nothing left to do
        result = DataParallelTrainer(
            train_fn,
            train_loop_config=loop_config,
            scaling_config=ScalingConfig(num_workers=WORKERS),
            run_config=run_config,
        ).fit()

    assert result.path.startswith(fs_path)
    for checkpoint, _ in result.best_checkpoints:
        assert checkpoint.path.startswith(result.path)

    download(fs, fs_path, tmp_path / "inspect")
    (exp_dir,) = list((tmp_path / "inspect").glob("*"))
    assert exp_dir.name == name
    expected = checkpoint_config.num_to_keep or ITERATIONS
    epochs = sorted(
        int(re.search(r"checkpoint_epoch=(\d+)", d.name).group(1))
        for d in exp_dir.glob("checkpoint_epoch=*")
    )
    assert epochs == list(range(ITERATIONS - expected, ITERATIONS))
    for checkpoint_dir in exp_dir.glob("checkpoint_epoch=*"):
        assert len(list(checkpoint_dir.glob("checkpoint.pkl"))) == 1
        shards = {
            int(re.search(r"rank=(\d+)", s.name).group(1))
            for s in checkpoint_dir.glob("checkpoint_shard-*.pkl")
        }
        assert shards == {1, 2}  # every rank but 0, which reported no checkpoint
