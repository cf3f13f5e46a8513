"""Random numeric and categorical data for the preprocessor tests, cut into blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

import lockstep.data as ld

# Values on a grid of eighths: exact in binary, so a column is constant exactly or not at all.
VALUES = st.integers(-4000, 4000).map(lambda v: v / 8)


@st.composite
def numeric_blocks(draw, missing: bool = True, min_rows: int = 1) -> list[pa.Table]:
    """Columns ``a`` and ``b`` of floats (with nulls and NaN when ``missing``), in blocks."""
    n = draw(st.integers(min_rows, 30))
    value = st.one_of(st.none(), st.just(float("nan")), VALUES) if missing else VALUES
    columns = {c: draw(st.lists(value, min_size=n, max_size=n)) for c in ("a", "b")}
    table = pa.table({c: pa.array(v, pa.float64()) for c, v in columns.items()})
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    bounds = [0, *cuts, n]
    return [table.slice(x, y - x) for x, y in itertools.pairwise(bounds)]


@st.composite
def category_blocks(draw) -> list[pa.Table]:
    """Column ``c`` of a few strings (no nulls), in blocks."""
    n = draw(st.integers(1, 30))
    values = draw(st.lists(st.sampled_from(["x", "y", "z", "w"]), min_size=n, max_size=n))
    table = pa.table({"c": values})
    cut = draw(st.integers(0, n))
    return [table.slice(0, cut), table.slice(cut)]


def matrix(parts: list[pa.Table], columns: list[str]) -> np.ndarray:
    """The columns as a float matrix, nulls as NaN (what scikit-learn is given)."""
    table = pa.concat_tables(parts)
    return np.column_stack([table.column(c).to_numpy(zero_copy_only=False) for c in columns])


def transformed(prep, parts: list[pa.Table], columns: list[str]) -> np.ndarray:
    out = prep.fit_transform(ld.from_arrow(parts)).to_arrow()
    return np.column_stack([out.column(c).to_numpy(zero_copy_only=False) for c in columns])
