"""Constructors and readers: Python objects, numpy, pandas, Arrow, torch, and files."""

import gzip
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest
import torch

import lockstep.data as ld


def test_from_items_of_dicts_and_of_plain_values():
    assert ld.from_items([{"a": 1}, {"a": 2, "b": "x"}]).take_all() == [
        {"a": 1, "b": None},
        {"a": 2, "b": "x"},
    ]
    assert ld.from_items([3, 4]).take_all() == [{"item": 3}, {"item": 4}]
    assert ld.from_items(range(10), override_num_blocks=3).num_blocks() == 3


def test_from_items_keeps_arrays_and_arbitrary_objects():
    items = [{"v": np.ones((2, 2)) * i, "obj": {1, i}} for i in range(3)]
    ds = ld.from_items(items)
    batch = ds.take_batch()
    assert batch["v"].shape == (3, 2, 2) and batch["v"][2, 1, 1] == 2
    assert [r["obj"] for r in ds.take_all()] == [{1, 0}, {1}, {1, 2}]


def test_from_pandas_one_block_per_frame():
    frames = [pd.DataFrame({"x": [1, 2]}, index=[7, 8]), pd.DataFrame({"x": [3]})]
    ds = ld.from_pandas(frames)
    assert ds.num_blocks() == 2
    pd.testing.assert_frame_equal(ds.to_pandas(), pd.DataFrame({"x": [1, 2, 3]}))
    assert ld.from_pandas(frames, override_num_blocks=3).num_blocks() == 3


def test_from_numpy_rows_along_the_first_axis():
    ds = ld.from_numpy([np.arange(6).reshape(3, 2), np.arange(2).reshape(1, 2)])
    np.testing.assert_array_equal(ds.take_batch(10)["data"], [[0, 1], [2, 3], [4, 5], [0, 1]])
    with pytest.raises(ValueError, match="one or more axes"):
        ld.from_numpy(np.float64(3.0))


def test_from_arrow_tables_and_batches():
    table = pa.table({"x": [1, 2]})
    assert ld.from_arrow([table, table.to_batches()[0]]).count() == 4


def test_from_torch_gives_item_rows():
    samples = torch.utils.data.TensorDataset(torch.arange(3.0), torch.tensor([0, 1, 0]))
    rows = ld.from_torch(samples).take_all()
    assert len(rows) == 3
    features, label = rows[1]["item"]
    assert float(features) == 1.0 and int(label) == 1
    ds = ld.from_torch(samples).map(lambda r: {"x": float(r["item"][0]), "y": int(r["item"][1])})
    assert ds.take_all() == [{"x": 0.0, "y": 0}, {"x": 1.0, "y": 1}, {"x": 2.0, "y": 0}]


def test_range_blocks():
    ds = ld.range(10, override_num_blocks=4)
    assert ds.num_blocks() == 4
    assert [r["id"] for r in ds.take_all()] == list(range(10))
    with pytest.raises(ValueError, match="non-negative"):
        ld.range(-1)


def test_read_csv_with_options_globs_and_compression(tmp_path):
    (tmp_path / "a.csv").write_text("x;y\n1;a\n2;b\n")
    with gzip.open(tmp_path / "b.csv.gz", "wt") as f:
        f.write("x;y\n3;c\n")
    (tmp_path / "_SUCCESS").write_text("")
    options = pcsv.ParseOptions(delimiter=";")
    ds = ld.read_csv(str(tmp_path / "*.csv"), parse_options=options)
    assert ds.take_all() == [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}]
    both = ld.read_csv(str(tmp_path), parse_options=options, file_extensions=["csv", "csv.gz"])
    assert both.sum("x") == 6 and both.count() == 3


