"""Parquet: counts from footers, splits at row groups, each part reads only its own files,
column and filter pushdown, and streaming with bounded memory."""

import os
import pickle

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem
from hypothesis import given, settings

import lockstep.data as ld
from tests.unit.data.strategies import SETTINGS, blocks, oracle


class CountingFileSystem(LocalFileSystem):
    """The local disk, recording every file opened."""

    def __init__(self, **kwargs):
        super().__init__(skip_instance_cache=True, **kwargs)
        self.opened: list[str] = []

    def _open(self, path, mode="rb", **kwargs):
        self.opened.append(path)
        return super()._open(path, mode, **kwargs)


def write_files(directory, num_files, rows_per_file, row_group_size=None):
    for i in range(num_files):
        ids = np.arange(i * rows_per_file, (i + 1) * rows_per_file)
        table = pa.table({"row": ids, "x": ids * 0.5, "y": ids % 7})
        pq.write_table(table, directory / f"part-{i:03d}.parquet", row_group_size=row_group_size)


@pytest.fixture
def files(tmp_path):
    write_files(tmp_path, num_files=4, rows_per_file=100, row_group_size=25)
    return tmp_path


def test_counts_and_schema_come_from_the_footers_without_reading_data(files):
    fs = CountingFileSystem()
    ds = ld.read_parquet(str(files), filesystem=fs)
    opened_for_footers = len(fs.opened)
    assert ds.count() == 400
    assert ds.schema().names == ["row", "x", "y"]
    assert [p.count() for p in ds.split(3, equal=True)] == [133, 133, 133]
    assert len(fs.opened) == opened_for_footers == 4  # one footer read per file, nothing since


def test_each_part_reads_only_its_own_files(files):
    fs = CountingFileSystem()
    parts = ld.read_parquet(str(files), filesystem=fs).split(2, equal=True)
    assert [len(p.input_files()) for p in parts] == [2, 2]
    for part in parts:
        fs.opened.clear()
        rows = [r["row"] for r in part.take_all()]
        assert sorted(set(fs.opened)) == sorted(part.input_files())
        assert len(rows) == 200
    assert not set(parts[0].input_files()) & set(parts[1].input_files())


def test_a_split_inside_a_file_takes_only_the_row_groups_it_needs(tmp_path):
    write_files(tmp_path, num_files=1, rows_per_file=100, row_group_size=25)
    parts = ld.read_parquet(str(tmp_path)).split(4, equal=True)
    assert [p._sources[0].row_groups for p in parts] == [(0,), (1,), (2,), (3,)]
    parts = ld.read_parquet(str(tmp_path)).split(3, equal=True)
    assert [p._sources[0].row_groups for p in parts] == [(0, 1), (1, 2), (2, 3)]
    got = [[r["row"] for r in p.take_all()] for p in parts]
    assert got == [list(range(0, 33)), list(range(33, 66)), list(range(66, 99))]


def test_a_shard_pickles_small_and_reads_in_a_new_process_the_same(files):
    part = ld.read_parquet(str(files)).map(lambda r: {"double": r["row"] * 2}).split(4)[3]
    import cloudpickle

    data = cloudpickle.dumps(part)
    assert len(data) < 5_000  # a description, not the rows
    assert [r["double"] for r in pickle.loads(data).take(2)] == [600, 602]


def test_columns_and_filter_are_pushed_to_pyarrow(files):
    ds = ld.read_parquet(str(files), columns=["x", "row"], filter=pc.field("y") == 3)
    df = pd.concat([pd.read_parquet(p) for p in sorted(files.iterdir())])
    expected = df[df["y"] == 3][["x", "row"]]
    assert ds.columns() == ["x", "row"]
    assert ds.to_pandas()["row"].tolist() == expected["row"].tolist()
    listed = ld.read_parquet(str(files), filter=[("row", "<", 3)])
    assert [r["row"] for r in listed.take_all()] == [0, 1, 2]
    assert listed.count() == 3
    parts = listed.split(3, equal=True)
    assert [[r["row"] for r in p.take_all()] for p in parts] == [[0], [1], [2]]


