"""Local workers end their steps without a checkpoint themselves: the driver is off the
step's way (its row is durable in result.json before report() returns all the same), and
it takes the rows afterwards as its own."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from lockstep.train import (
    Checkpoint,
    DataParallelTrainer,
    FailureConfig,
    RunConfig,
    ScalingConfig,
)

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from lockstep import train
    from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig

    def train_fn(config):
        for i in range(config["n"]):
            if i == 5:  # every rank waits here until the test has stopped the driver
                while not os.path.exists(config["go"]):
                    time.sleep(0.001)
            train.report({"i": i, "rank": train.get_context().get_world_rank()})

    trainer = DataParallelTrainer(
        train_fn,
        train_loop_config={"n": 400, "go": sys.argv[2]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=sys.argv[1], name="run", verbose=0),
    )
    result = trainer.fit()
    print("METRICS", result.metrics)
    """
)


def _rows(path):
    try:
        with open(path, "rb") as f:
            return [json.loads(line) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def _wait_for(condition, what, proc):
    deadline = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def test_the_workers_go_on_and_log_their_rows_while_the_driver_is_stopped(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    go = tmp_path / "go"
    results = tmp_path / "run" / "result.json"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(lambda: len(_rows(results)) == 5, "the first 5 rows", proc)
        os.kill(proc.pid, signal.SIGSTOP)
        go.touch()
        # 100 more steps, every one ended and logged by the workers alone
        _wait_for(lambda: len(_rows(results)) >= 105, "rows while the driver is stopped", proc)
        os.kill(proc.pid, signal.SIGCONT)
        output, _ = proc.communicate(timeout=120)
    finally:
        os.kill(proc.pid, signal.SIGCONT) if proc.poll() is None else None
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert "METRICS {'i': 399, 'rank': 0}" in output
    rows = _rows(results)
    assert [(r["i"], r["rank"], r["training_iteration"]) for r in rows] == [
        (i, 0, i + 1) for i in range(400)
    ]
    times = [r["time_total_s"] for r in rows]
    assert times == sorted(times) and times[0] > 0
    with open(tmp_path / "run" / "progress.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(line["training_iteration"]) for line in table] == list(range(1, 401))


def _report(i, *, with_files):
    """report() of step ``i``, with a checkpoint holding the step's number if asked."""
    from lockstep import train

    if not with_files:
        train.report({"i": i})
        return
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "step"), "w") as f:
            f.write(str(i))
        train.report({"i": i}, checkpoint=Checkpoint.from_directory(folder))


def _every_third_checkpointed(config):
    from lockstep import train

    rank = train.get_context().get_world_rank()
    for i in range(30):
        _report(i, with_files=i % 3 == 2 and rank == config["rank_with_files"])


def test_steps_the_driver_ends_and_steps_the_workers_end_make_one_record(tmp_path):
    """A checkpoint (on any rank) leaves its step to the driver; the rows of both kinds
    follow each other in order, each checkpoint naming its own row."""
    result = DataParallelTrainer(
        _every_third_checkpointed,
        train_loop_config={"rank_with_files": 1},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=str(tmp_path), name="mixed", verbose=0),
    ).fit()
    rows = _rows(tmp_path / "mixed" / "result.json")
    assert [r["i"] for r in rows] == list(range(30))
    assert [r["training_iteration"] for r in rows] == list(range(1, 31))
    named = [r["checkpoint_dir_name"] for r in rows]
    assert named == [f"checkpoint_{i // 3:06d}" if i % 3 == 2 else None for i in range(30)]
    assert result.checkpoint is not None
    with open(os.path.join(result.checkpoint.path, "step")) as f:
        assert f.read() == "29"
    assert result.metrics == {"i": 29}


def _dies_once_after_ending_a_step(config):
    """Every rank arms the workers' fault point in the first attempt only (a file says
    which): the first rank to end its 5th step dies before it sends its report."""
    from lockstep import train

    marker = os.path.join(config["dir"], "armed")
    if not os.path.exists(marker):
        open(marker, "a").close()
        os.environ["LOCKSTEP_FAULT_POINT"] = "step_ended:5"
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "step")) as f:
            start = int(f.read()) + 1
    rank = train.get_context().get_world_rank()
    for i in range(start, 20):
        _report(i, with_files=i % 4 == 3 and rank == 0)


def test_a_worker_killed_after_ending_a_step_leaves_its_row_to_the_driver(tmp_path):
    """The last rank wrote the step's row and released the others, then died before it
    sent its report: the driver never completes the step, takes its row when the attempt
    ends, and the restarted attempt's rows follow it in the record."""
    result = DataParallelTrainer(
        _dies_once_after_ending_a_step,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(tmp_path),
            name="killed",
            verbose=0,
            failure_config=FailureConfig(max_failures=1),
        ),
    ).fit()
    rows = _rows(tmp_path / "killed" / "result.json")
    steps = [r["i"] for r in rows]
    restart = next(n for n in range(1, len(steps)) if steps[n] <= steps[n - 1])
    ended = steps[restart - 1]  # the step whose row the killed rank wrote
    resumed_from = max(i for i in range(ended + 1) if i % 4 == 3)
    assert steps == list(range(ended + 1)) + list(range(resumed_from + 1, 20))
    assert [r["training_iteration"] for r in rows] == list(range(1, len(rows) + 1))
    with open(tmp_path / "killed" / "progress.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(line["i"]) for line in table] == steps
    assert result.metrics == {"i": 19}
