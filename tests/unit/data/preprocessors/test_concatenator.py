"""Concatenator against numpy's column_stack."""

import numpy as np
import pytest

import lockstep.data as ld
from lockstep.data.preprocessors import (
    Concatenator,
)


def test_concatenator_stacks_columns_like_numpy():
    ds = ld.from_items([{"a": i, "b": 2.0 * i, "v": [i, -i], "y": "keep"} for i in range(4)])
    out = Concatenator(["a", "b", "v"], output_column_name="x", flatten=True, dtype=np.float32)
    batch = out.transform(ds).take_batch(4)
    assert sorted(batch) == ["x", "y"]
    expected = np.column_stack([np.arange(4), 2.0 * np.arange(4), np.arange(4), -np.arange(4)])
    np.testing.assert_array_equal(batch["x"], expected.astype(np.float32))
    with pytest.raises(ValueError, match="flatten=True"):
        Concatenator(["v"]).transform(ds).take_all()
    with pytest.raises(ValueError, match=r"no columns \['nope'\]"):
        Concatenator(["a", "nope"], raise_if_missing=True).transform(ds).take_all()
    assert Concatenator(["a", "nope"]).transform(ds).take_batch(1)["concat_out"].shape == (1, 1)
