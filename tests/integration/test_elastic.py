"""Elastic runs on local processes: ScalingConfig(num_workers=(min, max))."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time

import pytest

from lockstep import data, train
from lockstep.train import (
    Checkpoint,
    DataParallelTrainer,
    ScalingConfig,
    UserCallback,
)
from tests.helpers import EveryRank

ROWS = 12


def usable_cpus() -> set[int]:
    return os.sched_getaffinity(0)


def report_world(config):
    """Reports each rank's world size and the rows of its shard."""
    ctx = train.get_context()
    rows = [r["id"] for r in train.get_dataset_shard("train").iter_rows()]
    train.report({"world_size": ctx.get_world_size(), "rank": ctx.get_world_rank(), "rows": rows})


def test_starts_with_as_many_workers_as_the_machine_holds(run_config):
    ranks = EveryRank()
    DataParallelTrainer(
        report_world,
        scaling_config=ScalingConfig(num_workers=(1, 8)),
        datasets={"train": data.range(ROWS)},
        run_config=dataclasses.replace(run_config, callbacks=[ranks]),
    ).fit()
    expected = min(8, len(usable_cpus()))
    (step,) = ranks.steps
    assert [m["world_size"] for m in step] == [expected] * expected
    assert [m["rank"] for m in step] == list(range(expected))
    # each worker got its share of the data, together all of it
    assert sorted(i for m in step for i in m["rows"]) == list(range(ROWS))
    assert {len(m["rows"]) for m in step} == {ROWS // expected}


def test_fewer_cpus_than_min_workers_is_an_error_naming_both(run_config):
    have = len(usable_cpus())
    with pytest.raises(ValueError) as error:
        DataParallelTrainer(
            report_world,
            scaling_config=ScalingConfig(num_workers=(have + 1, have + 4), executor="process"),
            run_config=run_config,
        )
    message = str(error.value)
    assert f"at least {have + 1} workers" in message
    assert f"this machine holds {have} (CPU: {have})" in message
    assert "HINT" in message


def train_until_resized(config):
    """Trains epoch by epoch, keeping in its checkpoint the world sizes it ran at; stops a
    few epochs after it ran shrunk and then grown again."""
    ctx = train.get_context()
    start, sizes = 0, []
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            state = json.load(f)
        start, sizes = state["epoch"] + 1, state["sizes"]
    if not sizes or sizes[-1] != ctx.get_world_size():
        sizes = [*sizes, ctx.get_world_size()]
    shard = train.get_dataset_shard("train")
    for epoch in range(start, config["max_epochs"]):
        rows = [r["id"] for r in shard.iter_rows()]
        time.sleep(config.get("sleep_s", 0.05))  # an epoch's work
        done = len(sizes) >= 3
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"epoch": epoch, "sizes": sizes}, f)
            train.report(
                {"epoch": epoch, "world_size": ctx.get_world_size(), "rows": rows, "sizes": sizes},
                checkpoint=Checkpoint.from_directory(d),
            )
        if done:
            return


class ChangeCapacity(UserCallback):
    """Narrows this machine (the CPUs the driver may use) to one CPU once the run holds
    two workers, and widens it again once it runs with one."""

    def __init__(self, wide: set[int]):
        self.wide, self.narrowed, self.steps = wide, False, []

    def after_report(self, run_context, metrics, checkpoint):
        self.steps.append(metrics)
        size = metrics[0]["world_size"]
        if size == 2 and not self.narrowed:
            self.narrowed = True
            os.sched_setaffinity(0, {min(self.wide)})
        elif size == 1:
            os.sched_setaffinity(0, self.wide)


@pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs two CPUs to shrink from")
def test_a_resize_restarts_from_the_latest_checkpoint_at_the_new_size(run_config):
    original = usable_cpus()
    wide = set(sorted(original)[:2])
    callback = ChangeCapacity(wide)
    os.sched_setaffinity(0, wide)
    try:
        result = DataParallelTrainer(
            train_until_resized,
            train_loop_config={"max_epochs": 200},
            scaling_config=ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=0),
            datasets={"train": data.range(ROWS)},
            run_config=dataclasses.replace(run_config, callbacks=[callback]),
        ).fit()
    finally:
        os.sched_setaffinity(0, original)
    assert result.metrics["sizes"] == [2, 1, 2]
    epochs = result.metrics_dataframe["epoch"].tolist()
    assert epochs == list(range(len(epochs)))  # each resize resumed from the last checkpoint
    for step in callback.steps:
        size = step[0]["world_size"]
        assert [m["world_size"] for m in step] == [size] * size
        # the data re-split for each size: every row once per epoch, an equal share each
        assert sorted(i for m in step for i in m["rows"]) == list(range(ROWS))
    assert result.error is None


def report_cpus(config):
    train.report({"cpus": sorted(os.sched_getaffinity(0))})


@pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs two CPUs to grow to")
def test_workers_of_a_grown_run_may_use_every_cpu_the_run_counts(run_config):
    """The fork server keeps the CPUs the driver had when it was forked (one, for a run
    that started narrow): workers forked from it get the driver's CPUs of now."""
    from lockstep._internal.execution.worker_group import forkserver

    original = usable_cpus()
    wide = set(sorted(original)[:2])
    forkserver.get(1)  # the fork server, as the first fit() made it
    server = forkserver.server_pid()
    if server is None:
        pytest.skip("workers are spawned here, not forked: nothing to inherit")
    os.sched_setaffinity(server, {min(wide)})  # forked while the machine was narrow
    os.sched_setaffinity(0, wide)
    try:
        ranks = EveryRank()
        DataParallelTrainer(
            report_cpus,
            scaling_config=ScalingConfig(num_workers=(1, 2)),
            run_config=dataclasses.replace(run_config, callbacks=[ranks]),
        ).fit()
    finally:
        os.sched_setaffinity(0, original)
        os.sched_setaffinity(server, original)
    (step,) = ranks.steps
    assert [m["cpus"] for m in step] == [sorted(wide)] * 2
