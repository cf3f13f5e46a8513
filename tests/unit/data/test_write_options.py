"""write_parquet/write_csv/write_json with Ray's options: partitions, rows per file, mode."""

from __future__ import annotations

import os

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import lockstep.data as ld
from lockstep.data.datasource import FilenameProvider


def files(directory):
    return sorted(
        os.path.relpath(os.path.join(d, f), directory)
        for d, _, names in os.walk(directory)
        for f in names
    )


def data():
    rows = [
        {"country": c, "year": y, "x": i}
        for i, (c, y) in enumerate([("US", 1), ("FR", 1), ("US", 2), (None, 2)] * 3)
    ]
    return ld.from_items(rows, override_num_blocks=3)


def test_partitioned_parquet_round_trips(tmp_path):
    data().write_parquet(str(tmp_path / "out"), partition_cols=["country", "year"])
    written = files(tmp_path / "out")
    assert {os.path.dirname(f) for f in written} == {
        "country=US/year=1",
        "country=US/year=2",
        "country=FR/year=1",
        "country=__HIVE_DEFAULT_PARTITION__/year=2",
    }
    assert "country" not in pq.read_schema(tmp_path / "out" / written[0]).names  # as Ray
    back = ld.read_parquet(str(tmp_path / "out"))
    got = sorted(back.take_all(), key=lambda r: r["x"])
    assert [(r["country"], r["year"], r["x"]) for r in got] == [
        (r["country"], str(r["year"]), r["x"]) for r in data().take_all()
    ]
    with pytest.raises(ValueError, match=r"partition_cols \['nope'\]"):
        data().write_parquet(str(tmp_path / "bad"), partition_cols=["nope"])


def test_rows_per_file(tmp_path):
    ds = ld.range(100, override_num_blocks=10)
    ds.write_parquet(str(tmp_path / "min"), min_rows_per_file=25)
    sizes = [pq.read_metadata(tmp_path / "min" / f).num_rows for f in files(tmp_path / "min")]
    assert sorted(sizes) == [10, 30, 30, 30]  # blocks of 10 put together until 25 or more
    ds.write_parquet(str(tmp_path / "max"), max_rows_per_file=7)
    sizes = [pq.read_metadata(tmp_path / "max" / f).num_rows for f in files(tmp_path / "max")]
    assert max(sizes) <= 7 and sum(sizes) == 100
    ld.range(10).write_csv(str(tmp_path / "csv"), min_rows_per_file=100)
    assert len(files(tmp_path / "csv")) == 1
    assert ld.read_parquet(str(tmp_path / "max")).sum("id") == sum(range(100))
    with pytest.raises(ValueError, match=r"min_rows_per_file \(10\) cannot be greater than"):
        ds.write_parquet(str(tmp_path / "x"), min_rows_per_file=10, max_rows_per_file=5)


def test_modes(tmp_path):
    out = str(tmp_path / "out")
    ld.range(3).write_parquet(out)
    ld.range(3).write_parquet(out)  # append, Ray's default
    assert ld.read_parquet(out).count() == 6
    ld.range(2).write_parquet(out, mode="overwrite")
    assert ld.read_parquet(out).count() == 2
    ld.range(5).write_parquet(out, mode="ignore")
    assert ld.read_parquet(out).count() == 2
    with pytest.raises(ValueError, match="already exists and mode='error'"):
        ld.range(5).write_json(out, mode="error")
    ld.range(5).write_json(str(tmp_path / "fresh"), mode="error")
    assert ld.read_json(str(tmp_path / "fresh")).count() == 5
    with pytest.raises(ValueError, match="unknown mode 'replace'"):
        ld.range(5).write_csv(str(tmp_path / "never"), mode="replace")
    assert not (tmp_path / "never").exists()  # nothing written


def test_filename_provider_and_options_functions(tmp_path):
    class Named(FilenameProvider):
        def get_filename_for_block(self, block, write_uuid, task_index, block_index):
            return f"part-{block_index:02d}-{block.num_rows}.parquet"

    ld.range(6, override_num_blocks=2).write_parquet(
        str(tmp_path / "p"),
        filename_provider=Named(),
        arrow_parquet_args_fn=lambda: {"compression": "gzip"},
        row_group_size=2,
        try_create_dir=True,  # Ray's, accepted
    )
    assert files(tmp_path / "p") == ["part-00-3.parquet", "part-01-3.parquet"]
    meta = pq.read_metadata(tmp_path / "p" / "part-00-3.parquet")
    assert meta.row_group(0).column(0).compression == "GZIP" and meta.num_row_groups == 2
    ld.range(3).write_csv(
        str(tmp_path / "c"),
        arrow_csv_args_fn=lambda: {"write_options": pcsv.WriteOptions(delimiter=";")},
    )
    assert (tmp_path / "c" / files(tmp_path / "c")[0]).read_text().splitlines()[0] == '"id"'
    ld.range(2).write_json(str(tmp_path / "j"), pandas_json_args_fn=lambda: {"date_unit": "s"})


@pytest.mark.parametrize("method", ["write_parquet", "write_csv", "write_json"])
def test_unknown_keywords_are_a_type_error_naming_lockstep_and_nothing_is_written(tmp_path, method):
    with pytest.raises(
        TypeError, match=rf"{method}\(\) got unexpected keyword arguments \['bogus'\]"
    ):
        getattr(ld.range(3), method)(str(tmp_path / "out"), bogus=1)
    assert not (tmp_path / "out").exists()