def test_select_columns_on_files_reads_only_those_columns(files):
    ds = ld.read_parquet(str(files)).select_columns(["y"])
    assert ds._sources[0].columns == ("y",)  # pushed into the reader, not a transform
    assert ds.take(1) == [{"y": 0}]


def test_bad_columns_and_filters_are_clear_errors(files):
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in .*HINT"):
        ld.read_parquet(str(files), columns=["nope"])
    with pytest.raises(ValueError, match=r"filter.*HINT"):
        ld.read_parquet(str(files), filter="row > 3")


def test_many_files_stream_with_memory_bounded_by_a_file(tmp_path):
    write_files(tmp_path, num_files=20, rows_per_file=20_000)
    file_bytes = pq.read_table(tmp_path / "part-000.parquet").nbytes
    ds = ld.read_parquet(str(tmp_path))
    baseline = pa.total_allocated_bytes()
    peak = rows = 0
    for batch in ds.iter_torch_batches(batch_size=1000):
        rows += len(batch["row"])
        peak = max(peak, pa.total_allocated_bytes() - baseline)
    assert rows == 400_000
    # The data is 20 files; what is alive at once stays under three: the file batches
    # come from, the next one read ahead (prefetch) and the last one, which a slow
    # consumer on a loaded machine may not have let go yet.
    assert peak < 3 * file_bytes, (peak, file_bytes)


@settings(**SETTINGS)
@given(blocks())
def test_files_round_trip_like_the_pandas_oracle(parts):
    import os
    import tempfile

    expected = oracle(parts)
    with tempfile.TemporaryDirectory() as d:
        ld.from_arrow(parts).write_parquet(d)
        if expected.empty:  # empty blocks write no file
            assert os.listdir(d) == []
            return
        ds = ld.read_parquet(d)
        got = ds.to_pandas().sort_values("row").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
        assert ds.count() == len(expected)
        assert len(ds.input_files()) == sum(1 for p in parts if p.num_rows)


def test_tensor_columns_survive_parquet(tmp_path):
    ld.from_numpy(np.arange(24.0).reshape(4, 3, 2)).write_parquet(tmp_path)
    batch = ld.read_parquet(str(tmp_path)).take_batch(4)
    np.testing.assert_array_equal(batch["data"], np.arange(24.0).reshape(4, 3, 2))


def test_fsspec_urls_work_for_reading_and_writing():
    fs = fsspec.filesystem("memory")
    try:
        ld.range(10, override_num_blocks=2).write_parquet("memory://lockstep-data-test/out")
        ds = ld.read_parquet("memory://lockstep-data-test/out")
        assert all(f.startswith("memory://") for f in ds.input_files())
        assert sorted(r["id"] for r in ds.take_all()) == list(range(10))
        part = pickle.loads(pickle.dumps(ds.split(2, equal=True)[1]))
        assert part.count() == 5 and len(part.take_all()) == 5
    finally:
        fs.rm("/lockstep-data-test", recursive=True)


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7])
def test_split_of_files_matches_slicing_the_concatenated_table(files, num_splits):
    ds = ld.read_parquet(str(files))
    whole = [r["row"] for r in ds.take_all()]
    size = len(whole) // num_splits
    parts = ds.split(num_splits, equal=True)
    for i, part in enumerate(parts):
        assert [r["row"] for r in part.take_all()] == whole[i * size : (i + 1) * size]


def test_s3_urls_through_fsspec(s3_endpoint):
    ld.range(20, override_num_blocks=2).write_parquet("s3://lockstep-runs/data")
    ds = ld.read_parquet("s3://lockstep-runs/data")
    assert ds.count() == 20 and all(f.startswith("s3://") for f in ds.input_files())
    parts = [pickle.loads(pickle.dumps(p)) for p in ds.split(2, equal=True)]
    assert [sorted(r["id"] for r in p.take_all()) for p in parts] == [
        list(range(10)),
        list(range(10, 20)),
    ]


