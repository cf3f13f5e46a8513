"""Shards built from a checkpoint's data positions continue its epoch: no row twice, none
missed, at any number of workers (in one process: the arithmetic, not the messages)."""

import itertools
import types
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from lockstep._core.checkpoint import DATA_POSITIONS_KEY, Checkpoint
from lockstep._core.config import DataConfig
from lockstep._internal.controller import data_positions
from lockstep._internal.execution.worker.positions import position_of
from tests.unit.data.strategies import SETTINGS

NUM_ROWS = 60


def shards(dataset, num_workers, checkpoint=None):
    split = DataConfig().configure({"train": dataset}, num_workers)
    return [s["train"] for s in data_positions.shards_for_attempt(split, checkpoint)]


def take(iterator, num_batches, shuffle):
    """The ids of the first ``num_batches`` batches of a new pass (all of them: None)."""
    args = {"local_shuffle_buffer_size": 7, "local_shuffle_seed": 1} if shuffle else {}
    passing = iter(iterator.iter_batches(batch_size=4, **args))
    ids = []
    for batch in itertools.islice(passing, num_batches):
        ids.extend(batch["id"].tolist())
    passing.close()
    return ids


def checkpoint_of(tmp_path, iterators):
    reports = [
        types.SimpleNamespace(data_positions={"datasets": {"train": position_of(it)}})
        for it in iterators
    ]
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    checkpoint.set_metadata({DATA_POSITIONS_KEY: data_positions.of_step(reports)})
    return checkpoint


@settings(**SETTINGS, max_examples=25)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 4), st.booleans())
def test_the_next_attempt_gets_exactly_the_rows_left(
    tmp_path_factory, before, after, batches, shuffle
):
    dataset = ld.range(NUM_ROWS, override_num_blocks=5)
    first = shards(dataset, before)
    seen = [i for it in first for i in take(it, batches, shuffle)]
    checkpoint = checkpoint_of(tmp_path_factory.mktemp("ckpt"), first)
    second = shards(dataset, after, checkpoint)
    rest = [take(it, None, shuffle) for it in second]
    epoch = seen + [i for part in rest for i in part]
    used = NUM_ROWS // before * before  # what the first split gave out
    assert sorted(epoch) == list(range(used))
    assert max(map(len, rest)) - min(map(len, rest)) <= 1
    # the next pass is the new world's usual shard
    assert sorted(i for it in second for i in take(it, None, shuffle)) == list(
        range(NUM_ROWS // after * after)
    )


def test_an_ended_epoch_is_followed_by_the_next(tmp_path):
    dataset = ld.range(8)
    first = shards(dataset, 2)
    for it in first:
        take(it, None, False)
    second = shards(dataset, 2, checkpoint_of(tmp_path, first))
    assert [take(it, None, False) for it in second] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [it._place.epoch for it in second] == [1, 1]


def test_a_dataset_every_worker_reads_whole_continues_per_rank(tmp_path):
    dataset = ld.range(10)
    config = DataConfig(datasets_to_split=[])
    whole = data_positions.shards_for_attempt(config.configure({"t": dataset}, 2), None)
    take(whole[0]["t"], 1, False)
    take(whole[1]["t"], 2, False)
    reports = [
        types.SimpleNamespace(data_positions={"datasets": {"t": position_of(s["t"])}})
        for s in whole
    ]
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    checkpoint.set_metadata({DATA_POSITIONS_KEY: data_positions.of_step(reports)})
    again = data_positions.shards_for_attempt(config.configure({"t": dataset}, 3), checkpoint)
    assert [take(s["t"], None, False) for s in again] == [
        list(range(4, 10)), list(range(8, 10)), list(range(4, 10))
    ]  # fmt: skip


def test_an_unseeded_random_shuffle_is_warned_about(tmp_path):
    dataset = ld.range(12).random_shuffle()
    first = shards(dataset, 2)
    take(first[0], 1, False)
    take(first[1], 1, False)
    with pytest.warns(UserWarning, match=r"random_shuffle\(seed=...\)"):
        shards(dataset, 2, checkpoint_of(tmp_path, first))


def test_positions_beyond_the_data_start_the_epoch_over(tmp_path):
    first = shards(ld.range(20), 2)
    take(first[1], 1, False)
    with pytest.warns(UserWarning, match="has 8 rows now"):
        again = shards(ld.range(8), 2, checkpoint_of(tmp_path, first))
    assert [take(it, None, False) for it in again] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_no_checkpoint_no_position_kept_before_a_pass():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = shards(ld.range(4), 2)
    assert [position_of(it) for it in first] == [None, None]
