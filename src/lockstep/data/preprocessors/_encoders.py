"""Encoders of categorical columns: ordinal, one-hot, multi-hot, label, pandas categories.

Categories are the sorted distinct present values seen by ``fit`` (counted streaming, with
``pyarrow.compute.value_counts``); ``stats_["unique_values(col)"]`` maps each to its index.
A value not seen by ``fit`` encodes as null (ordinal) or all zeros (one-hot, multi-hot).
As in Ray, a null in a column to encode is refused, by ``fit`` and by ``transform``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._columns import put_column
from lockstep.data._convert import column_from_values
from lockstep.data.preprocessors import _statistics as statistics
from lockstep.data.preprocessors._base import (
    ArrowPreprocessor,
    check_columns,
    output_names,
    require_columns,
)

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset


def _sorted(values: Any) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # values of different kinds: a stable order all the same
        return sorted(values, key=lambda v: (type(v).__name__, str(v)))


def _categories(counts: Counter[Any], max_categories: int | None) -> dict[Any, int]:
    """``{value: index}`` over the sorted values (the most frequent ``max_categories``)."""
    values = list(counts)
    if max_categories is not None:
        ranked = sorted(values, key=lambda v: -counts[v])
        values = ranked[:max_categories]
    return {v: i for i, v in enumerate(_sorted(values))}


def _indices(column: Any, categories: Mapping[Any, int]) -> Any:
    """The index of each value among ``categories`` (int64), null when not among them."""
    keys = list(categories)
    if not keys:
        return pa.nulls(len(column), pa.int64())
    value_set = pa.array(
        keys, type=column.type if not pa.types.is_dictionary(column.type) else None
    )
    found = pc.index_in(column, value_set=value_set)
    order = pa.array([categories[k] for k in keys], pa.int64())
    return pc.take(order, found)


def _refuse_nulls(table: Any, columns: Sequence[str]) -> None:
    """Raise as Ray's encoders do when a column to encode holds a null (or NaN)."""
    missing = [c for c in columns if _has_missing(table.column(c))]
    if missing:
        raise ValueError(
            f"Unable to transform columns {missing} because they contain null values. "
            "Consider imputing missing values first. HINT: SimpleImputer before the encoder"
        )


def _has_missing(column: Any) -> bool:
    if column.null_count:
        return True
    return bool(pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py())


def _whole_lists(column: Any, categories: Mapping[Any, int]) -> Any:
    """The index of each whole list (as a tuple) among ``categories``, null if absent."""
    return pa.array(
        [None if v is None else categories.get(tuple(v)) for v in column.to_pylist()],
        pa.int64(),
    )


def _check_max_categories(max_categories: Any, columns: list[str], where: str) -> dict[str, int]:
    limits = dict(max_categories or {})
    unknown = [c for c in limits if c not in columns]
    if unknown or not all(isinstance(v, int) and v > 0 for v in limits.values()):
        raise ValueError(
            f"{where}: max_categories must map some of the columns {columns} to positive ints, "
            f"got {max_categories!r}. HINT: max_categories={{{columns[0]!r}: 10}}"
        )
    return limits


class OrdinalEncoder(ArrowPreprocessor):
    """Encode each value as its index among the sorted categories seen by ``fit``.

    Args:
        columns: The columns to encode.
        encode_lists: For list columns, encode each element (True) or each whole list.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"c": "b"}, {"c": "a"}, {"c": "b"}])
        >>> OrdinalEncoder(["c"]).fit_transform(ds).to_pandas()["c"].tolist()
        [1, 0, 1]
    """

    def __init__(
        self,
        columns: Sequence[str],
        *,
        encode_lists: bool = True,
        output_columns: Sequence[str] | None = None,
    ):
        self.columns = check_columns(columns, "OrdinalEncoder")
        self.encode_lists = encode_lists
        self.output_columns = output_names(self.columns, output_columns, "OrdinalEncoder")

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        list_columns = [c for c in self.columns if _is_list(ds, c)]
        plain = [c for c in self.columns if c not in list_columns]
        counts = statistics.value_counts(ds, plain, refuse_missing=True) if plain else {}
        if list_columns:
            if self.encode_lists:
                counts.update(statistics.value_counts(ds, list_columns, lists=True))
            else:
                counts.update(statistics.list_value_counts(ds, list_columns))
        return {f"unique_values({c})": _categories(counts[c], None) for c in self.columns}

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "OrdinalEncoder")
        _refuse_nulls(table, self.columns)
        for name, out in zip(self.columns, self.output_columns, strict=True):
            categories = self.stats_[f"unique_values({name})"]
            column = table.column(name)
            if _is_list_type(column.type):
                encoded = self._encode_lists(column, categories)
            else:
                encoded = _indices(column, categories)
            table = put_column(table, out, encoded)
        return table

    def _encode_lists(self, column: Any, categories: Mapping[Any, int]) -> Any:
        if not self.encode_lists:
            return _whole_lists(column, categories)
        array = column.combine_chunks()
        flat = _indices(array.flatten(), categories)
        offsets = pc.subtract(array.offsets, array.offsets[0])
        return pa.ListArray.from_arrays(offsets, flat, mask=array.is_null())


