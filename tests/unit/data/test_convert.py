"""Conversions between Arrow blocks and rows, numpy, pandas and user batches."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from lockstep.data._convert import (
    column_to_numpy,
    concat,
    from_batch,
    from_rows,
    to_numpy,
    to_pandas,
    to_rows,
)


def test_numpy_columns_keep_their_shapes():
    table = from_batch(
        {"a": np.arange(3), "t": np.ones((3, 2, 2)), "l": [[1, 2], [3, 4], [5, 6]]}, "t"
    )
    batch = to_numpy(table)
    assert batch["t"].shape == (3, 2, 2) and batch["l"].shape == (3, 2)
    ragged = column_to_numpy(pa.array([[1], [2, 3], None]))
    assert ragged.dtype == object and ragged[1].tolist() == [2, 3] and ragged[2] is None


def test_nulls_become_nan_or_none():
    batch = to_numpy(pa.table({"i": [1, None], "s": ["a", None]}))
    assert np.isnan(batch["i"][1]) and batch["s"][1] is None


def test_read_only_unless_writable():
    table = pa.table({"x": [1.0, 2.0]})
    assert not to_numpy(table)["x"].flags.writeable
    assert to_numpy(table, writable=True)["x"].flags.writeable


def test_pandas_round_trip_with_tensors_and_objects():
    rows = [{"v": np.eye(2) * i, "o": ("a", i), "x": float(i)} for i in range(3)]
    table = from_rows(rows, "t")
    frame = to_pandas(table)
    assert frame["v"][2].shape == (2, 2) and frame["o"][1] == ("a", 1)
    back = from_batch(frame, "t")
    np.testing.assert_array_equal(to_numpy(back)["v"], to_numpy(table)["v"])
    assert to_rows(back)[1]["o"] == ("a", 1)


def test_rows_round_trip():
    rows = [{"a": 1, "b": "x", "c": [1.0]}, {"a": None, "b": "y", "c": [2.0]}]
    assert to_rows(from_rows(rows, "t")) == rows


def test_torch_tensors_and_series_are_accepted_as_columns():
    table = from_batch({"t": torch.arange(3), "s": pd.Series([1.5, 2.5, 3.5])}, "t")
    assert table.column("t").to_pylist() == [0, 1, 2]
    assert table.column("s").to_pylist() == [1.5, 2.5, 3.5]


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"a": [1, 2], "b": [1]}, "different lengths"),
        ({"a": np.array(1.0)}, "scalar"),
        ({"a": np.float64(1.0)}, "not an array"),
        ({"a": 3}, "not an array"),
        ([1, 2], "not a batch"),
    ],
)
def test_bad_batches_are_clear_errors(batch, message):
    with pytest.raises(ValueError, match=message):
        from_batch(batch, "map_batches(f)")


def test_concat_skips_empty_blocks_and_widens_types():
    joined = concat(
        [pa.table({}), pa.table({"x": pa.array([None], pa.null())}), pa.table({"x": [1]})]
    )
    assert joined.column("x").to_pylist() == [None, 1]
