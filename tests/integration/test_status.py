"""``lockstep status`` from another terminal, on a live run of four torch ranks: one hung in
a gloo all_reduce the others never join, one waiting on a slow dataset stage, one
persisting a large checkpoint, one waiting in report(); each is named, in text and in
JSON. Then the run is stopped, and its status is its final state and time ledger.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from lockstep import train
from lockstep._internal.controller import status
from lockstep.train import Checkpoint

pytestmark = pytest.mark.slow

LOCKSTEP = os.path.join(os.path.dirname(sys.executable), "lockstep")
CHECKPOINT_FILES = 20_000  # links to one file of 16 KiB: 320 MiB to copy, in many files


def slow_tokenize(row):  # type: ignore[no-untyped-def]
    time.sleep(0.2)
    return row


def hang_in_all_reduce() -> None:
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))  # the others never join


def _line_of(function, text: str) -> int:  # type: ignore[no-untyped-def]
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


ALL_REDUCE_AT = (
    f"hang_in_all_reduce() at test_status.py:{_line_of(hang_in_all_reduce, 'dist.all_reduce(')}"
)


def four_ranks(config):  # type: ignore[no-untyped-def]
    rank = train.get_context().get_world_rank()
    with tempfile.TemporaryDirectory() as folder:
        if rank == 3:  # a large checkpoint, ready before the step that reports it
            with open(os.path.join(folder, "shard_0"), "wb") as f:
                f.write(os.urandom(16 << 10))
            for i in range(1, CHECKPOINT_FILES):
                os.link(os.path.join(folder, "shard_0"), os.path.join(folder, f"shard_{i}"))
        train.report({"step": 1})
        if rank == 1:
            hang_in_all_reduce()
        elif rank == 2:
            shard = train.get_dataset_shard("train")
            for _ in shard.iter_batches(batch_size=4, prefetch_batches=0):
                pass
        elif rank == 3:
            # persisting takes a second or two: begun once the test saw the others in place
            while not os.path.exists(config["go"]):
                time.sleep(0.01)
            train.report({"step": 2}, checkpoint=Checkpoint.from_directory(folder))
        train.report({"step": 2})


def lockstep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCKSTEP, "status", *args], capture_output=True, text=True, timeout=120, check=True
    )


def phases(answer: dict) -> list[str]:
    return [r["phase"] for r in answer.get("ranks", [])]


@pytest.mark.timeout(600)
def test_status_names_the_rank_in_a_collective_the_data_wait_and_the_checkpoint(tmp_path):  # type: ignore[no-untyped-def]
    script = tmp_path / "driver.py"
    script.write_text(
        "import sys\n"
        "import lockstep.data as ld\n"
        "from lockstep.train import FailureConfig, RunConfig, ScalingConfig\n"
        "from lockstep.train.torch import TorchTrainer\n"
        "from tests.integration.test_status import four_ranks, slow_tokenize\n"
        "data = ld.range(4 * 400, override_num_blocks=4 * 100).map(slow_tokenize)\n"
        "TorchTrainer(four_ranks, datasets={'train': data},\n"
        "    train_loop_config={'go': sys.argv[2]},\n"
        "    scaling_config=ScalingConfig(num_workers=4),\n"
        "    run_config=RunConfig(name='stuck', storage_path=sys.argv[1], verbose=0,\n"
        "        failure_config=FailureConfig(preemption_deadline_s=1))).fit()\n"
    )
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(tmp_path / "go")],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answer = _until_every_phase_shows(tmp_path)
        text = lockstep("stuck", "--storage-path", str(tmp_path)).stdout
        stacks = json.loads(
            lockstep("stuck", "--storage-path", str(tmp_path), "--json", "--stacks").stdout
        )
        listed = lockstep("--storage-path", str(tmp_path)).stdout
    finally:
        driver.send_signal(signal.SIGTERM)  # stop the run: the ranks are stuck for good
        driver.communicate(timeout=120)

    ranks = answer["ranks"]
    assert answer["state"] == "running"
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert phases(answer) == ["report", "collective", "data_wait", "checkpoint"]
    assert all(isinstance(r["pid"], int) and r["node"] for r in ranks)
    assert ranks[1]["detail"] == f"in all_reduce, from {ALL_REDUCE_AT}"
    assert ranks[2]["detail"] == (
        "waits for the train dataset: its slowest stage is map(slow_tokenize)"
    )
    assert "written of about" in ranks[3]["detail"] and "/s" in ranks[3]["detail"]
    assert [r["steps"] for r in ranks] == [2, 1, 1, 1]
    pid = ranks[1]["pid"]
    seconds = ranks[1]["seconds_in_phase"]
    assert answer["summary"].startswith(
        f"rank 1 (pid {pid}, node {ranks[1]['node']}) has been in all_reduce for "
    ), answer["summary"]
    assert answer["summary"].endswith(f" in {ALL_REDUCE_AT}; rank 0 waits in report() for step 2")
    assert seconds > 1.0
    assert answer["time"]["wall"] > 0 and set(answer["time"]) >= {"goodput", "barrier_wait"}

    lines = text.splitlines()
    assert lines[0].startswith(f"rank 1 (pid {pid}, ") and "all_reduce" in lines[0], text
    assert lines[2].split()[:4] == ["rank", "pid", "node", "phase"]
    rows = {line.split()[0]: line.split()[3] for line in lines[3:7]}
    assert rows["0"] == "report" and rows["1"] == "collective" and rows["2"] == "data_wait"
    assert rows["3"] in ("checkpoint", "report")  # it may have finished persisting since

    assert "in hang_in_all_reduce" in stacks["ranks"][1]["stack"]
    assert "all_reduce" in stacks["ranks"][1]["stack"]
    assert (
        "slow_tokenize" in stacks["ranks"][2]["stack"]
        or "iter_batches" in stacks["ranks"][2]["stack"]
    )
    assert "stuck" in listed and "rank 1" in listed

    ended = json.loads(lockstep("stuck", "--storage-path", str(tmp_path), "--json").stdout)
    assert ended["state"] == "stopped"
    assert ended["ranks"] == []
    assert ended["time"]["preemption_drain"] > 0
    # what the ranks were stuck in counts as such, though they never reported again
    stuck = {r["rank"]: r for r in ended["time_per_rank"]}
    assert stuck[0]["barrier_wait"] > seconds  # in report() all along
    assert stuck[2]["data_wait"] > seconds
    assert stuck[3]["checkpoint_stall"] > 0
    assert "stopped at iteration 1" in ended["summary"]
    assert not os.path.exists(tmp_path / "stuck" / ".driver.sock")


def _until_every_phase_shows(tmp_path) -> dict:  # type: ignore[no-untyped-def]
    """Ask until each rank is where the test put it: ranks 0-2 first (they start, then get
    there); then rank 3 is let persist its checkpoint, which takes a second or two, and is
    asked for as often as the driver answers (in this process: no CLI's start per ask)."""
    in_place = ["report", "collective", "data_wait"]

    def ask_until(where: list[str]) -> dict:
        deadline = time.monotonic() + 240
        answer: dict = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # the run directory is not there yet
                answer = status.ask(str(tmp_path / "stuck")) or answer
            # (the first batches, whose reading imports the libraries, may be slower still)
            detail = answer["ranks"][2]["detail"] if len(answer.get("ranks", [])) > 2 else ""
            if phases(answer)[: len(where)] == where and "map(slow_tokenize)" in detail:
                return answer
            time.sleep(0.01)
        raise AssertionError(f"the ranks never showed where they are: {answer}")

    ask_until(in_place)
    (tmp_path / "go").touch()
    return ask_until([*in_place, "checkpoint"])


def churn(config):  # type: ignore[no-untyped-def]
    """Python code that calls, returns and copies files all the time (as persisting a
    checkpoint does), until the test says stop."""
    import shutil

    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "source")
        os.mkdir(source)
        for i in range(200):
            with open(os.path.join(source, f"part_{i}"), "wb") as f:
                f.write(b"x" * 64)
        copies = 0
        while not os.path.exists(config["stop"]):
            shutil.copytree(source, os.path.join(folder, "copy"))
            shutil.rmtree(os.path.join(folder, "copy"))
            copies += nested(30)
    train.report({"copies": copies})


