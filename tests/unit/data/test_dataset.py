"""Dataset transforms, global operations and consumption, against pandas as the oracle."""

import pickle

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from tests.unit.data.strategies import (
    SETTINGS,
    assert_frames_equal,
    blocks,
    dataset,
    oracle,
    same_values,
)


@settings(**SETTINGS)
@given(blocks())
def test_rows_count_and_frames_match_the_input(parts):
    ds = dataset(parts)
    expected = oracle(parts)
    assert ds.count() == len(expected)
    assert_frames_equal(ds.to_pandas(), expected)
    assert ds.to_arrow().to_pylist() == pa.concat_tables(parts).to_pylist()
    assert ds.take_all() == pa.concat_tables(parts).to_pylist()
    assert ds.take(3) == pa.concat_tables(parts).to_pylist()[:3]


@settings(**SETTINGS)
@given(blocks(), st.integers(1, 50))
def test_map_is_applied_to_every_row(parts, offset):
    def add(row):
        return {"row": row["row"], "j": None if row["i"] is None else row["i"] + offset}

    expected = oracle(parts)[["row", "i"]].rename(columns={"i": "j"})
    expected["j"] = expected["j"] + offset
    got = dataset(parts).map(add).to_pandas()
    if len(expected):
        assert_frames_equal(got, expected)
    else:
        assert got.empty


@settings(**SETTINGS)
@given(blocks())
def test_filter_by_function_and_by_expression_match_a_pandas_mask(parts):
    df = oracle(parts)
    expected = df[df["f"] > 0].reset_index(drop=True)
    by_fn = dataset(parts).filter(lambda row: row["f"] is not None and row["f"] > 0)
    by_expr = dataset(parts).filter(expr=pc.field("f") > 0)
    assert by_fn.to_pandas()["row"].tolist() == expected["row"].tolist()
    assert by_expr.to_pandas()["row"].tolist() == expected["row"].tolist()
    assert by_expr.count() == len(expected)


@settings(**SETTINGS)
@given(blocks())
def test_flat_map_repeats_rows_by_their_key(parts):
    df = oracle(parts)
    expected = df.loc[df.index.repeat(df["k"])]["row"].tolist()
    ds = dataset(parts).flat_map(lambda row: [{"row": row["row"]}] * row["k"])
    assert [r["row"] for r in ds.take_all()] == expected
    assert ds.count() == len(expected)


@settings(**SETTINGS)
@given(
    blocks(),
    st.sampled_from(["pandas", "numpy", "pyarrow"]),
    st.one_of(st.none(), st.integers(1, 7)),
)
def test_map_batches_in_every_format_and_batch_size(parts, batch_format, batch_size):
    def double_k(batch):
        if batch_format == "pandas":
            return batch.assign(k=batch["k"] * 2)
        if batch_format == "numpy":
            return {**batch, "k": batch["k"] * 2}
        return batch.set_column(batch.column_names.index("k"), "k", pc.multiply(batch["k"], 2))

    df = oracle(parts)
    ds = dataset(parts).map_batches(double_k, batch_format=batch_format, batch_size=batch_size)
    # with no rows the function never runs, so there are no columns either (as in Ray)
    got = ds.to_pandas()["k"].tolist() if len(df) else []
    assert got == (df["k"] * 2).tolist()


def test_map_batches_sees_the_batch_size_it_asked_for():
    sizes = []
    ds = ld.range(10, override_num_blocks=3).map_batches(
        lambda b: sizes.append(len(b["id"])) or b, batch_size=4
    )
    assert ds.count() == 10
    # batches are formed within each block (4, 3, 3 rows), then cut at 4 rows
    assert all(s <= 4 for s in sizes) and sum(sizes) == 10


def test_map_batches_gives_writable_copies_unless_zero_copy():
    def increment(batch):
        batch["id"] += 1
        return batch

    assert ld.range(3).map_batches(increment).take_all() == [{"id": 1}, {"id": 2}, {"id": 3}]
    with pytest.raises(ValueError, match="read-only"):
        ld.range(3).map_batches(increment, zero_copy_batch=True).take_all()


def test_map_batches_may_yield_several_batches():
    def split_in_two(batch):
        yield {"id": batch["id"][:1]}
        yield {"id": batch["id"][1:]}

    assert ld.range(4).map_batches(split_in_two).count() == 4