# After Ray's python/ray/data/tests/datasource/test_parquet.py.


def small_files(tmp_path, count):
    paths = []
    for i in range(count):
        path = str(tmp_path / f"f{i}.parquet")
        pq.write_table(pa.table({"col1": range(10 * i, 10 * i + 10)}), path)
        paths.append(path)
    return paths


def test_a_seeded_file_shuffle_gives_every_dataset_the_same_orders(tmp_path):
    paths = small_files(tmp_path, 6)
    config = ld.FileShuffleConfig(seed=42)
    first, second = ld.read_parquet(paths, shuffle=config), ld.read_parquet(paths, shuffle=config)
    passes = [[r["col1"] for r in first.take_all()] for _ in range(4)]
    assert passes == [[r["col1"] for r in second.take_all()] for _ in range(4)]
    assert len({tuple(p) for p in passes}) > 1  # reseeded after each pass
    assert all(sorted(p) == list(range(60)) for p in passes)
    fixed = ld.FileShuffleConfig(seed=42, reseed_after_execution=False)
    once = ld.read_parquet(paths, shuffle=fixed)
    assert once.take_all() == once.take_all() == ld.read_parquet(paths, shuffle=fixed).take_all()
    with pytest.raises(ValueError, match="Seed must be an integer"):
        ld.FileShuffleConfig(seed="x")


def test_read_parquet_takes_rays_pass_through_options(tmp_path):
    paths = small_files(tmp_path, 2)
    assert ld.read_parquet(paths, batch_size=10, concurrency=2, dataset_kwargs={}).count() == 20
    with pytest.raises(ValueError, match="'partitioning' parameter isn't supported"):
        ld.read_parquet(paths, dataset_kwargs={"partitioning": "hive"})


def test_include_paths_comes_with_a_column_projection(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"animals": ["cat", "dog"], "id": [1, 2]}), path)
    ds = ld.read_parquet(path, columns=["id"], include_paths=True)
    assert ds.schema().names == ["id", "path"]
    assert ds.take_all() == [{"id": 1, "path": path}, {"id": 2, "path": path}]


def test_a_partition_column_stored_in_the_file_keeps_the_files_values(tmp_path):
    (tmp_path / "year=2024").mkdir()
    pq.write_table(pa.table({"data": [0], "year": [2023]}), tmp_path / "year=2024" / "a.parquet")
    assert ld.read_parquet(str(tmp_path)).take_all() == [{"data": 0, "year": 2023}]


def test_write_options_as_ray_takes_them(tmp_path):
    ld.range(1).write_parquet(str(tmp_path / "s"), schema=pa.schema({"id": pa.float32()}))
    assert pq.read_table(tmp_path / "s").schema == pa.schema({"id": pa.float32()})
    ld.range(10_000).repartition(1).write_parquet(
        str(tmp_path / "g"),
        arrow_parquet_args_fn=lambda: {"row_group_size": 1000},
        row_group_size=5000,
    )
    (name,) = os.listdir(tmp_path / "g")
    assert pq.ParquetFile(tmp_path / "g" / name).num_row_groups == 10  # the function wins
    ld.from_items([]).write_parquet(str(tmp_path / "none"))
    assert not (tmp_path / "none").exists()  # no rows, no directory


@pytest.mark.parametrize(
    ("flavor", "partitioning"),
    [
        ("hive", "hive"),
        (None, pads.partitioning(pa.schema([pa.field("grp", pa.int64())]))),
        (
            "filename",
            pads.partitioning(pa.schema([pa.field("grp", pa.int64())]), flavor="filename"),
        ),
    ],
)
def test_partitioning_flavors_read_back_with_pyarrow(tmp_path, flavor, partitioning):
    ds = ld.range(100).add_column("grp", lambda df: df["id"] % 10)
    ds.write_parquet(str(tmp_path), partition_cols=["grp"], partitioning_flavor=flavor)
    df = pq.ParquetDataset(str(tmp_path), partitioning=partitioning).read_pandas().to_pandas()
    assert len(df) == 100 and df["grp"].nunique() == 10
