"""Conversions between Arrow blocks and what user code sees: rows, numpy, pandas, pyarrow.

Blocks are always ``pyarrow.Table``. Multi-dimensional numpy columns are stored with Arrow's
canonical fixed-shape tensor type, arbitrary Python objects with :mod:`._objects`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._objects import array_to_objects, is_object_type, objects_to_array

if TYPE_CHECKING:
    import pandas as pd

# None: the blocks as they are (Arrow tables), as Ray's batch_format=None; "native" is Ray
# 2.0's name for the same
BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow", None, "native")
EMPTY = pa.table({})


def check_batch_format(batch_format: str | None, where: str) -> str | None:
    """Return ``batch_format`` if it is one lockstep knows, else raise a ValueError."""
    if batch_format not in BATCH_FORMATS:
        raise ValueError(
            f"{where}: unknown batch_format {batch_format!r}. "
            'HINT: use "numpy" (dict of arrays), "pandas" (DataFrame) or "pyarrow" (Table)'
        )
    return batch_format


def to_format(table: Any, batch_format: str | None, *, writable: bool = False) -> Any:
    """``table`` as a batch in ``batch_format`` ("default" means numpy, as in Ray)."""
    if batch_format in ("pyarrow", None, "native"):
        return table
    if batch_format == "pandas":
        return to_pandas(table)
    return to_numpy(table, writable=writable)


def to_numpy(table: Any, *, writable: bool = False) -> dict[str, np.ndarray[Any, Any]]:
    """A dict of column name to numpy array; read-only views unless ``writable``."""
    return {
        name: column_to_numpy(table.column(i), writable=writable)
        for i, name in enumerate(table.column_names)
    }


def column_to_numpy(column: Any, *, writable: bool = False) -> np.ndarray[Any, Any]:
    """One column as a numpy array: tensors keep their shape, nulls become NaN or None."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column], type=column.type)
    array = _column_to_numpy(column)
    if writable and not array.flags.writeable:
        array = array.copy()
    return array


def _column_to_numpy(column: Any) -> np.ndarray[Any, Any]:
    kind = column.type
    if is_object_type(kind):
        return array_to_objects(column)
    if isinstance(kind, pa.FixedShapeTensorType):
        if column.num_chunks == 0:
            return np.empty((0, *kind.shape), dtype=kind.value_type.to_pandas_dtype())
        return np.asarray(column.combine_chunks().to_numpy_ndarray())
    if pa.types.is_dictionary(kind):
        return _column_to_numpy(pc.cast(column, kind.value_type))
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _lists_to_numpy(column)
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return object_array(column.to_pylist())
    return np.asarray(column.to_numpy(zero_copy_only=False))


def _lists_to_numpy(column: Any) -> np.ndarray[Any, Any]:
    """Lists of one length become a 2-D (or deeper) array; ragged ones an array of arrays."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if len(array) and array.null_count == 0:
        lengths = pc.list_value_length(array)
        low, high = pc.min_max(lengths).values()
        if low.as_py() == high.as_py():
            values = _column_to_numpy(pa.chunked_array([pc.list_flatten(array)]))
            return values.reshape(len(array), low.as_py(), *values.shape[1:])
    return object_array([None if v is None else np.asarray(v) for v in array.to_pylist()])


def to_pandas(table: Any) -> pd.DataFrame:
    """The block as a DataFrame; objects and n-d tensors are kept per row, as in Ray."""
    special = [n for n, f in zip(table.column_names, table.schema, strict=True) if _per_row(f)]
    frame = table.drop_columns(special).to_pandas() if special else table.to_pandas()
    for name in special:
        frame[name] = object_array(list(column_to_numpy(table.column(name))))
    if special:
        frame = frame[table.column_names]
    result: pd.DataFrame = frame
    return result


def _per_row(field: Any) -> bool:
    """Columns pandas cannot take as they are: objects, and tensors of two or more axes."""
    kind = field.type
    return is_object_type(kind) or (
        isinstance(kind, pa.FixedShapeTensorType) and len(kind.shape) > 1
    )


def object_array(values: Sequence[Any]) -> np.ndarray[Any, Any]:
    """A 1-D object array of ``values``, even when they are arrays of one shape."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def from_batch(batch: Any, where: str) -> Any:
    """A user's batch (dict of arrays, DataFrame, pyarrow Table) as an Arrow Table."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if type(batch).__name__ == "DataFrame" and hasattr(batch, "columns"):
        return _from_pandas(batch)
    if isinstance(batch, Mapping):
        return from_columns(batch, where)
    raise ValueError(
        f"{where} returned a {type(batch).__name__}, which is not a batch. HINT: return a "
        "dict of column name to array, a pandas DataFrame or a pyarrow Table"
    )


def _from_pandas(frame: pd.DataFrame) -> Any:
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        # 2-D arrays or mixed objects in a column: convert column by column
        return from_columns({str(k): frame[k].tolist() for k in frame.columns}, "DataFrame")
    return table.replace_schema_metadata(None)


def from_columns(columns: Mapping[str, Any], where: str) -> Any:
    """An Arrow Table from a mapping of column name to array-like values of equal length."""
    arrays = {
        str(name): column_from_values(values, where, name) for name, values in columns.items()
    }
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"{where}: columns have different lengths {lengths}. "
            "HINT: every column of a batch needs one value per row"
        )
    return pa.table(arrays) if arrays else EMPTY


def column_from_values(values: Any, where: str = "batch", name: str = "") -> Any:
    """An Arrow array for one column given as numpy, a list, a Series, a tensor or Arrow."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    if hasattr(values, "detach") and hasattr(values, "numpy"):  # a torch tensor
        values = values.detach().cpu().numpy()
    if type(values).__name__ == "Series":
        values = values.to_numpy()
    if isinstance(values, np.ndarray):
        return _from_ndarray(values, where, name)
    if isinstance(values, Sequence | Iterable) and not isinstance(values, str | bytes):
        return _from_list(list(values))
    raise ValueError(
        f"{where}: column {name!r} is a {type(values).__name__}, not an array. "
        "HINT: give each column as a list or a numpy array with one value per row"
    )


