"""Hive-partitioned parquet: partition columns kept, pruning, partition_filter, paths."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lockstep.data as ld
from lockstep.data.datasource import Partitioning, PathPartitionFilter


@pytest.fixture
def root(tmp_path):
    table = pa.table(
        {
            "country": ["US", "US", "FR", "DE", "FR", None],
            "year": [2023, 2024, 2024, 2023, 2023, 2024],
            "x": [1, 2, 3, 4, 5, 6],
        }
    )
    pq.write_to_dataset(table, tmp_path / "data", partition_cols=["country", "year"])
    return tmp_path / "data"


def rows(ds):
    return sorted(ds.take_all(), key=lambda r: r["x"])


def test_partition_columns_are_kept_as_strings_as_ray_types_them(root):
    ds = ld.read_parquet(str(root))
    assert ds.schema().field("country").type == pa.string()
    assert ds.schema().field("year").type == pa.string()
    assert rows(ds)[0] == {"x": 1, "country": "US", "year": "2023"}
    assert rows(ds)[5] == {"x": 6, "country": None, "year": "2024"}  # Hive's null directory
    assert ds.count() == 6 and ds.select_columns(["country"]).count() == 6


def test_partitioning_says_the_types_or_turns_it_off(root):
    typed = ld.read_parquet(str(root), partitioning=Partitioning("hive", field_types={"year": int}))
    assert typed.schema().field("year").type == pa.int64() and rows(typed)[1]["year"] == 2024
    assert ld.read_parquet(str(root), partitioning=None).columns() == ["x"]
    with pytest.raises(ValueError, match="only 'hive'"):
        Partitioning("dirs")


def test_a_filter_on_partition_columns_reads_only_the_matching_files(root):
    everything = ld.read_parquet(str(root))
    us = ld.read_parquet(str(root), filter=pc.field("country") == "US")
    assert len(us.input_files()) == 2 < len(everything.input_files())
    assert [r["x"] for r in rows(us)] == [1, 2]
    mixed = ld.read_parquet(str(root), filter=[("country", "=", "FR"), ("x", ">", 3)])
    assert [r["x"] for r in rows(mixed)] == [5] and len(mixed.input_files()) == 2
    none = ld.read_parquet(str(root), filter=pc.field("country") == "XX")
    assert none.take_all() == [] and "country" in none.columns()


def test_partition_filter_include_paths_columns_and_file_shuffle(root):
    keep = PathPartitionFilter.of(lambda values: values["country"] == "FR")
    assert [r["x"] for r in rows(ld.read_parquet(str(root), partition_filter=keep))] == [3, 5]
    plain = ld.read_parquet(str(root), partition_filter=lambda v: v.get("year") == "2023")
    assert [r["x"] for r in rows(plain)] == [1, 4, 5]
    with_paths = ld.read_parquet(str(root), include_paths=True, columns=["x", "path", "country"])
    first = rows(with_paths)[0]
    assert list(first) == ["x", "path", "country"] and "country=US" in first["path"]
    assert ld.read_parquet(str(root), columns=[]).count() == 6
    shuffled = ld.read_parquet(str(root), shuffle="files")
    assert sorted(shuffled.input_files()) == sorted(ld.read_parquet(str(root)).input_files())
    with pytest.raises(ValueError, match="invalid value for 'shuffle'"):
        ld.read_parquet(str(root), shuffle="rows")


def test_a_directory_above_the_root_named_like_a_partition_is_not_one(tmp_path):
    base = tmp_path / "run=3"
    pq.write_to_dataset(pa.table({"k": ["a", "b"], "v": [1, 2]}), base, partition_cols=["k"])
    ds = ld.read_parquet(str(base))
    assert sorted(ds.columns()) == ["k", "v"]  # no "run" column
    split = ds.split(2)
    assert sorted(r["k"] for p in split for r in p.take_all()) == ["a", "b"]
