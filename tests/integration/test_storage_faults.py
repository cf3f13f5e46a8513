"""Storage faults: a checkpoint that cannot be written (a full disk, a read-only or
forbidden directory, an S3 endpoint that stops answering) is not committed, the previous
one stays intact and loadable, and the error says what failed, where, and what to do."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from lockstep import train
from lockstep._core.storage import StorageDir
from lockstep.train import (
    Checkpoint,
    DataParallelTrainer,
    FailureConfig,
    Result,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
)
from tests.helpers import S3Server, serving_s3


def checkpoint_each_step(config):
    """Rank 0 checkpoints every step; the one at ``big_at`` holds ``big_bytes``. Before
    step 1's report it makes the staging area read-only (``read_only``), or waits until
    the S3 endpoint is down (``s3_down``): the fault is there when the checkpoint is written."""
    rank = train.get_context().get_world_rank()
    for step in range(3):
        if rank != 0:
            train.report({"step": step})
            continue
        if step == 1 and config.get("read_only"):
            set_writable(config["read_only"], False)
        if step == 1 and config.get("s3_down"):
            wait_until_refused(config["s3_down"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            if step == config.get("big_at"):
                with open(os.path.join(d, "weights.bin"), "wb") as f:
                    f.write(os.urandom(config["big_bytes"]))
            train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))


def wait_until_refused(port: int) -> None:
    import socket
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError("the S3 server is still up")


def fit(storage_path: str, config=None, callbacks=()):
    return DataParallelTrainer(
        checkpoint_each_step,
        train_loop_config=config or {},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="run",
            storage_path=storage_path,
            verbose=0,
            callbacks=list(callbacks),
            failure_config=FailureConfig(max_failures=0),
        ),
    ).fit()


def assert_only_the_first_checkpoint(run_path: str) -> None:
    """The run's latest checkpoint is the first one, whole and loadable; no later one."""
    result = Result.from_path(run_path)
    assert result.checkpoint is not None
    assert result.checkpoint.path.rstrip("/").endswith("checkpoint_000000")
    with result.checkpoint.as_directory() as d, open(os.path.join(d, "step.txt")) as f:
        assert f.read() == "0"
    names = StorageDir.from_uri(run_path).listdir()
    assert [n for n in names if n.startswith("checkpoint_")] == ["checkpoint_000000"], names


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[str]:
    """A small tmpfs of its own (root only), unmounted on the way out."""
    path = tempfile.mkdtemp(prefix="lockstep-tmpfs-")
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True
        )
        if mounted.returncode != 0:
            pytest.skip(f"a tmpfs cannot be mounted here: {mounted.stderr!r}")
        try:
            yield path
        finally:
            subprocess.run(["umount", path], check=True)
    finally:
        os.rmdir(path)


def test_a_full_disk_keeps_the_previous_checkpoint_and_says_so(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a full disk is made with a small tmpfs, which only root may mount")
    with tmpfs("2m") as disk:
        with (
            pytest.raises(TrainingFailedError) as raised,
            pytest.warns(UserWarning) as warned,
        ):
            fit(disk, {"big_at": 1, "big_bytes": 4 << 20})
        # full for the time ledger's files too: said, and the run went on to its error
        said = sorted({str(w.message).split(":")[1].strip() for w in warned})
        assert said == ["could not write time.bin", "could not write time.json"]
        message = str(raised.value)
        assert "could not write checkpoint files to " + os.path.join(disk, "run") in message
        assert "[Errno 28] No space left on device" in message
        assert "the checkpoint was not committed and the previous one is intact" in message
        assert "HINT: free space there" in message
        assert_only_the_first_checkpoint(os.path.join(disk, "run"))


def set_writable(path: str, writable: bool) -> None:
    """Make the directory ``path`` read-only, or writable again: for root (who may write
    anywhere) a read-only tmpfs mounted over it, for anyone else its mode and its
    subdirectories'."""
    if os.geteuid() == 0:
        if writable:
            subprocess.run(["umount", path], check=False)  # mounted over, or never
        else:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", path], check=True)
        return
    mode = stat.S_IRWXU if writable else stat.S_IRUSR | stat.S_IXUSR
    for root, dirs, _files in os.walk(path):
        for name in [".", *dirs]:
            os.chmod(os.path.join(root, name), mode)


def test_a_read_only_directory_keeps_the_previous_checkpoint_and_says_so(tmp_path):
    staging = str(tmp_path / "run" / ".staging")
    if os.geteuid() == 0:
        expected = ("[Errno 30] Read-only file system", "HINT: the filesystem is read-only")
    else:
        expected = ("[Errno 13] Permission denied", "HINT: make the directory writable")
    try:
        with pytest.raises(TrainingFailedError) as raised:
            fit(str(tmp_path), {"read_only": staging})
    finally:
        set_writable(staging, True)
    message = str(raised.value)
    assert "could not write checkpoint files to " + staging in message
    assert expected[0] in message and expected[1] in message
    assert_only_the_first_checkpoint(str(tmp_path / "run"))


@pytest.fixture
def s3(monkeypatch) -> Iterator[S3Server]:
    # one try per call in botocore: the retries with backoff are lockstep's own
    with serving_s3(monkeypatch, AWS_MAX_ATTEMPTS="1") as server:
        yield server


class StopS3AfterFirstCheckpoint(train.UserCallback):
    def __init__(self, server: S3Server) -> None:
        self.server = server

    def __reduce__(self):  # pickled for restore: the server stays in this process
        return (object, ())

    def after_report(self, run_context, metrics, checkpoint):
        # rank 0 waits, before it writes the next checkpoint, until the server is down
        if checkpoint is not None and checkpoint.path.endswith("checkpoint_000000"):
            self.server.stop()


@pytest.mark.slow
def test_a_failing_s3_endpoint_is_retried_then_keeps_the_previous_checkpoint(s3):
    import fsspec

    with (
        pytest.raises(TrainingFailedError) as raised,
        pytest.warns(UserWarning, match="could not write the run's final record"),
        pytest.warns(UserWarning, match="could not write time.json"),  # the ledger's too
    ):
        fit(
            "s3://lockstep-runs/exp",
            {"s3_down": s3.port},
            callbacks=[StopS3AfterFirstCheckpoint(s3)],
        )
    message = str(raised.value)
    assert "could not write checkpoint files to s3://lockstep-runs/exp/run/.staging/" in message
    assert "EndpointConnectionError: Could not connect to the endpoint URL" in message
    assert "tried 4 times, backing off from 0.2 s" in message, message
    assert "HINT: check that the storage endpoint is up" in message

    s3.start()  # back up: what is in the bucket?
    fsspec.filesystem("s3").clear_instance_cache()
    assert_only_the_first_checkpoint("s3://lockstep-runs/exp/run")
