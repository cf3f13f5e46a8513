"""The time ledger against the truth: a run whose every cost is known (sleeps per step, a
dataset stage that sleeps per batch, checkpoints of a known size, a slower rank, one
failure that makes a known number of steps be done again) is split as those costs say,
each category within 10% or 0.2 s of what the workers and the test measured themselves.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

import pytest

import lockstep.data as ld
from lockstep import train
from lockstep.train import (
    Checkpoint,
    DataParallelTrainer,
    FailureConfig,
    Result,
    RunConfig,
    ScalingConfig,
)

pytestmark = pytest.mark.slow

STEP_S = 0.1  # every rank computes this long per step
SLOWER_S = 0.15  # rank 1 computes this much longer, on steps without a checkpoint
BATCH_S = 0.05  # the dataset's stage sleeps this long per batch
BATCHES = 2  # batches per step
STEPS = 10
CHECKPOINT_AT = (4, 8)  # 1-based steps that report a checkpoint
FAIL_AT = 7  # rank 0 raises as it begins this step, once
CHECKPOINT_BYTES = 8 << 20  # per rank


def slow_stage(batch):  # type: ignore[no-untyped-def]
    time.sleep(BATCH_S)
    return batch


def note(config, **event):  # type: ignore[no-untyped-def]
    """Keep a timestamped event of this rank in the test's log."""
    event.update(rank=train.get_context().get_world_rank(), t=time.time())
    with open(os.path.join(config["log"], f"rank{event['rank']}.jsonl"), "a") as f:
        f.write(json.dumps(event) + "\n")


def known_costs(config):  # type: ignore[no-untyped-def]
    """The costs are known by design; what each took on this machine is measured around
    the function's own calls and logged per step: its own time, its waits for data, its
    time in report()."""
    began = time.perf_counter()
    rank = train.get_context().get_world_rank()
    restored = train.get_checkpoint()
    first = 1
    if restored is not None:
        with restored.as_directory() as folder, open(os.path.join(folder, "step")) as f:
            first = int(f.read()) + 1
    note(config, event="start", first=first)
    batches = iter(train.get_dataset_shard("train").iter_batches(batch_size=8, prefetch_batches=0))
    own = time.perf_counter() - began
    for step in range(first, STEPS + 1):
        began = time.perf_counter()
        marker = os.path.join(config["log"], "failed")
        if step == FAIL_AT and rank == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            note(config, event="fail")
            raise RuntimeError("injected")
        waited = time.perf_counter()
        for _ in range(BATCHES):
            next(batches)
        data = time.perf_counter() - waited
        own += waited - began
        began = time.perf_counter()
        checkpointing = step in CHECKPOINT_AT
        time.sleep(STEP_S + (SLOWER_S if rank == 1 and not checkpointing else 0.0))
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = None
            if checkpointing:
                with open(os.path.join(folder, f"weights{rank}.bin"), "wb") as f:
                    f.write(os.urandom(CHECKPOINT_BYTES))
                with open(os.path.join(folder, "step"), "w") as f:
                    f.write(str(step))
                checkpoint = Checkpoint.from_directory(folder)
            own += time.perf_counter() - began
            began = time.perf_counter()
            train.report({"step": step}, checkpoint=checkpoint)
            blocked = time.perf_counter() - began
            began = time.perf_counter()
        note(
            config,
            event="step",
            step=step,
            first=first,
            own=own,
            data=data,
            blocked=blocked,
            checkpoint=checkpointing,
        )
        own = time.perf_counter() - began  # leaving the temporary directory
    note(config, event="return")


def events(log: str) -> list[dict]:
    found = []
    for name in sorted(os.listdir(log)):
        if name.endswith(".jsonl"):
            with open(os.path.join(log, name)) as f:
                found += [json.loads(line) for line in f]
    return found


def close(measured: float, truth: float) -> bool:
    return abs(measured - truth) <= max(0.1 * truth, 0.2)


