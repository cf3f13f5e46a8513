"""Writers: one file per block, read back the same, local or fsspec URLs."""

import fsspec
import pyarrow.compute as pc
import pytest

import lockstep.data as ld


@pytest.mark.parametrize(
    ("write", "read"),
    [
        ("write_parquet", ld.read_parquet),
        ("write_csv", ld.read_csv),
        ("write_json", ld.read_json),
    ],
)
def test_round_trip(tmp_path, write, read):
    ds = ld.from_items([{"x": i, "s": f"v{i}"} for i in range(10)], override_num_blocks=3)
    getattr(ds.filter(expr=pc.field("x") != 4), write)(str(tmp_path / "out"))
    files = sorted((tmp_path / "out").iterdir())
    assert len(files) == 3
    back = read(str(tmp_path / "out"))
    assert sorted((r["x"], r["s"]) for r in back.take_all()) == [
        (i, f"v{i}") for i in range(10) if i != 4
    ]


def test_writing_to_an_fsspec_url():
    fs = fsspec.filesystem("memory")
    try:
        ld.range(4).write_json("memory://lockstep-write-test/out")
        assert len(fs.ls("/lockstep-write-test/out")) == 1
        assert ld.read_json("memory://lockstep-write-test/out").sum("id") == 6
    finally:
        fs.rm("/lockstep-write-test", recursive=True)


def test_parquet_writer_options_pass_through(tmp_path):
    ld.range(10).write_parquet(str(tmp_path), row_group_size=3)
    ds = ld.read_parquet(str(tmp_path))
    assert ds._sources[0].row_group_rows == (3, 3, 3, 1)