def test_a_callable_class_is_constructed_once_per_process_with_its_arguments():
    class AddConstant:
        made = 0

        def __init__(self, constant):
            AddConstant.made += 1
            self.constant = constant

        def __call__(self, batch):
            return {"id": batch["id"] + self.constant}

    ds = ld.range(10, override_num_blocks=5).map_batches(
        AddConstant, fn_constructor_args=(100,), batch_size=1
    )
    assert ds.sum("id") == sum(range(10)) + 1000
    assert AddConstant.made == 1
    # the instance is not pickled: a copy (a worker's) builds its own
    copy = cloudpickle.loads(cloudpickle.dumps(ds))
    assert copy.take(1) == [{"id": 100}]
    assert AddConstant.made == 2


def test_fn_args_and_kwargs_reach_the_function():
    ds = ld.range(2).map(
        lambda row, a, b: {"v": row["id"] * a + b}, fn_args=(10,), fn_kwargs={"b": 1}
    )
    assert ds.take_all() == [{"v": 1}, {"v": 11}]


@settings(**SETTINGS)
@given(blocks())
def test_column_operations_match_pandas(parts):
    df = oracle(parts)
    ds = dataset(parts)
    assert_frames_equal(ds.select_columns(["s", "row"]).to_pandas(), df[["s", "row"]])
    assert_frames_equal(ds.drop_columns(["i", "f"]).to_pandas(), df.drop(columns=["i", "f"]))
    renamed = ds.rename_columns({"i": "integer"}).to_pandas()
    assert_frames_equal(renamed, df.rename(columns={"i": "integer"}))
    added = ds.add_column("k2", lambda batch: batch["k"] * 2).to_pandas()
    assert added["k2"].tolist() == (df["k"] * 2).tolist()
    assert list(ds.rename_columns(["a", "b", "c", "d", "e"]).to_pandas().columns) == list("abcde")


@settings(**SETTINGS)
@given(blocks(), st.integers(0, 50))
def test_limit_is_head(parts, n):
    df = oracle(parts)
    assert_frames_equal(dataset(parts).limit(n).to_pandas(), df.head(n))
    after_filter = dataset(parts).filter(lambda r: r["k"] > 0).limit(n).to_pandas()
    assert after_filter["row"].tolist() == df[df["k"] > 0].head(n)["row"].tolist()


def test_limit_stops_reading_early():
    read = []
    ds = ld.range(1000, override_num_blocks=10).map_batches(lambda b: read.append(1) or b)
    assert ds.filter(lambda r: True).limit(5).count() == 5
    assert len(read) == 1


@settings(**SETTINGS)
@given(blocks(), st.integers(0, 2**16))
def test_random_shuffle_permutes_the_rows(parts, seed):
    df = oracle(parts)
    shuffled = dataset(parts).random_shuffle(seed=seed).to_pandas()
    assert sorted(shuffled["row"]) == df["row"].tolist()
    again = dataset(parts).random_shuffle(seed=seed).to_pandas()
    assert shuffled["row"].tolist() == again["row"].tolist()


def test_random_shuffle_changes_the_order():
    assert [r["id"] for r in ld.range(100).random_shuffle(seed=1).take_all()] != list(range(100))


@settings(**SETTINGS)
@given(blocks(), st.sampled_from(["i", "f", "s", ["k", "f"]]), st.booleans())
def test_sort_matches_pandas(parts, key, descending):
    df = oracle(parts)
    got = dataset(parts).sort(key, descending=descending).to_pandas()
    keys = [key] if isinstance(key, str) else key
    expected = df.sort_values(keys, ascending=not descending, na_position="last", kind="stable")
    for k in keys:
        assert_frames_equal(got[[k]], expected[[k]].reset_index(drop=True))


@settings(**SETTINGS)
@given(blocks(), st.integers(1, 6))
def test_repartition_keeps_the_rows_in_order(parts, n):
    ds = dataset(parts).repartition(n)
    assert ds.num_blocks() == n
    assert ds.to_pandas()["row"].tolist() == oracle(parts)["row"].tolist()
    filtered = dataset(parts).filter(lambda r: r["k"] == 1).repartition(n)
    assert filtered.count() == int((oracle(parts)["k"] == 1).sum())