def test_every_category_is_within_a_tenth_of_the_truth(tmp_path):  # type: ignore[no-untyped-def]
    log = tmp_path / "log"
    log.mkdir()
    dataset = ld.range(2 * 40 * 8, override_num_blocks=2 * 40).map_batches(slow_stage)
    trainer = DataParallelTrainer(
        known_costs,
        train_loop_config={"log": str(log)},
        datasets={"train": dataset},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="known",
            storage_path=str(tmp_path),
            verbose=0,
            failure_config=FailureConfig(max_failures=1),
        ),
    )
    began = time.time()
    result = trainer.fit()
    ended = time.time()
    time_ = result.time
    assert time_ is not None
    seen = events(str(log))

    def at(event: str, first: int | None = None) -> list[float]:
        return [
            e["t"] for e in seen if e["event"] == event and (first is None or e["first"] == first)
        ]

    failed = at("fail")[0]
    executed = (FAIL_AT - 1) + (STEPS - CHECKPOINT_AT[0])  # 6 in the first attempt, 6 after
    straggling = executed - len(CHECKPOINT_AT)  # steps where rank 1 is slower
    steps = [e for e in seen if e["event"] == "step"]
    assert len(steps) == 2 * executed
    # the steps the second attempt did again are the replayed ones
    again = [e for e in steps if e["first"] > 1 and e["step"] < FAIL_AT]
    assert sorted({e["step"] for e in again}) == [5, 6]

    def mean(key: str, which: list[dict]) -> float:  # over the ranks
        return sum(e[key] for e in which) / 2

    # what the design says each took, at least (this machine may take longer)
    assert mean("own", steps) >= executed * STEP_S + straggling * SLOWER_S / 2
    assert mean("data", steps) >= executed * BATCHES * BATCH_S
    slow = [e for e in steps if not e["checkpoint"] and e["rank"] == 0]
    assert sum(e["blocked"] for e in slow) >= straggling * SLOWER_S / 2  # a loaded machine
    truth = {
        "wall": ended - began,
        "starting": max(at("start", first=1)) - began,
        "recovering": max(at("start", first=CHECKPOINT_AT[0] + 1)) - failed,
        "shutdown": ended - max(at("return")),
        "data_wait": mean("data", steps),
        "barrier_wait": mean("blocked", [e for e in steps if not e["checkpoint"]]),
        "checkpoint_stall": mean("blocked", [e for e in steps if e["checkpoint"]]),
        "replayed": mean("own", again),
        "training": mean("own", steps) - mean("own", again),
        "preemption_drain": 0.0,
    }
    figures = time_.as_dict()
    off = {
        k: (round(figures[k], 3), round(v, 3)) for k, v in truth.items() if not close(figures[k], v)
    }
    assert not off, f"measured vs truth: {off}; all: {figures}"
    assert sum(figures[k] for k in figures if k not in ("wall", "goodput")) == pytest.approx(
        figures["wall"], abs=1e-3
    )
    assert time_.goodput == pytest.approx(time_.training / time_.wall)
    assert time_.num_failures == 1 and time_.num_checkpoints == 2

    # each rank's own: rank 0 waited for rank 1 on every step it was slower
    zero, one = time_.per_rank
    for rank, figures in enumerate(time_.per_rank):
        mine = [e for e in steps if e["rank"] == rank]
        blocked = [e["blocked"] for e in mine if not e["checkpoint"]]
        assert close(figures.barrier_wait, sum(blocked))
        assert close(figures.data_wait, sum(e["data"] for e in mine))
    assert zero.barrier_wait > one.barrier_wait + straggling * SLOWER_S / 2
    assert time_.data_sources.keys() == {"the train dataset"}

    # the straggler is named, with the share of steps and of the run
    share = round(100 * one.slowest_steps / time_.num_steps)
    assert share >= 75
    waited = round(100 * zero.barrier_wait / time_.wall)
    assert (
        f"rank 1 was the slowest on {share}% of steps; the others waited {waited}% of the run "
        "for it" in time_.findings()
    )

    # the advice, from the figures measured: one failure in this run's wall time
    cost = time_.checkpoint_stall / time_.num_checkpoints
    best = math.sqrt(2 * cost * time_.wall)
    interval = time_.in_steps / time_.num_checkpoints
    advice = time_.checkpoint_advice()
    if 0.5 <= interval / best <= 2:
        assert advice is None
    else:
        assert advice is not None and not advice.assumed
        assert advice.best_interval_s == pytest.approx(best)
        assert advice.interval_s == pytest.approx(interval)

    # kept in the run directory: read back the same
    again = Result.from_path(result.path)
    assert again.time is not None
    assert again.time.as_dict() == pytest.approx(time_.as_dict(), abs=1e-5)
    assert again.time.per_rank == time_.per_rank


def report_ten(config):  # type: ignore[no-untyped-def]
    for i in range(10):
        time.sleep(0.02)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "w.bin"), "wb") as f:
                f.write(b"x" * 1024)
            train.report({"loss": 1 / (i + 1)}, checkpoint=Checkpoint.from_directory(folder))


def test_the_summary_shows_the_ledger_and_the_advice_and_restore_continues_it(tmp_path):  # type: ignore[no-untyped-def]
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        "from tests.integration.test_goodput import report_ten\n"
        "from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig\n"
        "DataParallelTrainer(report_ten, scaling_config=ScalingConfig(num_workers=2),\n"
        "    run_config=RunConfig(name='often', storage_path=sys.argv[1],\n"
        "        failure_config=FailureConfig(assumed_mtbf_s=3600))).fit()\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("[lockstep]")]
    assert any(line.startswith("[lockstep] time: goodput ") for line in lines), lines
    advice = [line for line in lines if "would lose the least time" in line]
    assert len(advice) == 1, lines
    assert "a failure every 1h00m (assumed, none seen" in advice[0]
    first = Result.from_path(str(tmp_path / "often")).time
    assert first is not None and first.num_steps == 10

    # a later fit() of the same run continues its ledger (the function reports ten
    # more times, from the last checkpoint: nothing is done again)
    again = DataParallelTrainer.restore(str(tmp_path / "often")).fit()
    assert again.time is not None
    assert again.time.wall > first.wall
    assert again.time.starting > first.starting
    assert again.time.num_steps == 20
    assert again.time.num_checkpoints == 20
    assert again.time.replayed == 0.0
