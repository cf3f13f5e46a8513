"""lockstep.data.resume: the one call a restart makes of the data package."""

import lockstep.data as ld
from lockstep.data import DataIterator
from lockstep.data.resume import resumed_shards


def test_a_fresh_start_turns_datasets_into_iterators_and_leaves_the_rest():
    parts = ld.range(10).split(2)
    other = object()
    shards = resumed_shards([{"train": p, "x": other} for p in parts], {})
    assert all(isinstance(s["train"], DataIterator) for s in shards)
    assert [s["train"].count() for s in shards] == [5, 5]
    assert all(s["x"] is other for s in shards)


def test_a_position_continues_the_interrupted_epoch():
    (part,) = ld.range(10).split(1)
    position = {"epoch": 0, "ended": False, "pass": [[0, 10]], "consumed": [[0, 4]],
                "shard": [[0, 10]]}  # fmt: skip
    (shard,) = resumed_shards([{"train": part}], {"train": [position]})
    first = [r["id"] for r in shard["train"].iter_rows()]
    second = [r["id"] for r in shard["train"].iter_rows()]
    assert first == [4, 5, 6, 7, 8, 9]
    assert second == list(range(10))
