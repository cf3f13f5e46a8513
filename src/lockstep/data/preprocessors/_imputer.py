"""SimpleImputer: fill missing values (null, and NaN in float columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._columns import put_column
from lockstep.data.preprocessors import _statistics as statistics
from lockstep.data.preprocessors._base import ArrowPreprocessor, check_columns

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset

STRATEGIES = ("mean", "most_frequent", "constant")


class SimpleImputer(ArrowPreprocessor):
    """Fill missing values with the column's mean, its most frequent value, or a constant.

    Missing means null, or NaN in a float column (as in scikit-learn and pandas). Ties for
    the most frequent value go to the smallest, as in scikit-learn. With ``"constant"``
    nothing is fitted, and a column absent from a batch is added, filled.

    Args:
        columns: The columns to fill.
        strategy: ``"mean"``, ``"most_frequent"`` or ``"constant"``.
        fill_value: The value for ``"constant"``.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"x": 1.0}, {"x": None}, {"x": 3.0}])
        >>> SimpleImputer(["x"]).fit_transform(ds).to_pandas()["x"].tolist()
        [1.0, 2.0, 3.0]
    """

    def __init__(self, columns: Sequence[str], strategy: str = "mean", fill_value: Any = None):
        self.columns = check_columns(columns, "SimpleImputer")
        if strategy not in STRATEGIES:
            raise ValueError(
                f"SimpleImputer: unknown strategy {strategy!r}. HINT: use one of {STRATEGIES}"
            )
        if strategy == "constant" and fill_value is None:
            raise ValueError(
                'SimpleImputer(strategy="constant") needs a fill_value. HINT: fill_value=0'
            )
        self.strategy = strategy
        self.fill_value = fill_value
        self._is_fittable = strategy != "constant"  # type: ignore[misc]

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        if self.strategy == "mean":
            return {
                f"mean({c})": m.mean if m.count else None
                for c, m in statistics.moments(ds, self.columns).items()
            }
        counts = statistics.value_counts(ds, self.columns)
        stats = {}
        for name in self.columns:
            top = max(counts[name].values(), default=0)
            tied = [v for v, n in counts[name].items() if n == top]
            stats[f"most_frequent({name})"] = min(tied) if tied else None
        return stats

    def _value(self, column: str) -> Any:
        if self.strategy == "constant":
            return self.fill_value
        return self.stats_[f"{self.strategy}({column})"]

    def _transform_arrow(self, table: Any) -> Any:
        for name in self.columns:
            value = self._value(name)
            if name not in table.column_names:
                if self.strategy != "constant":
                    raise ValueError(
                        f"SimpleImputer: the batch has no column {name!r} "
                        f"(it has {table.column_names}). HINT: impute the columns it was fitted on"
                    )
                table = table.append_column(name, pa.array([value] * table.num_rows))
                continue
            if value is None:
                raise ValueError(
                    f"Column {name} has no fill value. Check the data used to fit the "
                    "SimpleImputer. HINT: the column had no values at fit time; fit on data "
                    "with values, or use strategy='constant'"
                )
            table = put_column(table, name, filled(table.column(name), value))
        return table


def filled(column: Any, value: Any) -> Any:
    """``column`` with nulls (and NaN) replaced by ``value``; ints widen to float if needed."""
    if value is None:
        return column
    if isinstance(value, float) and pa.types.is_integer(column.type):
        column = column.cast(pa.float64())
    scalar = pa.scalar(value).cast(column.type)
    if pa.types.is_floating(column.type):
        column = pc.if_else(pc.is_nan(column), scalar, column)
    return pc.fill_null(column, scalar)
