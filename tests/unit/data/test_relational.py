"""join, zip, with_column and expressions, random_sample, stratified splits, Schema,
size_bytes, from_blocks, read_json(lines=True)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

import lockstep.data as ld
from lockstep.data.expressions import col, lit


def left():
    return ld.from_items([{"id": i, "a": f"l{i}"} for i in range(5)], override_num_blocks=2)


def right():
    return ld.from_items([{"id": i, "b": i * 10} for i in range(3, 8)])


def by_id(ds):
    return sorted(ds.take_all(), key=lambda r: (r["id"] is None, r["id"]))


def test_joins_match_pandas_merge():
    l_df, r_df = left().to_pandas(), right().to_pandas()
    for join_type, how in [
        ("inner", "inner"),
        ("left_outer", "left"),
        ("right_outer", "right"),
        ("full_outer", "outer"),
    ]:
        got = pd.DataFrame(by_id(left().join(right(), join_type, 2, on=("id",))))
        want = l_df.merge(r_df, on="id", how=how).sort_values("id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False)


def test_join_with_right_on_and_suffixes():
    other = ld.from_items([{"key": 4, "a": "r4"}])
    out = left().join(
        other, "inner", 1, on=("id",), right_on=("key",), left_suffix="_l", right_suffix="_r"
    )
    assert out.take_all() == [{"id": 4, "a_l": "l4", "a_r": "r4"}]


def test_a_join_key_missing_on_one_side_is_a_clear_error():
    with pytest.raises(ValueError, match=r"the right dataset has no key columns \['id'\]"):
        left().join(ld.from_items([{"x": 1}]), "inner", 1)
    with pytest.raises(ValueError, match="unknown join_type"):
        left().join(right(), "cross", 1)


def test_zip_adds_the_columns_row_by_row():
    zipped = left().zip(right())
    assert zipped.columns() == ["id", "a", "id_1", "b"] and zipped.take(1)[0]["id_1"] == 3
    with pytest.raises(ValueError, match="5 and 2 rows"):
        left().zip(ld.range(2))


def test_with_column_and_filter_take_expressions_and_strings():
    ds = ld.range(6)
    out = ds.with_column("y", (col("id") + lit(1)) * 2).filter(expr=col("y") > 6)
    assert out.take_all() == [{"id": 3, "y": 8}, {"id": 4, "y": 10}, {"id": 5, "y": 12}]
    assert out.count() == 3
    assert [r["id"] for r in ds.filter(expr="id > 2 and not id == 4").take_all()] == [3, 5]
    assert [r["id"] for r in ds.filter(expr="id in (1, 2) or id >= 5").take_all()] == [1, 2, 5]
    replaced = ds.with_column("id", col("id") * 10)
    assert replaced.columns() == ["id"] and replaced.sum("id") == 150
    assert ds.with_column("z", "id * 3").take(2) == [{"id": 0, "z": 0}, {"id": 1, "z": 3}]


def test_random_sample_keeps_the_same_rows_for_the_same_seed():
    ds = ld.range(10_000, override_num_blocks=4)
    first = [r["id"] for r in ds.random_sample(0.1, seed=7).take_all()]
    assert first == [r["id"] for r in ds.random_sample(0.1, seed=7).take_all()]
    assert 800 < len(first) < 1200
    assert first != [r["id"] for r in ds.random_sample(0.1, seed=8).take_all()]
    assert ds.random_sample(0.0).count() == 0 and ds.random_sample(1.0).count() == 10_000
    with pytest.raises(ValueError, match="Fraction must be between 0 and 1"):
        ds.random_sample(1.5)


def test_random_sample_draws_each_blocks_rows_as_ray_does():
    # Ray seeds block i's generator with [i, seed]: the same rows as Ray's
    ds = ld.range(100, override_num_blocks=10).random_sample(fraction=0.1, seed=1234)
    assert [r["id"] for r in ds.take_all()] == [8, 49, 71, 78, 81, 85]
    first, _ = ld.range(100, override_num_blocks=10).random_sample(0.5, seed=3).split(2)
    again, _ = ld.range(100, override_num_blocks=10).random_sample(0.5, seed=3).split(2)
    assert first.take_all() == again.take_all()


def test_random_sample_of_an_empty_dataset_is_refused():
    with pytest.raises(ValueError, match="Cannot sample from an empty Dataset"):
        ld.range(0).random_sample(0.2)


def test_train_test_split_stratified_keeps_the_class_proportions():
    ds = ld.from_items([{"x": i, "label": "a" if i % 4 else "b"} for i in range(100)])
    train, test = ds.train_test_split(0.2, stratify="label")
    assert train.count() == 80 and test.count() == 20
    counts = test.to_pandas()["label"].value_counts().to_dict()
    assert counts == {"a": 15, "b": 5}
    shuffled, _ = ds.train_test_split(0.2, stratify="label", shuffle=True, seed=1)
    assert shuffled.count() == 80
    with pytest.raises(ValueError, match="stratify column 'nope' does not exist"):
        ds.train_test_split(0.2, stratify="nope")


def test_schema_size_bytes_from_blocks_and_json_lines(tmp_path):
    schema = ld.from_items([{"x": 1, "s": "a"}]).schema()
    assert isinstance(schema, ld.Schema) and schema.names == ["x", "s"]
    assert schema.types == [pa.int64(), pa.string()]
    assert schema == pa.schema([("x", pa.int64()), ("s", pa.string())])
    assert schema == ld.from_items([{"x": 2, "s": "b"}]).schema()
    assert ld.range(100).size_bytes() == 800
    assert ld.range(100).map_batches(lambda b: b).size_bytes() == 800
    blocks = ld.from_blocks([pa.table({"x": [1, 2]}), pd.DataFrame({"x": [3]})])
    assert blocks.num_blocks() == 2 and blocks.sum("x") == 6
    (tmp_path / "a.json").write_text('{"x": 1}\n{"x": 2}\n')
    assert ld.read_json(str(tmp_path), lines=True).take_all() == [{"x": 1}, {"x": 2}]
