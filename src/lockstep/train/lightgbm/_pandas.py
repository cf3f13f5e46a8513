"""normalize_pandas_for_lightgbm: Arrow-backed pandas columns as LightGBM accepts them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def normalize_pandas_for_lightgbm(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with Arrow-backed numeric and boolean columns as numpy-nullable ones.

    LightGBM rejects Arrow-backed dtypes such as ``int64[pyarrow]``, which
    ``Dataset.to_pandas()`` may produce. Only ``pd.ArrowDtype`` columns change; other
    columns keep their buffers, and Arrow strings, decimals and timestamps are left as
    they are (LightGBM does not take them as features anyway).

    Example:
        >>> import pandas as pd, pyarrow as pa
        >>> df = pd.DataFrame({"a": pd.array([1, 2], dtype=pd.ArrowDtype(pa.int32())),
        ...                    "b": [0.5, 1.5]})
        >>> normalize_pandas_for_lightgbm(df).dtypes.astype(str).tolist()
        ['Int32', 'float64']
    """
    import pandas as pd
    import pyarrow as pa

    mapping = {}
    for column, dtype in df.dtypes.items():
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        arrow = dtype.pyarrow_dtype
        if pa.types.is_signed_integer(arrow):
            mapping[column] = f"Int{arrow.bit_width}"
        elif pa.types.is_unsigned_integer(arrow):
            mapping[column] = f"UInt{arrow.bit_width}"
        elif pa.types.is_floating(arrow):
            mapping[column] = f"Float{arrow.bit_width}"
        elif pa.types.is_boolean(arrow):
            mapping[column] = "boolean"
    return df.astype(mapping) if mapping else df
