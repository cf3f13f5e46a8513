"""Local worker processes: bound to CPUs of their own when they take every CPU (with
LOCKSTEP_PIN_WORKERS=1), and given their shards of in-memory data through shared memory."""

from __future__ import annotations

import contextlib
import glob
import os

import numpy as np
import pandas as pd
import pytest

import lockstep.data as ld
from lockstep import train
from lockstep.testing import fit_all_ranks
from lockstep.train import DataParallelTrainer, ScalingConfig

CPUS = sorted(os.sched_getaffinity(0))


def affinity():
    return sorted(os.sched_getaffinity(0))


def shm_tables():
    return set(glob.glob("/dev/shm/lockstep-table-*"))


def test_workers_that_take_every_cpu_are_bound_to_cpus_of_their_own(run_config, monkeypatch):
    monkeypatch.setenv("LOCKSTEP_PIN_WORKERS", "1")
    trainer = DataParallelTrainer(
        lambda: (train.get_context().get_local_rank(), affinity()),
        scaling_config=ScalingConfig(num_workers=len(CPUS)),
        run_config=run_config,
    )
    assert fit_all_ranks(trainer) == [(rank, [cpu]) for rank, cpu in enumerate(CPUS)]


@pytest.mark.parametrize("extra", [-1, 1])
def test_workers_that_leave_cpus_free_or_do_not_fit_may_use_every_cpu(
    run_config, extra, monkeypatch
):
    monkeypatch.setenv("LOCKSTEP_PIN_WORKERS", "1")
    if len(CPUS) + extra < 1:
        pytest.skip("one CPU: a single worker takes every CPU")
    # one worker more than CPUs shares them, as lockstep warns
    oversubscribed = pytest.warns(UserWarning, match="ScalingConfig asks for")
    with oversubscribed if extra > 0 else contextlib.nullcontext():
        trainer = DataParallelTrainer(
            affinity,
            scaling_config=ScalingConfig(num_workers=len(CPUS) + extra),
            run_config=run_config,
        )
    result = trainer.fit()
    assert result.return_value == CPUS


@pytest.mark.parametrize("pin", [None, "0"])
def test_workers_are_not_bound_by_default_or_when_turned_off(run_config, monkeypatch, pin):
    monkeypatch.delenv("LOCKSTEP_PIN_WORKERS", raising=False)
    if pin is not None:
        monkeypatch.setenv("LOCKSTEP_PIN_WORKERS", pin)
    assert fit_all_ranks(
        DataParallelTrainer(
            affinity, scaling_config=ScalingConfig(num_workers=len(CPUS)), run_config=run_config
        )
    ) == [CPUS] * len(CPUS)


def shard_sum_and_mapped_files():
    shard = train.get_dataset_shard("train")
    total = sum(float(b["x"].sum()) for b in shard.iter_batches(batch_size=None))
    with open("/proc/self/maps") as maps:
        mapped = {line.split(None, 5)[-1].strip() for line in maps if "lockstep-table" in line}
    return total, sorted(mapped)


def test_in_memory_shards_arrive_through_nameless_shared_memory(run_config):
    before = shm_tables()
    x = np.arange(1000, dtype=np.float64)
    trainer = DataParallelTrainer(
        shard_sum_and_mapped_files,
        datasets={"train": ld.from_pandas(pd.DataFrame({"x": x}))},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    )
    (sum0, mapped0), (sum1, mapped1) = fit_all_ranks(trainer)
    assert sum0 + sum1 == x.sum() and sum0 == x[:500].sum()
    # each worker reads its shard from a mapped memfd, which has no name in /dev/shm
    for mapped in (mapped0, mapped1):
        assert mapped == ["/memfd:lockstep-table (deleted)"]
    assert shm_tables() == before


def dies_at_once():
    os._exit(3)


def test_no_file_is_left_after_a_failed_run(run_config):
    before = shm_tables()
    trainer = DataParallelTrainer(
        dies_at_once,
        datasets={"train": ld.from_items([{"x": float(i)} for i in range(10)])},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    )
    with pytest.raises(train.TrainingFailedError):
        trainer.fit()
    assert shm_tables() == before
