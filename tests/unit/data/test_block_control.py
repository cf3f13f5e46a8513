"""override_num_blocks= on every constructor and reader; parallelism= as Ray's deprecated alias."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import lockstep.data as ld


@pytest.fixture
def files(tmp_path):
    for i in range(4):
        ids = list(range(i * 5, (i + 1) * 5))
        pq.write_table(pa.table({"id": ids}), tmp_path / f"{i}.parquet")
        pd.DataFrame({"id": ids}).to_csv(tmp_path / f"{i}.csv", index=False)
        pd.DataFrame({"id": ids}).to_json(tmp_path / f"{i}.json", orient="records", lines=True)
        (tmp_path / f"{i}.txt").write_text("\n".join(map(str, ids)))
        np.save(tmp_path / f"{i}.npy", np.array(ids))
    return tmp_path


CONSTRUCTORS = {
    "from_items": lambda **kw: ld.from_items([{"id": i} for i in range(20)], **kw),
    "from_pandas": lambda **kw: ld.from_pandas(pd.DataFrame({"id": range(20)}), **kw),
    "from_numpy": lambda **kw: ld.from_numpy(np.arange(20), **kw),
    "from_arrow": lambda **kw: ld.from_arrow(pa.table({"id": range(20)}), **kw),
    "from_torch": lambda **kw: ld.from_torch(
        torch.utils.data.TensorDataset(torch.arange(20)), **kw
    ),
    "range": lambda **kw: ld.range(20, **kw),
    "range_tensor": lambda **kw: ld.range_tensor(20, **kw),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_every_constructor_makes_the_blocks_asked_for_and_never_more_than_rows(name):
    make = CONSTRUCTORS[name]
    ds = make(override_num_blocks=4)
    assert ds.num_blocks() == 4 and ds.count() == 20
    # from_pandas repartitions as Ray does: exactly the blocks asked for, some empty
    assert make(override_num_blocks=50).num_blocks() == (50 if name == "from_pandas" else 20)
    with pytest.warns(DeprecationWarning, match="parallelism"):
        assert make(parallelism=3).num_blocks() == 3
    with pytest.raises(ValueError, match="override_num_blocks must be a positive int"):
        make(override_num_blocks=0)


@pytest.mark.parametrize("reader", ["parquet", "numpy"])
def test_readers_with_row_counts_in_metadata_cut_by_rows_without_reading(files, reader):
    read = getattr(ld, f"read_{reader}")
    ds = read(str(files), override_num_blocks=2)
    assert ds.num_blocks() == 2 and [p.count() for p in ds.split(2)] == [10, 10]
    assert sorted(
        int(np.ravel(r["id" if reader == "parquet" else "data"])[0]) for r in ds.take_all()
    ) == list(range(20))
    assert read(str(files), override_num_blocks=8).num_blocks() == 8
    assert read(str(files), override_num_blocks=500).num_blocks() == 20


@pytest.mark.parametrize("reader", ["csv", "json", "text"])
def test_other_readers_group_files_at_most_one_block_per_file(files, reader):
    read = getattr(ld, f"read_{reader}")
    paths = str(files / f"*.{'txt' if reader == 'text' else reader}")
    ds = read(paths, override_num_blocks=2)
    assert ds.num_blocks() == 2 and ds.count() == 20
    assert read(paths, override_num_blocks=8).num_blocks() == 4
    with pytest.warns(DeprecationWarning):
        assert read(paths, parallelism=3).num_blocks() == 3


def test_an_empty_dataset_has_one_block():
    assert ld.range(0, override_num_blocks=4).num_blocks() == 1
    assert ld.from_items([], override_num_blocks=4).num_blocks() == 1


def test_from_pandas_of_one_row_in_two_blocks_has_two_blocks():
    # after Ray's python/ray/data/tests/datasource/test_pandas.py
    ds = ld.from_pandas([pd.DataFrame({"number": [0]})], override_num_blocks=2)
    assert ds.materialize().num_blocks() == 2 and ds.take_all() == [{"number": 0}]
