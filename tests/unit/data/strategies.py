"""Hypothesis strategies for the data tests: random tables with nulls, cut into blocks
(some of them empty), and helpers to compare a dataset with a pandas oracle."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st

import lockstep.data as ld

# The number of examples comes from the Hypothesis profile (conftest.py): 40 by default,
# fewer with --hypothesis-profile=fast.
SETTINGS = {"deadline": None}


@st.composite
def tables(draw, min_rows: int = 0, max_rows: int = 40) -> pa.Table:
    """Columns: ``i`` int64 and ``f`` float64 and ``s`` string, each with nulls; ``k`` a
    small non-null int64 key; ``row`` the row number, to check order and coverage."""
    n = draw(st.integers(min_rows, max_rows))

    def column(values):
        return draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n))

    return pa.table(
        {
            "row": pa.array(range(n), pa.int64()),
            "i": pa.array(column(st.integers(-1000, 1000)), pa.int64()),
            "f": pa.array(column(st.floats(-1e3, 1e3, allow_nan=False)), pa.float64()),
            "s": pa.array(column(st.sampled_from(["a", "b", "c", "d"])), pa.string()),
            "k": pa.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), pa.int64()),
        }
    )


@st.composite
def blocks(draw, min_rows: int = 0, max_rows: int = 40) -> list[pa.Table]:
    """A table cut into 1-5 blocks at random points; equal points make empty blocks."""
    table = draw(tables(min_rows, max_rows))
    cuts = sorted(draw(st.lists(st.integers(0, table.num_rows), max_size=4)))
    bounds = [0, *cuts, table.num_rows]
    return [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


def dataset(parts: list[pa.Table]) -> ld.Dataset:
    return ld.from_arrow(parts)


def oracle(parts: list[pa.Table]) -> pd.DataFrame:
    """The rows as pandas sees them."""
    return pa.concat_tables(parts).to_pandas()


def same_values(a, b) -> bool:
    """Equal, treating None and NaN as the same missing value and floats within 1e-9."""
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def assert_frames_equal(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same columns and rows, values compared with :func:`same_values`."""
    assert list(actual.columns) == list(expected.columns)
    assert len(actual) == len(expected)
    for name in expected.columns:
        got, want = actual[name].tolist(), expected[name].tolist()
        bad = [
            (i, x, y)
            for i, (x, y) in enumerate(zip(got, want, strict=True))
            if not same_values(x, y)
        ]
        assert not bad, f"column {name}: (row, actual, expected) {bad[:5]}"
