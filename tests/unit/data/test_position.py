"""The arithmetic of mid-epoch resume: ranges, what a pass handed out, what is left."""

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from lockstep.data._iterator import placed
from lockstep.data._position import (
    PassTracker,
    Resume,
    ShardPlace,
    as_json,
    as_ranges,
    merged,
    num_rows,
    pending,
    plan_resume,
    split_rows,
    subtract,
    to_global,
)
from tests.unit.data.strategies import SETTINGS


def expand(ranges):
    return [i for a, b in ranges for i in range(a, b)]


@st.composite
def ordered_ranges(draw):
    """Disjoint ranges in a random order, as a shard's (or a rest's) ranges are."""
    cuts = sorted(set(draw(st.lists(st.integers(0, 60), max_size=10))))
    pairs = [(a, b) for a, b in itertools.pairwise(cuts) if b > a]
    return draw(st.permutations(pairs))


def test_merged_joins_touching_and_overlapping_ranges():
    assert merged([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == [(0, 3), (5, 9)]


def test_subtract_keeps_the_order_of_the_ranges():
    assert subtract([(10, 20), (0, 5)], [(12, 14), (0, 2)]) == [(10, 12), (14, 20), (2, 5)]


@settings(**SETTINGS)
@given(ordered_ranges(), st.lists(st.integers(0, 60), max_size=30))
def test_subtract_is_the_rows_not_taken_in_order(ordered, taken_rows):
    taken = [(i, i + 1) for i in taken_rows]
    assert expand(subtract(ordered, taken)) == [
        i for i in expand(ordered) if i not in set(taken_rows)
    ]


@settings(**SETTINGS)
@given(ordered_ranges(), st.data())
def test_to_global_maps_positions_in_the_pass_to_rows(ordered, data):
    rows = expand(ordered)
    picked = data.draw(st.lists(st.integers(0, max(0, len(rows) - 1)), max_size=20))
    local = merged([(i, i + 1) for i in picked if i < len(rows)])
    assert expand(to_global(local, ordered)) == sorted(
        rows[i] for a, b in local for i in range(a, b)
    )


@settings(**SETTINGS)
@given(ordered_ranges(), st.integers(1, 5))
def test_split_rows_covers_the_rows_in_order_with_sizes_one_apart(ordered, n):
    parts = split_rows(ordered, n)
    assert len(parts) == n
    assert [i for part in parts for i in expand(part)] == expand(ordered)
    sizes = [num_rows(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_a_tracker_counts_batches_and_rows_as_they_are_handed_out():
    tracker = PassTracker()
    tracker.hand((0, 4))
    tracker.hand(np.array([9, 4, 7]))
    tracker.hand((10, 14), by_row=True)
    tracker.advance()
    assert tracker.consumed() == [(0, 5), (7, 8), (9, 11)]
    tracker.advance()  # asking for the position left the batch going on
    assert tracker.consumed() == [(0, 5), (7, 8), (9, 12)]
    tracker.hand((14, 16))
    assert tracker.consumed() == [(0, 5), (7, 8), (9, 12), (14, 16)]


def test_pending_is_the_rest_of_the_pass_or_the_next_one():
    position = {"epoch": 2, "ended": False, "pass": [(10, 20)], "consumed": [(10, 14)]}
    assert pending(position, None) == Resume(2, [(14, 20)])
    assert pending({**position, "ended": True}, None) == Resume(3, None)
    everything = {"epoch": 0, "ended": False, "pass": None, "consumed": [(0, 3)]}
    assert pending(everything, 5) == Resume(0, [(3, 5)])
    assert pending(None, 5) is None


def test_plan_resume_continues_each_rank_with_as_many_workers():
    positions = [
        {"epoch": 1, "ended": False, "pass": [(0, 8)], "consumed": [(0, 4)], "shard": [(0, 8)]},
        {"epoch": 1, "ended": False, "pass": [(8, 16)], "consumed": [(8, 13)], "shard": [(8, 16)]},
    ]
    assert plan_resume(positions, 2, split=True) == [Resume(1, [(4, 8)]), Resume(1, [(13, 16)])]


def test_plan_resume_splits_the_rest_again_for_another_number_of_workers():
    positions = [
        {"epoch": 1, "ended": False, "pass": [(0, 8)], "consumed": [(0, 4)], "shard": [(0, 8)]},
        {"epoch": 1, "ended": False, "pass": [(8, 16)], "consumed": [(8, 12)], "shard": [(8, 16)]},
    ]
    assert plan_resume(positions, 1, split=True) == [Resume(1, [(4, 8), (12, 16)])]
    assert plan_resume(positions, 4, split=True) == [
        Resume(1, [(4, 6)]), Resume(1, [(6, 8)]), Resume(1, [(12, 14)]), Resume(1, [(14, 16)])
    ]  # fmt: skip
    ended = [{**p, "ended": True} for p in positions]
    assert plan_resume(ended, 3, split=True) == [Resume(2, None)] * 3


def test_plan_resume_refuses_ranks_in_different_epochs():
    positions = [
        {"epoch": 1, "ended": False, "pass": [(0, 8)], "consumed": [], "shard": [(0, 8)]},
        {"epoch": 0, "ended": False, "pass": [(8, 16)], "consumed": [], "shard": [(8, 16)]},
    ]
    with pytest.raises(ValueError, match="rank 0: epoch 1, rank 1: epoch 0"):
        plan_resume(positions, 3, split=True)


def iterate(iterator, kind, stop_after):
    """Hand out ``stop_after`` batches (or rows) of one pass, then stop; their ids."""
    if kind == "rows":
        passing = iter(iterator.iter_rows())
        return [next(passing)["id"] for _ in range(stop_after)]
    passing = iter(
        iterator.iter_batches(
            batch_size=3, local_shuffle_buffer_size=5 if kind == "shuffled" else None
        )
    )
    return [i for _ in range(stop_after) for i in next(passing)["id"].tolist()]


@pytest.mark.parametrize("kind", ["batches", "shuffled", "rows"])
def test_a_placed_iterator_records_the_global_rows_it_handed_out(kind):
    parts = ld.range(20, override_num_blocks=3).split(2, equal=True)
    iterator = placed(parts[1].iterator(), ShardPlace([(10, 20)]))
    assert iterator.count() == 10
    handed = iterate(iterator, kind, 2)
    position = iterator._place.position()
    assert (position["epoch"], position["ended"]) == (0, False)
    assert expand(position["consumed"]) == sorted(handed)


def test_many_ranges_are_kept_packed_and_read_back():
    many = [(i, i + 1) for i in range(0, 200, 2)]
    kept = as_json(many)
    assert set(kept) == {"int64"}  # a shuffled pass's scattered rows: compact, quick to make
    assert as_ranges(json.loads(json.dumps(kept))) == many
    assert as_json(many[:3]) == [[0, 1], [2, 3], [4, 5]]