@settings(**SETTINGS)
@given(blocks(), blocks())
def test_union_appends(parts_a, parts_b):
    a = dataset(parts_a).map(lambda r: {"row": r["row"]})
    b = dataset(parts_b).select_columns(["row"])
    expected = oracle(parts_a)["row"].tolist() + oracle(parts_b)["row"].tolist()
    union = a.union(b)
    assert [r["row"] for r in union.take_all()] == expected
    assert union.count() == len(expected)


@settings(**SETTINGS)
@given(blocks())
def test_unique_matches_pandas(parts):
    df = oracle(parts)
    got = dataset(parts).unique("s")
    expected = [None if v is None or v is np.nan else v for v in pd.unique(df["s"])]
    assert got == expected


@settings(**SETTINGS)
@given(blocks())
def test_whole_dataset_aggregations_match_pandas(parts):
    df = oracle(parts)
    ds = dataset(parts)
    for column in ("i", "f"):
        values = df[column].dropna()
        if values.empty:
            assert ds.sum(column) is None and ds.mean(column) is None and ds.min(column) is None
            continue
        assert same_values(ds.sum(column), values.sum())
        assert same_values(ds.min(column), values.min())
        assert same_values(ds.max(column), values.max())
        assert np.isclose(ds.mean(column), values.mean())
        if len(values) > 1:
            assert np.isclose(ds.std(column), values.std(ddof=1))
            assert np.isclose(ds.std(column, ddof=0), values.std(ddof=0))
    assert (
        ds.sum(["k", "row"]) == {"sum(k)": df["k"].sum(), "sum(row)": df["row"].sum()} or df.empty
    )


def test_aggregations_with_nulls_not_ignored_are_none():
    ds = ld.from_items([{"x": 1.0}, {"x": None}])
    assert ds.sum("x") == 1.0
    assert ds.sum("x", ignore_nulls=False) is None
    assert ds.mean("x", ignore_nulls=False) is None


def test_schema_and_columns():
    ds = ld.from_items([{"a": 1, "b": "x"}])
    assert ds.schema().names == ["a", "b"]
    assert ds.columns() == ["a", "b"]
    assert ds.map(lambda r: {"c": r["a"]}).columns() == ["c"]
    assert ld.from_items([]).columns() == []


def test_materialize_runs_the_transforms_once():
    calls = []
    ds = ld.range(4, override_num_blocks=2).map(lambda r: calls.append(1) or {"x": r["id"]})
    done = ds.materialize()
    assert len(calls) == 4
    assert done.take_all() == [{"x": 0}, {"x": 1}, {"x": 2}, {"x": 3}]
    assert done.num_blocks() == 2 and len(calls) == 4


def test_take_batch_and_show(capsys):
    ds = ld.range(5)
    assert ds.take_batch(2, batch_format="pandas")["id"].tolist() == [0, 1]
    ds.show(2)
    assert capsys.readouterr().out == "{'id': 0}\n{'id': 1}\n"
    with pytest.raises(ValueError, match="empty"):
        ld.from_items([]).take_batch()


def test_take_all_and_to_pandas_refuse_more_rows_than_the_limit():
    with pytest.raises(ValueError, match=r"more than 3 rows.*HINT"):
        ld.range(10).take_all(limit=3)
    with pytest.raises(ValueError, match=r"more than 3 rows.*HINT"):
        ld.range(10).to_pandas(limit=3)
    assert len(ld.range(3).to_pandas(limit=3)) == 3


def test_stats_describe_the_blocks_and_the_last_pass():
    ds = ld.range(8).map(lambda r: r)
    assert "No pass" in ds.stats()
    for _ in ds.iter_batches(batch_size=4):
        pass
    text = ds.stats()
    assert "range(0, 8)" in text and "map(" in text and "8 rows in 2 batches" in text
    assert text.startswith("Operator 0 Read: 1 blocks") and "\nOperator 1 map(" in text
    assert "Dataset iterator time breakdown:" in text and "Dataset throughput:" in text


def test_a_dataset_pickles_as_its_description():
    table = pa.table({"x": np.arange(100_000)})
    ds = ld.from_arrow(table)
    part = ds.split(100)[0]
    # the part holds its 1000 rows, not its parent's buffer
    assert len(pickle.dumps(part)) < len(pickle.dumps(ds)) / 20
    assert pickle.loads(pickle.dumps(part)).count() == 1000


