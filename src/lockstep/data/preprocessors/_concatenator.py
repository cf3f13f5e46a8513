"""Concatenator: several columns into one vector column (the model's input)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lockstep.data._convert import column_from_values, column_to_numpy
from lockstep.data.preprocessors._base import ArrowPreprocessor, check_columns


class Concatenator(ArrowPreprocessor):
    """Replace ``columns`` by one column holding, per row, the vector of their values.

    Stateless. A numpy batch of the result is a ``(rows, len(columns))`` array, ready for a
    model.

    Args:
        columns: The columns to concatenate, in this order.
        output_column_name: The new column's name.
        dtype: The numpy dtype of the result (by default, the common type of the columns).
        raise_if_missing: Raise when a column is absent from a batch, instead of skipping it.
        flatten: Allow columns that hold arrays; their values are flattened into the vector.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"a": 1.0, "b": 2.0, "y": 0}])
        >>> Concatenator(["a", "b"], output_column_name="x").transform(ds).take_batch()["x"]
        array([[1., 2.]])
    """

    _is_fittable = False

    def __init__(
        self,
        columns: Sequence[str],
        output_column_name: str = "concat_out",
        dtype: Any = None,
        raise_if_missing: bool = False,
        flatten: bool = False,
    ):
        self.columns = check_columns(columns, "Concatenator")
        self.output_column_name = output_column_name
        self.dtype = np.dtype(dtype) if dtype is not None else None
        self.raise_if_missing = raise_if_missing
        self.flatten = flatten

    def _transform_arrow(self, table: Any) -> Any:
        present = [c for c in self.columns if c in table.column_names]
        missing = [c for c in self.columns if c not in present]
        if missing and (self.raise_if_missing or not present):
            raise ValueError(
                f"Concatenator: the batch has no columns {missing} (it has "
                f"{table.column_names}). HINT: concatenate only columns the data has"
            )
        parts = []
        for name in present:
            values = column_to_numpy(table.column(name))
            if values.ndim > 1 and not self.flatten:
                raise ValueError(
                    f"Concatenator: column {name!r} holds arrays of shape {values.shape[1:]}. "
                    "HINT: pass flatten=True to flatten them into the vector"
                )
            parts.append(values.reshape(len(values), -1))
        matrix = np.concatenate(parts, axis=1)
        if self.dtype is not None:
            matrix = matrix.astype(self.dtype)
        return table.drop_columns(present).append_column(
            self.output_column_name, column_from_values(matrix)
        )