def test_read_json_lines_and_arrays(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    (tmp_path / "b.json").write_text(json.dumps([{"x": 3}, {"x": 4}]))
    assert [r["x"] for r in ld.read_json(str(tmp_path)).take_all()] == [1, 2, 3, 4]


def test_read_text_lines(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\ntwo\r\nthree")
    assert [r["text"] for r in ld.read_text(str(tmp_path / "a.txt")).take_all()] == [
        "one",
        "",
        "two",
        "three",
    ]
    kept = ld.read_text(str(tmp_path), drop_empty_lines=True)
    assert [r["text"] for r in kept.take_all()] == ["one", "two", "three"]


def test_read_numpy_counts_from_the_header(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10).reshape(5, 2))
    np.save(tmp_path / "b.npy", np.arange(4).reshape(2, 2))
    ds = ld.read_numpy(str(tmp_path))
    assert ds._plan.known_counts() == [5, 2]  # known before reading
    np.testing.assert_array_equal(ds.take_batch(7)["data"][5], [0, 1])
    np.save(tmp_path / "c.npy", np.float64(1.0))
    with pytest.raises(ValueError, match="0-d array"):
        ld.read_numpy(str(tmp_path / "c.npy"))


def test_missing_paths_and_empty_directories_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*HINT"):
        ld.read_parquet(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=r"no files found.*HINT"):
        ld.read_csv(str(tmp_path))
    with pytest.raises(ValueError, match="different filesystems"):
        ld.read_csv([str(tmp_path), "memory://x/a.csv"])
    with pytest.raises(ValueError, match="no paths given"):
        ld.read_csv([])
    with pytest.raises(ValueError, match="pyarrow or fsspec filesystem"):
        ld.read_csv(str(tmp_path), filesystem=object())


def test_a_pyarrow_filesystem_can_be_given(tmp_path):
    import pyarrow.fs as pafs

    (tmp_path / "a.csv").write_text("x\n1\n")
    ds = ld.read_csv(str(tmp_path / "a.csv"), filesystem=pafs.LocalFileSystem())
    assert ds.take_all() == [{"x": 1}]


def _table_bytes(ds):
    return sum(s.table.nbytes for s in ds.materialize()._plan.sources)


def test_from_torch_stores_each_sample_at_its_own_size_not_its_whole_parent_tensor():
    images = torch.randn(2000, 1, 28, 28)
    ds = ld.from_torch(torch.utils.data.TensorDataset(images, torch.arange(2000)))
    assert _table_bytes(ds) <= 2 * images.numel() * 4
    image, label = ds.take(1)[0]["item"]
    assert torch.equal(image, images[0]) and int(label) == 0  # the samples come back as were
    assert image.untyped_storage().nbytes() == 28 * 28 * 4


def test_in_memory_constructors_and_map_store_arrays_at_their_natural_size():
    images = np.random.default_rng(0).random((500, 28, 28), dtype=np.float32)
    raw = images.nbytes
    assert _table_bytes(ld.from_numpy(images)) <= 2 * raw
    assert _table_bytes(ld.from_items([{"image": a, "y": 1} for a in images])) <= 2 * raw
    mapped = ld.range(500).map(lambda row: {"image": images[row["id"]]})
    assert _table_bytes(mapped) <= 2 * raw


def test_from_huggingface_takes_the_arrow_table_the_dataset_holds():
    import datasets

    hf = datasets.Dataset.from_dict({"text": ["a", "b", "c", "d"], "label": [0, 1, 0, 1]})
    ds = ld.from_huggingface(hf, override_num_blocks=2)
    assert ds.num_blocks() == 2 and ds.take_all()[1] == {"text": "b", "label": 1}
    held = hf.data.table.column("text").chunks[0].buffers()[2].address
    mine = ld.from_huggingface(hf)._plan.sources[0].table.column("text").chunks[0]
    assert mine.buffers()[2].address == held  # the same memory, not a copy per row
    selected = hf.shuffle(seed=0).select([0, 1])  # an index mapping over the table
    assert ld.from_huggingface(selected).take_all() == selected.to_list()
    streamed = ld.from_huggingface(hf.to_iterable_dataset())
    assert streamed.take_all() == hf.to_list()
    with pytest.raises(ValueError, match="takes one split"):
        ld.from_huggingface(datasets.DatasetDict({"train": hf}))


# After Ray's python/ray/data/tests/datasource/test_json.py: files pyarrow's reader cannot
# parse are read as Ray reads them.


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_json_lines_holding_arrays_become_numbered_columns(tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [["ray", "rocks", "hello"], ["oh", "no"]])
    rows = ld.read_json(path, lines=True).take_all()
    assert rows == [{"0": "ray", "1": "rocks", "2": "hello"}, {"0": "oh", "1": "no", "2": None}]


def test_json_lines_whose_nested_types_change_keep_each_value(tmp_path):
    data = [{"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": {"hello": "world"}}}]
    assert ld.read_json(write_lines(tmp_path / "m.jsonl", data), lines=True).take_all() == data


@pytest.mark.parametrize("block_size", [1, -1])
def test_json_block_sizes_pyarrow_refuses_are_read_as_ray_reads_them(tmp_path, block_size):
    import pyarrow.json as pajson

    data = [{"one": i, "two": s} for i, s in ((1, "a"), (2, "b"), (3, "c"))]
    path = write_lines(tmp_path / "t.json", data)
    ds = ld.read_json(path, read_options=pajson.ReadOptions(block_size=block_size))
    assert ds.take_all() == data


def test_a_zero_json_block_size_fails_as_in_ray(tmp_path):
    import pyarrow.json as pajson

    path = write_lines(tmp_path / "t.json", [{"one": 1}, {"one": 2}])
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        ld.read_json(path, read_options=pajson.ReadOptions(block_size=0)).take_all()


def test_json_open_stream_args_and_an_empty_compressed_file(tmp_path):
    with gzip.open(tmp_path / "full.json.gz", "wt") as f:
        f.write(json.dumps({"col1": "value1"}) + "\n")
    with gzip.open(tmp_path / "empty.json.gz", "wt"):
        pass
    paths = [str(tmp_path / "full.json.gz"), str(tmp_path / "empty.json.gz")]
    ds = ld.read_json(paths, arrow_open_stream_args={"compression": "gzip"})
    assert ds.take_all() == [{"col1": "value1"}]