def test_repr_uses_only_what_is_known_without_reading():
    # Ray's table (python/ray/data/tests/test_consumption.py): rows only when in memory
    assert repr(ld.range(3)) == (
        "shape: (3, 1)\n╭───────╮\n│ id    │\n│ ---   │\n│ int64 │\n╰───────╯\n"
        "(Dataset isn't materialized)"
    )
    shown = repr(ld.range(20).materialize()).splitlines()
    assert shown[0] == "shape: (20, 1)" and shown[-1] == "(Showing 10 of 20 rows)"
    assert [line.strip("│ ") for line in shown[6:17]] == [*"01234", "…", *map(str, range(15, 20))]
    assert "num_rows=?" in repr(ld.range(3).filter(lambda r: True))
    assert repr(ld.from_items([{"text": "spam", "number": 0}]).schema()) == (
        "Column  Type\n------  ----\ntext    string\nnumber  int64"
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ds: ds.map(3), "function or a callable class"),
        (lambda ds: ds.map_batches(lambda b: b, batch_format="arrow"), "unknown batch_format"),
        (lambda ds: ds.map_batches(lambda b: b, batch_size=0), "batch_size"),
        (lambda ds: ds.filter(), "either fn or expr"),
        (lambda ds: ds.filter(expr=3), "pyarrow.compute.Expression"),
        (lambda ds: ds.filter(expr="id >"), "cannot read the expression"),
        (lambda ds: ds.select_columns(["nope"]), r"\['nope'\] do not exist"),
        (lambda ds: ds.drop_columns("nope"), "do not exist"),
        (lambda ds: ds.rename_columns(["a", "b"]), "length match current schema names"),
        (lambda ds: ds.limit(-1), "non-negative"),
        (lambda ds: ds.sort("id", descending=[True, False]), "descending flags"),
        (lambda ds: ds.map(lambda r: r, fn_constructor_args=(1,)), "callable class"),
        (lambda ds: ds.aggregate(), "aggregations"),
        (lambda ds: ds.union(3), "takes Datasets"),
    ],
)
def test_bad_arguments_are_clear_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call(ld.range(3))


def test_missing_columns_after_a_transform_are_reported_when_read():
    with pytest.raises(ValueError, match=r"columns \['x'\] do not exist.*HINT"):
        ld.range(3).map(lambda r: r).select_columns(["x"]).take_all()


def test_a_map_that_returns_no_dict_is_a_clear_error():
    with pytest.raises(ValueError, match="rows are dicts"):
        ld.range(2).map(lambda r: r["id"]).take_all()


def test_map_batches_that_returns_no_batch_is_a_clear_error():
    with pytest.raises(ValueError, match="not a batch"):
        ld.range(2).map_batches(lambda b: 3).take_all()


def test_an_unseeded_random_shuffle_gives_a_new_order_at_every_pass_as_in_ray():
    ds = ld.range(200).random_shuffle()
    first, second = ([r["id"] for r in ds.iter_rows()] for _ in range(2))
    assert first != second and sorted(first) == sorted(second) == list(range(200))
    parts = ds.split(2, equal=True)
    rows = [[r["id"] for r in p.iter_rows()] for p in parts]
    assert sorted(rows[0] + rows[1]) == list(range(200))  # the parts stay disjoint
    assert [r["id"] for r in parts[0].iter_rows()] != rows[0]  # and reshuffle per pass
    fixed = ds.materialize()
    assert fixed.take_all() == fixed.take_all()


def test_a_seeded_random_shuffle_gives_the_same_order_at_every_pass():
    ds = ld.range(50).random_shuffle(seed=4)
    assert ds.take_all() == ds.take_all()


def test_a_dataset_with_a_local_function_goes_through_plain_pickle():
    import pickle

    offset = 10

    def shift(row):
        return {"id": row["id"] + offset}

    ds = pickle.loads(pickle.dumps(ld.range(3).map(shift).map_batches(lambda b: b)))
    assert [r["id"] for r in ds.take_all()] == [10, 11, 12]


def test_map_refuses_rows_that_change_columns_as_ray_does():
    # after Ray's python/ray/data/tests/test_map.py
    ds = ld.range(10, override_num_blocks=1)

    def bad(row):
        return {"a": "x"} if row["id"] > 5 else {"b": "x"}

    with pytest.raises(ValueError, match=r"Current row has different columns.*HINT"):
        ds.map(bad).materialize()
    good = ds.map(lambda r: {"a": 1, "b": 2} if r["id"] > 5 else {"b": 2, "a": 1})
    assert good.take_all() == [{"a": 1, "b": 2}] * 10