def nested(depth: int) -> int:
    return 1 if depth == 0 else 1 + nested(depth - 1)


@pytest.mark.timeout(300)
def test_stacks_asked_again_and_again_never_harm_a_rank_running_python(tmp_path):  # type: ignore[no-untyped-def]
    # Reading a thread's frames while it runs on (faulthandler's handler does, in C) may
    # read freed memory: the stacks are taken under the GIL instead.
    stop = tmp_path / "stop"
    script = tmp_path / "driver.py"
    script.write_text(
        "import sys\n"
        "from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig\n"
        "from tests.integration.test_status import churn\n"
        "DataParallelTrainer(churn, train_loop_config={'stop': sys.argv[2]},\n"
        "    scaling_config=ScalingConfig(num_workers=2),\n"
        "    run_config=RunConfig(name='churn', storage_path=sys.argv[1], verbose=0)).fit()\n"
    )
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(stop)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answers = []
        while len(answers) < 20 and driver.poll() is None:
            ask = ["churn", "--storage-path", str(tmp_path), "--json", "--stacks"]
            done = subprocess.run([LOCKSTEP, "status", *ask], capture_output=True, text=True)
            answer = json.loads(done.stdout) if done.returncode == 0 else {}
            if answer.get("ranks") and phases(answer) == ["training", "training"]:
                answers.append(answer)
    finally:
        stop.touch()
        _, err = driver.communicate(timeout=120)
    assert driver.returncode == 0, err
    assert len(answers) == 20
    for answer in answers:
        assert all("in churn" in rank["stack"] for rank in answer["ranks"]), answer