def _is_list_type(kind: Any) -> bool:
    return bool(
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _is_list(ds: Dataset, column: str) -> bool:
    schema = ds.schema()
    return (
        schema is not None and column in schema.names and _is_list_type(schema.field(column).type)
    )


def _hot(rows: np.ndarray[Any, Any], indices: Any, num_rows: int, width: int) -> Any:
    """A ``(num_rows, width)`` count matrix from ``(row, index)`` pairs; null indices skipped."""
    matrix = np.zeros((num_rows, width), dtype=np.int64)
    idx = indices.to_numpy(zero_copy_only=False)
    valid = ~np.isnan(idx) if idx.dtype.kind == "f" else np.ones(len(idx), dtype=bool)
    np.add.at(matrix, (rows[valid], idx[valid].astype(np.int64)), 1)
    return column_from_values(matrix)


class _HotEncoder(ArrowPreprocessor):
    """What the one-hot and multi-hot encoders share: their arguments, and the categories
    ``fit`` keeps of each column."""

    def __init__(
        self,
        columns: Sequence[str],
        *,
        max_categories: Mapping[str, int] | None = None,
        output_columns: Sequence[str] | None = None,
    ):
        where = type(self).__name__
        self.columns = check_columns(columns, where)
        self.max_categories = _check_max_categories(max_categories, self.columns, where)
        self.output_columns = output_names(self.columns, output_columns, where)

    def _counts(self, ds: Dataset, *, lists_whole: bool) -> dict[str, Any]:
        """Per column, how often each category occurs: a scalar column's values, and a
        list column's whole lists (``lists_whole``) or elements."""
        lists = [c for c in self.columns if _is_list(ds, c)]
        plain = [c for c in self.columns if c not in lists]
        counts = statistics.value_counts(ds, plain, refuse_missing=True) if plain else {}
        if lists and lists_whole:
            counts.update(statistics.list_value_counts(ds, lists, refuse_missing=True))
        elif lists:
            counts.update(statistics.value_counts(ds, lists, lists=True, refuse_missing=True))
        return counts

    def _kept_categories(self, counts: Mapping[str, Any]) -> dict[str, Any]:
        """Per column, its sorted categories (the most frequent ``max_categories``)."""
        return {
            f"unique_values({c})": _categories(counts[c], self.max_categories.get(c))
            for c in self.columns
        }


class OneHotEncoder(_HotEncoder):
    """Encode each value as a one-hot vector over the sorted categories seen by ``fit``.

    The column becomes a vector per row (a numpy batch gives a ``(rows, categories)``
    array); an unseen value gives all zeros. In a list column each whole list is a
    category (a tuple in ``stats_``), as in Ray.

    Args:
        columns: The columns to encode.
        max_categories: Per column, keep only the most frequent this many categories.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"c": "red"}, {"c": "blue"}])
        >>> OneHotEncoder(["c"]).fit_transform(ds).take_batch()["c"].tolist()
        [[0, 1], [1, 0]]
    """

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        return self._kept_categories(self._counts(ds, lists_whole=True))

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "OneHotEncoder")
        _refuse_nulls(table, self.columns)
        rows = np.arange(table.num_rows)
        for name, out in zip(self.columns, self.output_columns, strict=True):
            categories = self.stats_[f"unique_values({name})"]
            column = table.column(name)
            if _is_list_type(column.type):
                indices = _whole_lists(column, categories)
            else:
                indices = _indices(column, categories)
            table = put_column(table, out, _hot(rows, indices, table.num_rows, len(categories)))
        return table


