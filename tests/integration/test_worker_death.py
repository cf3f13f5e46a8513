"""A worker's death explained: a SIGKILL says the memory it was using, an OOM kill says
OOM (a real one, in a cgroup with a memory limit, where this machine allows one), and the
error carries the dead worker's last 20 lines of output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from lockstep import train
from lockstep._internal.execution.worker_group.process.memory import find_cgroup
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig, TrainingFailedError

TWO = ScalingConfig(num_workers=2)


def rank1_talks_then_dies(config):
    ballast = bytearray(b"x" * (64 * 2**20))  # memory the error should mention
    train.report({"step": 0})
    if train.get_context().get_world_rank() == 1:
        stream = sys.stderr if config["how"] == "exit" else sys.stdout  # either is kept
        for i in range(30):
            print(f"last words {i}", file=stream)
        if config["how"] == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    train.report({"step": 1, "size": len(ballast)})


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_a_dead_workers_last_output_is_in_the_error(tmp_path, how):
    trainer = DataParallelTrainer(
        rank1_talks_then_dies,
        train_loop_config={"how": how},
        scaling_config=TWO,
        run_config=RunConfig(name="dies", storage_path=str(tmp_path), verbose=0),
    )
    with pytest.raises(TrainingFailedError) as raised:
        trainer.fit()
    error = raised.value
    failure = error.root_cause
    assert failure.rank == 1
    last = tuple(f"last words {i}" for i in range(10, 30))
    assert failure.output == last
    message = str(error)
    header = f"Last 20 lines of output of rank 1 (pid {failure.pid}):"
    assert header + "".join(f"\n  {line}" for line in last) in message
    assert header in (tmp_path / "dies" / "error.txt").read_text()
    if how == "exit":
        assert failure.summary.startswith(f"rank 1 (pid {failure.pid}) exited with code 3")
        return
    assert failure.kind in ("signal", "oom")
    assert failure.summary.startswith(f"rank 1 (pid {failure.pid}) was killed by ")
    # the memory it was last seen using, sampled while it waited in report()
    assert " when last seen" in failure.summary


def rank0_raises(config):
    if train.get_context().get_world_rank() == 0:
        print("about to fail")
        raise ValueError("bad batch")
    train.report({"step": 0})


def test_an_exceptions_error_carries_the_output_too(tmp_path):
    trainer = DataParallelTrainer(
        rank0_raises,
        scaling_config=TWO,
        run_config=RunConfig(name="raises", storage_path=str(tmp_path), verbose=0),
    )
    with pytest.raises(TrainingFailedError) as raised:
        trainer.fit()
    failure = raised.value.root_cause
    assert failure.summary.startswith(f"rank 0 (pid {failure.pid}) raised ValueError: bad batch")
    assert failure.output == ("about to fail",)
    assert f"Last line of output of rank 0 (pid {failure.pid}):\n  about to fail" in str(
        raised.value
    )


OOM_SCRIPT = """
import os, sys, tempfile
cgroup = sys.argv[1]
with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))  # the driver, and the workers it starts, live in it
from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig, TrainingFailedError

def train_func():
    train.report({"step": 0})
    if train.get_context().get_world_rank() == 1:
        print("allocating")
        chunks = []
        while True:
            chunks.append(bytearray(b"x" * (32 * 2**20)))
    train.report({"step": 1})

with tempfile.TemporaryDirectory() as storage:
    trainer = DataParallelTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=storage, verbose=0))
    try:
        trainer.fit()
    except TrainingFailedError as error:
        print("ERROR", error.root_cause.kind, error.root_cause.summary)
"""


def memory_cgroup_to_test_in():
    """A new child of this process's memory cgroup, limited to 700 MiB; None where this
    process may not create one (not root, or a read-only cgroup mount)."""
    cgroup = find_cgroup()
    if cgroup is None or os.geteuid() != 0:
        return None
    child = os.path.join(cgroup.path, f"lockstep-test-{uuid.uuid4().hex[:8]}")
    limit = "memory.max" if cgroup.version == 2 else "memory.limit_in_bytes"
    try:
        os.mkdir(child)
    except OSError:
        return None
    try:
        with open(os.path.join(child, limit), "w") as f:
            f.write(str(700 * 2**20))
    except OSError:
        os.rmdir(child)
        return None
    return child


@pytest.mark.slow
def test_a_real_oom_kill_is_named(tmp_path):
    child = memory_cgroup_to_test_in()
    if child is None:
        pytest.skip("creating a memory cgroup needs root and a writable cgroup mount")
    script = tmp_path / "oom.py"
    script.write_text(textwrap.dedent(OOM_SCRIPT))
    try:
        done = subprocess.run(
            [sys.executable, str(script), child],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    finally:
        os.rmdir(child)  # empty once the script's processes are gone
    line = next(x for x in done.stdout.splitlines() if x.startswith("ERROR"))
    kind, summary = line.split(" ", 2)[1:]
    assert kind == "oom", done.stdout + done.stderr
    assert summary.startswith("rank 1 (pid ")
    assert "was killed by the kernel's OOM killer (memory." in summary
    assert "oom_kill 0 -> 1; it used " in summary and "the limit is 700 MiB)" in summary
