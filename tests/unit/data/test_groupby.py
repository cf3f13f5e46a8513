"""groupby(...).aggregate and the aggregations, against pandas."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings

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
