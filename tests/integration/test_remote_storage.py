"""Runs whose directory is on an object store: s3 (a real moto S3 server) and memory://."""

import fsspec

from lockstep.testing import Fault, train_epochs
from lockstep.train import (
    CheckpointConfig,
    DataParallelTrainer,
    FailureConfig,
    Result,
    RunConfig,
)
from tests.helpers import fit_on


def test_process_workers_checkpoint_straight_to_s3(s3_endpoint):
    config = RunConfig(
        name="s3run",
        storage_path="s3://lockstep-runs/exp",
        verbose=0,
        checkpoint_config=CheckpointConfig(num_to_keep=1),
        failure_config=FailureConfig(max_failures=1),
    )
    faults = [Fault(kind="raise", rank=1, at_epoch=2)]
    result = fit_on(
        DataParallelTrainer, train_epochs, config, train_loop_config={"epochs": 3, "faults": faults}
    )
    assert result.path == "lockstep-runs/exp/s3run"  # on result.filesystem, as in Ray
    assert result.metrics["epoch"] == 2
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls("lockstep-runs/exp/s3run"))
    assert [n for n in names if n.startswith("checkpoint_")] == ["checkpoint_000002"]
    assert {"result.json", "progress.csv", "run_state.json", "params.json"} <= set(names)
    with result.checkpoint.as_directory() as d, open(f"{d}/epoch.txt") as f:
        assert f.read() == "2"
    again = Result.from_path(result.path, storage_filesystem=result.filesystem)
    assert again.metrics_dataframe["epoch"].tolist() == [0, 1, 2]
    assert again.checkpoint == result.checkpoint


def test_inline_run_on_memory_storage():
    try:
        config = RunConfig(name="mem", storage_path="memory://lockstep-inline", verbose=0)
        loop_config = {"epochs": 2}
        result = fit_on(
            DataParallelTrainer, train_epochs, config, num_workers=0, train_loop_config=loop_config
        )
        assert result.path == "/lockstep-inline/mem"
        assert result.checkpoint.get_metadata() == {}
        with result.checkpoint.as_directory() as d, open(f"{d}/epoch.txt") as f:
            assert f.read() == "1"
        again = Result.from_path("memory://lockstep-inline/mem")
        assert again.metrics == {"epoch": 1, "loss": 0.5, "rank": 0}
    finally:
        fsspec.filesystem("memory").rm("/lockstep-inline", recursive=True)


def test_inline_run_on_mock_storage():
    """pyarrow's mock:// (Ray's tests write runs there): this process's memory."""
    try:
        config = RunConfig(name="m", storage_path="mock://netloc/bucket/path?param=1", verbose=0)
        result = fit_on(
            DataParallelTrainer,
            train_epochs,
            config,
            num_workers=0,
            train_loop_config={"epochs": 2},
        )
        assert result.path == "/netloc/bucket/path/m"
        assert Result.from_path("mock://netloc/bucket/path/m").metrics["epoch"] == 1
        assert fsspec.filesystem("memory").exists("/netloc/bucket/path/m/checkpoint_000001")
    finally:
        fsspec.filesystem("memory").rm("/netloc", recursive=True)
