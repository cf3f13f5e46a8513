"""groupby(...).aggregate and the aggregations, against pandas."""

import math
import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from lockstep.data.aggregate import Count, Max, Mean, Min, Std, Sum
from tests.unit.data.strategies import SETTINGS, blocks, dataset, oracle, same_values


@settings(**SETTINGS)
@given(blocks())
def test_group_aggregations_match_pandas(parts):
    df = oracle(parts)
    got = (
        dataset(parts)
        .groupby("k")
        .aggregate(Count(), Sum("i"), Min("f"), Max("i"), Mean("f"), Std("f", ddof=1))
        .to_pandas()
    )
    if df.empty:
        assert got.empty
        return
    grouped = df.groupby("k")
    expected = pd.DataFrame(
        {
            "k": sorted(df["k"].unique()),
            "count()": grouped.size().to_numpy(),
            "sum(i)": grouped["i"].sum(min_count=1).to_numpy(),
            "min(f)": grouped["f"].min().to_numpy(),
            "max(i)": grouped["i"].max().to_numpy(),
            "mean(f)": grouped["f"].mean().to_numpy(),
            "std(f)": grouped["f"].std(ddof=1).to_numpy(),
        }
    )
    assert list(got.columns) == list(expected.columns)
    for column in expected.columns:
        for a, b in zip(got[column], expected[column], strict=True):
            assert same_values(a, b) or np.isclose(a, b), (column, a, b)


@settings(**SETTINGS)
@given(blocks())
def test_group_shortcuts_and_multiple_keys(parts):
    df = oracle(parts)
    ds = dataset(parts)
    counts = ds.groupby(["k", "s"]).count().to_pandas()
    expected = df.groupby(["k", "s"], dropna=False).size()
    assert counts["count()"].sum() == expected.sum() == len(df)
    sums = ds.groupby("k").sum("row").to_pandas()
    assert sums["sum(row)"].tolist() == df.groupby("k")["row"].sum().tolist()
    assert ds.groupby("k").mean(["row"]).count() == df["k"].nunique()


def test_count_with_and_without_nulls():
    ds = ld.from_items([{"k": 1, "v": None}, {"k": 1, "v": 2.0}])
    got = ds.groupby("k").aggregate(
        Count("v", ignore_nulls=True, alias_name="present"), Count("v", alias_name="all")
    )
    assert got.take_all() == [{"k": 1, "present": 1, "all": 2}]
    assert ds.aggregate(Count("v", ignore_nulls=True), Count()) == {"count(v)": 1, "count()": 2}


def test_alias_names_and_repeated_aggregations():
    ds = ld.from_items([{"k": 1, "v": 2.0}, {"k": 1, "v": 4.0}])
    got = ds.groupby("k").aggregate(Sum("v", alias_name="a"), Sum("v", alias_name="b"))
    assert got.take_all() == [{"k": 1, "a": 6.0, "b": 6.0}]


def test_map_groups_sees_each_group_whole():
    ds = ld.from_items([{"k": i % 3, "v": i} for i in range(9)], override_num_blocks=4)
    sizes = ds.groupby("k").map_groups(
        lambda g: pd.DataFrame({"k": [g["k"].iloc[0]], "total": [g["v"].sum()]}),
        batch_format="pandas",
    )
    assert sizes.take_all() == [{"k": 0, "total": 9}, {"k": 1, "total": 12}, {"k": 2, "total": 15}]


def test_dataset_aggregate_is_streaming_and_named():
    ds = ld.range(10, override_num_blocks=5)
    assert ds.aggregate(Count(), Sum("id"), Std("id", ddof=0)) == {
        "count()": 10,
        "sum(id)": 45,
        "std(id)": pytest.approx(np.std(np.arange(10))),
    }


def test_bad_groupby_arguments():
    with pytest.raises(ValueError, match="column name"):
        ld.range(3).groupby(3)
    with pytest.raises(ValueError, match="aggregations"):
        ld.range(3).groupby("id").aggregate("sum")
    with pytest.raises(ValueError, match="one column name"):
        Sum(["a", "b"])


# After Ray's python/ray/data/tests/test_dataset_aggregrations.py: aggregates are exact,
# whatever the blocks and their order.


@settings(**SETTINGS)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=60),
    seed=st.integers(0, 2**16),
    num_blocks=st.integers(1, 12),
)
def test_sum_mean_and_std_do_not_depend_on_the_blocks(values, seed, num_blocks):
    def figures(xs, n):
        ds = ld.from_items([{"x": x} for x in xs]).repartition(min(n, len(xs)))
        return ds.sum("x"), ds.mean("x"), ds.std("x"), ds.std("x", ddof=0)

    shuffled = list(values)
    random.Random(seed).shuffle(shuffled)
    assert figures(values, 1) == figures(shuffled, num_blocks)


def test_the_mean_of_0_to_99_over_30_shuffled_blocks_is_49_5():
    xs = list(range(100))
    random.Random(1740035705).shuffle(xs)
    ds = ld.from_items([{"A": x} for x in xs]).repartition(30)
    assert ds.mean("A") == 49.5
    assert ds.map_batches(lambda b: b, batch_size=None, batch_format="pandas").mean("A") == 49.5


def test_std_of_one_value_is_nan_and_of_none_is_none_as_in_ray():
    assert math.isnan(ld.from_items([{"A": 3}]).std("A"))
    assert ld.from_items([{"A": 3}]).std("A", ddof=0) == 0.0
    assert ld.from_items([{"A": None}]).std("A") is None