class MultiHotEncoder(_HotEncoder):
    """Encode lists as vectors counting each category's occurrences in the list.

    A column of single values is encoded as if each were a list of one (one-hot), as in Ray.

    Args:
        columns: The list columns to encode.
        max_categories: Per column, keep only the most frequent this many categories.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"g": ["a", "b"]}, {"g": ["b", "b"]}])
        >>> MultiHotEncoder(["g"]).fit_transform(ds).take_batch()["g"].tolist()
        [[1, 1], [0, 2]]
    """

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        return self._kept_categories(self._counts(ds, lists_whole=False))

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "MultiHotEncoder")
        _refuse_nulls(table, self.columns)
        for name, out in zip(self.columns, self.output_columns, strict=True):
            categories = self.stats_[f"unique_values({name})"]
            array = table.column(name).combine_chunks()
            if _is_list_type(array.type):
                parents = pc.list_parent_indices(array).to_numpy()
                indices = _indices(pc.list_flatten(array), categories)
            else:
                parents, indices = np.arange(len(array)), _indices(array, categories)
            table = put_column(table, out, _hot(parents, indices, len(array), len(categories)))
        return table


class LabelEncoder(ArrowPreprocessor):
    """Encode the label column as the index of each label among the sorted labels.

    Args:
        label_column: The column of labels.
        output_column: Where to write the result; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"y": "dog"}, {"y": "cat"}])
        >>> encoder = LabelEncoder("y")
        >>> encoder.fit_transform(ds).to_pandas()["y"].tolist()
        [1, 0]
    """

    def __init__(self, label_column: str, *, output_column: str | None = None):
        self.label_column = check_columns(label_column, "LabelEncoder")[0]
        self.output_column = output_column or self.label_column

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        counts = statistics.value_counts(ds, [self.label_column], refuse_missing=True)
        return {f"unique_values({self.label_column})": _categories(counts[self.label_column], None)}

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, [self.label_column], "LabelEncoder")
        _refuse_nulls(table, [self.label_column])
        categories = self.stats_[f"unique_values({self.label_column})"]
        return put_column(
            table, self.output_column, _indices(table.column(self.label_column), categories)
        )

    def inverse_transform(self, ds: Dataset) -> Dataset:
        """Map encoded labels (in the output column) back to the original labels.

        Example:
            >>> import lockstep.data as ld
            >>> ds = ld.from_items([{"y": "dog"}, {"y": "cat"}])
            >>> encoder = LabelEncoder("y")
            >>> encoder.inverse_transform(encoder.fit_transform(ds)).take_all()
            [{'y': 'dog'}, {'y': 'cat'}]
        """
        from lockstep.data._ops import MapBatches, Udf

        self._check_fitted()
        op = MapBatches(Udf(self._inverse_arrow), "pyarrow", None, preserves_rows=True)
        return ds._with_op(op)

    def _inverse_arrow(self, table: Any) -> Any:
        categories = self.stats_[f"unique_values({self.label_column})"]
        labels = pa.array(list(categories))
        decoded = pc.take(labels, table.column(self.output_column))
        return put_column(table, self.label_column, decoded)


class Categorizer(ArrowPreprocessor):
    """Make columns pandas categoricals (Arrow dictionaries) with the categories seen by ``fit``.

    ``stats_`` maps each column to its ``pandas.CategoricalDtype``; columns given in
    ``dtypes`` use that dtype and need no fitting.

    Args:
        columns: The columns to convert.
        dtypes: A ``pandas.CategoricalDtype`` for some (or all) of the columns.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"c": "b"}, {"c": "a"}])
        >>> df = Categorizer(["c"]).fit_transform(ds).to_pandas()
        >>> str(df["c"].dtype), list(df["c"].cat.categories)
        ('category', ['a', 'b'])
    """

    def __init__(self, columns: Sequence[str], dtypes: Mapping[str, Any] | None = None):
        self.columns = check_columns(columns, "Categorizer")
        self.dtypes = dict(dtypes or {})
        unknown = [c for c in self.dtypes if c not in self.columns]
        if unknown:
            raise ValueError(
                f"Categorizer: dtypes names {unknown}, which are not among columns {self.columns}"
            )

    def _needs_fit(self) -> bool:
        return any(c not in self.dtypes for c in self.columns)

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        import pandas as pd

        todo = [c for c in self.columns if c not in self.dtypes]
        counts = statistics.value_counts(ds, todo) if todo else {}
        stats = dict(self.dtypes)
        for name in todo:
            stats[name] = pd.CategoricalDtype(_sorted(counts[name]))
        return stats

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "Categorizer")
        stats = self.stats_ if self.has_stats() else self.dtypes
        for name in self.columns:
            dtype = stats[name]
            categories = pa.array(list(dtype.categories))
            column = table.column(name).combine_chunks()
            if pa.types.is_dictionary(column.type):
                column = column.cast(column.type.value_type)
            indices = pc.index_in(column, value_set=categories)
            encoded = pa.DictionaryArray.from_arrays(
                indices, categories, ordered=bool(dtype.ordered)
            )
            table = put_column(table, name, encoded)
        return table
