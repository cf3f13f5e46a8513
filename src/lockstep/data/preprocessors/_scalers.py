"""Scalers: (x - center) / scale per column, with the statistics fitted streaming.

Results match scikit-learn's scalers: population standard deviation, a scale below 1e-8
(a constant or near-constant column, Ray's threshold) treated as one, missing values (null,
NaN) ignored by fit and kept by transform. Float columns keep their float type; integer
columns become float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._columns import put_column
from lockstep.data.preprocessors import _statistics as statistics
from lockstep.data.preprocessors._base import (
    ArrowPreprocessor,
    check_columns,
    output_names,
    require_columns,
)

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset


class _ColumnScaler(ArrowPreprocessor):
    """Shared by the scalers: ``center(col)`` and ``scale(col)`` from ``stats_``."""

    def __init__(self, columns: Sequence[str], output_columns: Sequence[str] | None = None):
        self.columns = check_columns(columns, type(self).__name__)
        self.output_columns = output_names(self.columns, output_columns, type(self).__name__)

    def _center_scale(self, column: str) -> tuple[float | None, float | None]:
        raise NotImplementedError

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, type(self).__name__)
        for name, out in zip(self.columns, self.output_columns, strict=True):
            center, scale = self._center_scale(name)
            table = put_column(table, out, scaled(table.column(name), center, scale))
        return table


_EPSILON = 1e-8


def scaled(column: Any, center: float | None, scale: float | None) -> Any:
    """``(column - center) / scale``; a scale below 1e-8 counts as 1, a missing center gives
    nulls."""
    kind = column.type if pa.types.is_floating(column.type) else pa.float64()
    values = column.cast(kind)
    if center is None:
        return pa.nulls(len(column), kind)
    # a scale below 1e-8 (a constant or near-constant column) counts as 1, as in Ray
    divisor = scale if scale and abs(scale) >= _EPSILON else 1.0
    return pc.divide(pc.subtract(values, pa.scalar(center, kind)), pa.scalar(divisor, kind))


class StandardScaler(_ColumnScaler):
    """Scale columns to mean 0 and standard deviation 1: ``(x - mean) / std``.

    ``stats_`` holds ``mean(col)`` and ``std(col)`` (population std, as scikit-learn).

    Args:
        columns: The columns to scale.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"x": 1.0}, {"x": 3.0}])
        >>> StandardScaler(["x"]).fit_transform(ds).to_pandas()["x"].tolist()
        [-1.0, 1.0]
    """

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        stats = {}
        for name, m in statistics.moments(ds, self.columns).items():
            stats[f"mean({name})"] = m.mean if m.count else None
            variance = m.variance(ddof=0)  # population std, as scikit-learn's scalers
            stats[f"std({name})"] = math.sqrt(variance) if variance is not None else None
        return stats

    def _center_scale(self, column: str) -> tuple[float | None, float | None]:
        return self.stats_[f"mean({column})"], self.stats_[f"std({column})"]


#: The older name of StandardScaler, used by earlier Ray Train material.
Scaler = StandardScaler


class MinMaxScaler(_ColumnScaler):
    """Scale columns to [0, 1]: ``(x - min) / (max - min)``.

    Args:
        columns: The columns to scale.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> MinMaxScaler(["id"]).fit_transform(ld.range(3)).to_pandas()["id"].tolist()
        [0.0, 0.5, 1.0]
    """

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        stats = {}
        for name, (low, high) in statistics.min_max(ds, self.columns).items():
            stats[f"min({name})"], stats[f"max({name})"] = low, high
        return stats

    def _center_scale(self, column: str) -> tuple[float | None, float | None]:
        low, high = self.stats_[f"min({column})"], self.stats_[f"max({column})"]
        return low, (high - low) if low is not None else None


class MaxAbsScaler(_ColumnScaler):
    """Scale columns to [-1, 1] by the largest absolute value: ``x / max(|x|)``.

    Args:
        columns: The columns to scale.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"x": -4.0}, {"x": 2.0}])
        >>> MaxAbsScaler(["x"]).fit_transform(ds).to_pandas()["x"].tolist()
        [-1.0, 0.5]
    """

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        stats = {}
        for name, (low, high) in statistics.min_max(ds, self.columns).items():
            stats[f"abs_max({name})"] = None if low is None else max(abs(low), abs(high))
        return stats

    def _center_scale(self, column: str) -> tuple[float | None, float | None]:
        abs_max = self.stats_[f"abs_max({column})"]
        return (0.0 if abs_max is not None else None), abs_max


class RobustScaler(_ColumnScaler):
    """Scale columns by quantiles: ``(x - median) / (q_high - q_low)``, robust to outliers.

    Quantiles are exact (linear interpolation, as numpy and scikit-learn): fitting gathers
    the values of these columns (only those) in this process.

    Args:
        columns: The columns to scale.
        quantile_range: The low and high quantiles, ``(0.25, 0.75)`` by default.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> RobustScaler(["id"]).fit_transform(ld.range(5)).to_pandas()["id"].tolist()
        [-1.0, -0.5, 0.0, 0.5, 1.0]
    """

    def __init__(
        self,
        columns: Sequence[str],
        quantile_range: tuple[float, float] = (0.25, 0.75),
        output_columns: Sequence[str] | None = None,
    ):
        super().__init__(columns, output_columns)
        low, high = quantile_range
        if not 0 <= low < high <= 1:
            raise ValueError(
                f"RobustScaler: quantile_range must be (low, high) with 0 <= low < high <= 1, "
                f"got {quantile_range!r}. HINT: (0.25, 0.75)"
            )
        self.quantile_range = (low, high)

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        low, high = self.quantile_range
        stats = {}
        for name, (q_low, q_mid, q_high) in statistics.quantiles(
            ds, self.columns, [low, 0.5, high]
        ).items():
            stats[f"low_quantile({name})"] = q_low
            stats[f"median({name})"] = q_mid
            stats[f"high_quantile({name})"] = q_high
        return stats

    def _center_scale(self, column: str) -> tuple[float | None, float | None]:
        median = self.stats_[f"median({column})"]
        if median is None:
            return None, None
        return median, self.stats_[f"high_quantile({column})"] - self.stats_[
            f"low_quantile({column})"
        ]
