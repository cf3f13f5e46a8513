"""Splits are disjoint, complete (up to what equal=True drops) and sized as promised."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from tests.unit.data.strategies import SETTINGS, blocks, dataset, oracle


def rows_of(part):
    return [r["row"] for r in part.take_all()]


@settings(**SETTINGS)
@given(blocks(), st.integers(1, 6), st.booleans())
def test_split_is_disjoint_complete_and_sized(parts, n, equal):
    all_rows = oracle(parts)["row"].tolist()
    split = dataset(parts).split(n, equal=equal)
    assert len(split) == n
    got = [rows_of(p) for p in split]
    sizes = [len(g) for g in got]
    assert [p.count() for p in split] == sizes
    flat = [r for g in got for r in g]
    assert len(set(flat)) == len(flat)  # disjoint
    if equal:
        assert len(set(sizes)) == 1 and sizes[0] == len(all_rows) // n
        assert flat == all_rows[: len(flat)]  # at most n - 1 rows left out, at the end
        assert len(all_rows) - len(flat) < n
    else:
        assert flat == all_rows
        assert max(sizes) - min(sizes) <= 1


@settings(**SETTINGS)
@given(blocks(), st.integers(1, 4))
def test_split_after_a_filter_counts_the_filtered_rows(parts, n):
    df = oracle(parts)
    expected = df[df["k"] >= 2]["row"].tolist()
    split = dataset(parts).filter(lambda r: r["k"] >= 2).split(n, equal=True)
    got = [rows_of(p) for p in split]
    assert all(len(g) == len(expected) // n for g in got)
    assert [r for g in got for r in g] == expected[: n * (len(expected) // n)]


@settings(**SETTINGS)
@given(blocks(), st.lists(st.integers(0, 50), min_size=1, max_size=4))
def test_split_at_indices_is_slicing(parts, indices):
    indices = sorted(indices)
    all_rows = oracle(parts)["row"].tolist()
    bounds = [0, *indices, len(all_rows)]
    expected = [all_rows[a:b] for a, b in itertools.pairwise(bounds)]
    assert [rows_of(p) for p in dataset(parts).split_at_indices(indices)] == expected


def test_split_at_no_indices_is_refused_as_in_ray():
    with pytest.raises(ValueError, match="non-empty"):
        ld.range(3).split_at_indices([])


def test_split_proportionately_follows_ray():
    parts = ld.range(10).split_proportionately([0.1, 0.3])
    assert [p.count() for p in parts] == [1, 3, 6]
    with pytest.raises(ValueError, match="add up to less than 1"):
        ld.range(10).split_proportionately([0.5, 0.5])
    with pytest.raises(ValueError, match="Couldn't create non-empty splits"):
        ld.range(3).split_proportionately([0.1])
    # every part gets a row, earlier cuts moving down, as in Ray's test_split.py
    parts = ld.range(10).split_proportionately([0.98, 0.01])
    assert [[r["id"] for r in p.take_all()] for p in parts] == [list(range(8)), [8], [9]]


def test_a_stratified_split_takes_the_floor_of_each_class_for_test_as_ray():
    labels = ["A"] * 6 + ["B"] * 2 + ["C"]
    ds = ld.from_items([{"id": i, "label": x} for i, x in enumerate(labels)])
    train, test = ds.train_test_split(test_size=0.3, stratify="label")
    assert [r["label"] for r in test.take_all()] == ["A"]
    assert sorted(r["label"] for r in train.take_all()) == ["A"] * 5 + ["B"] * 2 + ["C"]


def test_train_test_split_by_fraction_and_by_count():
    train, test = ld.range(10).train_test_split(0.25)
    # as in Ray: int(10 * 0.75) = 7 rows for training, the rest for test
    assert [r["id"] for r in test.take_all()] == [7, 8, 9]
    assert train.count() == 7
    train, test = ld.range(10).train_test_split(4)
    assert (train.count(), test.count()) == (6, 4)
    train, test = ld.range(100).train_test_split(0.2, shuffle=True, seed=3)
    ids = [r["id"] for r in train.take_all()] + [r["id"] for r in test.take_all()]
    assert sorted(ids) == list(range(100)) and ids != list(range(100))
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        ld.range(10).train_test_split(1.5)
    with pytest.raises(ValueError, match="between 1 and 9"):
        ld.range(10).train_test_split(10)


def test_streaming_split_gives_one_iterator_per_consumer():
    iterators = ld.range(10).streaming_split(3, equal=True)
    got = [[int(i) for b in it.iter_batches() for i in b["id"]] for it in iterators]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_bad_numbers_of_splits_are_rejected(n):
    with pytest.raises(ValueError, match="positive int"):
        ld.range(3).split(n)


def test_split_at_indices_rejects_unsorted_or_negative_indices():
    with pytest.raises(ValueError, match="sorted"):
        ld.range(3).split_at_indices([2, 1])
    with pytest.raises(ValueError, match=">= 0"):
        ld.range(3).split_at_indices([-1])


def test_split_of_an_in_memory_table_holds_only_slices():
    parts = ld.range(10, override_num_blocks=2).materialize().split(3)
    assert [p.num_blocks() for p in parts] == [1, 2, 1]
    assert [p.count() for p in parts] == [4, 3, 3]