def _from_ndarray(values: np.ndarray[Any, Any], where: str, name: str) -> Any:
    if values.ndim == 0:
        raise ValueError(
            f"{where}: column {name!r} is a scalar. HINT: give one value per row, e.g. "
            "np.full(num_rows, value)"
        )
    if values.ndim > 1:
        if values.dtype == object:
            return _from_list(list(values))
        return _tensor_array(values)
    if values.dtype == object:
        return _from_list(list(values))
    return pa.array(values)


def _tensor_array(values: np.ndarray[Any, Any]) -> Any:
    """An n-d array as a fixed-shape tensor column (``values.shape[1:]`` per row)."""
    if values.size:
        if not values.flags.c_contiguous or values.strides[0] != values[0].nbytes:
            values = np.array(values, order="C")  # Arrow wants each row's values packed
        return pa.FixedShapeTensorArray.from_numpy_ndarray(values)
    # pyarrow cannot make one from an empty array: build it from its storage type
    inner = pa.from_numpy_dtype(values.dtype)
    if values.shape[0] and not int(np.prod(values.shape[1:])):
        return pa.array([[]] * values.shape[0], pa.list_(inner))  # rows of zero values
    shape = list(values.shape[1:])
    kind = pa.fixed_shape_tensor(inner, shape, permutation=list(range(len(shape))))
    storage = pa.array([], pa.list_(inner, int(np.prod(values.shape[1:]))))
    return pa.ExtensionArray.from_storage(kind, storage)


def _from_list(values: list[Any]) -> Any:
    if any(isinstance(v, set | frozenset) for v in values):
        return objects_to_array(values)  # Arrow would turn them into lists
    arrays = [v for v in values if v is not None]
    if arrays and all(isinstance(v, np.ndarray) for v in arrays):
        shapes = {v.shape for v in arrays}
        if len(arrays) == len(values) and len(shapes) == 1 and arrays[0].dtype != object:
            return _from_ndarray(np.stack(arrays), "batch", "")
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        return objects_to_array(values)


def to_rows(table: Any) -> list[dict[str, Any]]:
    """The block's rows as dicts; tensor columns give numpy arrays, others Python values."""
    columns = [_row_values(table.column(i)) for i in range(table.num_columns)]
    names = table.column_names
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _row_values(column: Any) -> list[Any]:
    kind = column.type
    if (
        is_object_type(kind)
        or isinstance(kind, pa.FixedShapeTensorType)
        or pa.types.is_fixed_size_list(kind)
    ):
        return list(column_to_numpy(column))
    values: list[Any] = column.to_pylist()
    return values


def from_rows(rows: Sequence[Any], where: str) -> Any:
    """An Arrow Table from a list of row dicts; a key missing from a row gives a null."""
    if not rows:
        return EMPTY
    names: dict[str, None] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise ValueError(
                f"{where} gave a {type(row).__name__} as a row. HINT: rows are dicts of column "
                'name to value, e.g. {"x": 1.0}'
            )
        names.update(dict.fromkeys(row))
    return from_columns({n: [row.get(n) for row in rows] for n in names}, where)


def concat(tables: Sequence[Any]) -> Any:
    """Concatenate blocks, leaving out empty ones (an empty block may have no columns)."""
    kept = [t for t in tables if t.num_rows]
    if not kept:
        return tables[0] if tables else EMPTY
    if len(kept) == 1:
        return kept[0]
    return pa.concat_tables(kept, promote_options="permissive")
