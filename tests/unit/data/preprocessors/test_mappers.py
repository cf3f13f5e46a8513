"""BatchMapper, FunctionTransformer and Repartitioner."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from lockstep.data.preprocessors import (
    BatchMapper,
    FunctionTransformer,
    Repartitioner,
)
from tests.unit.data.strategies import SETTINGS


@settings(**SETTINGS)
@given(st.lists(st.integers(-100, 100), min_size=1, max_size=20))
def test_batch_mapper_and_function_transformer_apply_the_function(values):
    ds = ld.from_items([{"x": v} for v in values])
    mapper = BatchMapper(lambda df: df.assign(x=df["x"] * 3), batch_format="pandas", batch_size=3)
    assert mapper.transform(ds).to_pandas()["x"].tolist() == [3 * v for v in values]
    function = FunctionTransformer(lambda b: {"x": np.abs(b["x"])}, batch_format="numpy")
    assert function.transform(ds).to_pandas()["x"].tolist() == [abs(v) for v in values]
    frame = function.transform_batch(pd.DataFrame({"x": values}))
    assert frame["x"].tolist() == [abs(v) for v in values]


def test_repartitioner_changes_blocks_not_rows():
    prep = Repartitioner(num_partitions=3)
    ds = prep.transform(ld.range(10))
    assert ds.num_blocks() == 3 and [r["id"] for r in ds.take_all()] == list(range(10))
    assert prep.transform_batch(pd.DataFrame({"id": [1]}))["id"].tolist() == [1]
    with pytest.raises(ValueError, match="positive int"):
        Repartitioner(num_partitions=0)
