"""Discretizers: values into bins, of uniform width (fitted) or given edges (Ray's names).

As in Ray, binning is ``pandas.cut`` on each batch: ordered integer bin indices by default,
a categorical where ``dtypes`` asks for one, and missing for a value outside every bin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lockstep.data.preprocessors import _statistics as statistics
from lockstep.data.preprocessors._base import Preprocessor, check_columns, output_names

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset

DUPLICATES = ("raise", "drop")


class _KBinsDiscretizer(Preprocessor):
    _keeps_rows = True
    columns: list[str]
    output_columns: list[str]
    right: bool
    include_lowest: bool
    duplicates: str
    dtypes: Mapping[str, Any] | None

    def _set_options(
        self,
        columns: Sequence[str],
        right: bool,
        include_lowest: bool,
        duplicates: str,
        dtypes: Mapping[str, Any] | None,
        output_columns: Sequence[str] | None,
    ) -> None:
        where = type(self).__name__
        self.columns = check_columns(columns, where)
        if duplicates not in DUPLICATES:
            raise ValueError(f"{where}: duplicates must be one of {DUPLICATES}, got {duplicates!r}")
        self.right = right
        self.include_lowest = include_lowest
        self.duplicates = duplicates
        self.dtypes = dtypes
        self.output_columns = output_names(self.columns, output_columns, where)

    def _edges(self, column: str) -> Any:
        raise NotImplementedError

    def _transform_pandas(self, df: Any) -> Any:
        import pandas as pd

        for column, out in zip(self.columns, self.output_columns, strict=True):
            labels: Any = False
            ordered = True
            dtype = (self.dtypes or {}).get(column)
            if isinstance(dtype, pd.CategoricalDtype):
                labels, ordered = list(dtype.categories), bool(dtype.ordered)
            cut: Any = pd.cut  # pandas-stubs cannot type labels chosen at run time
            df[out] = cut(
                df[column],
                self._edges(column),
                right=self.right,
                labels=labels,
                ordered=ordered,
                include_lowest=self.include_lowest,
                duplicates=self.duplicates,
            )
        return df


class CustomKBinsDiscretizer(_KBinsDiscretizer):
    """Bin values into the intervals between given edges (nothing to fit).

    Args:
        columns: The columns to discretize.
        bins: The edges, for every column, or a dict of column to edges.
        right: Whether each bin includes its right edge.
        include_lowest: Whether the first bin includes its left edge.
        duplicates: ``"raise"`` or ``"drop"`` for repeated edges.
        dtypes: A ``pandas.CategoricalDtype`` per column for labelled bins.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"x": 0.5}, {"x": 2.0}, {"x": 9.0}])
        >>> binned = CustomKBinsDiscretizer(["x"], bins=[0, 1, 4, 10]).transform(ds)
        >>> [r["x"] for r in binned.take_all()]
        [0, 1, 2]
    """

    _is_fittable = False

    def __init__(
        self,
        columns: Sequence[str],
        bins: Sequence[float] | Mapping[str, Sequence[float]],
        *,
        right: bool = True,
        include_lowest: bool = False,
        duplicates: str = "raise",
        dtypes: Mapping[str, Any] | None = None,
        output_columns: Sequence[str] | None = None,
    ):
        self._set_options(columns, right, include_lowest, duplicates, dtypes, output_columns)
        if isinstance(bins, Mapping) and any(c not in bins for c in self.columns):
            raise ValueError(
                "CustomKBinsDiscretizer: if `bins` is a dictionary, all elements of `columns` "
                f"must be present in it; missing {[c for c in self.columns if c not in bins]}"
            )
        self.bins = bins

    def _edges(self, column: str) -> Any:
        return self.bins[column] if isinstance(self.bins, Mapping) else self.bins


class UniformKBinsDiscretizer(_KBinsDiscretizer):
    """Bin values into ``bins`` intervals of equal width between the column's min and max.

    ``fit`` finds each column's range (streaming, with ``pyarrow.compute``); as in Ray and
    pandas, the range is widened by 0.1% on the open side so that the extreme values fall
    in a bin. ``stats_`` maps each column to its edges.

    Args:
        columns: The columns to discretize.
        bins: The number of bins, for every column, or a dict of column to number.
        right: Whether each bin includes its right edge.
        include_lowest: Whether the first bin includes its left edge.
        duplicates: ``"raise"`` or ``"drop"`` for repeated edges.
        dtypes: A ``pandas.CategoricalDtype`` per column for labelled bins.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"x": float(v)} for v in (0, 1, 2, 3, 4, 5, 6, 7)])
        >>> binned = UniformKBinsDiscretizer(["x"], bins=4).fit_transform(ds)
        >>> [r["x"] for r in binned.take_all()]
        [0, 0, 1, 1, 2, 2, 3, 3]
    """

    def __init__(
        self,
        columns: Sequence[str],
        bins: int | Mapping[str, int],
        *,
        right: bool = True,
        include_lowest: bool = False,
        duplicates: str = "raise",
        dtypes: Mapping[str, Any] | None = None,
        output_columns: Sequence[str] | None = None,
    ):
        self._set_options(columns, right, include_lowest, duplicates, dtypes, output_columns)
        counts = bins.values() if isinstance(bins, Mapping) else [bins]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts):
            raise TypeError(
                f"UniformKBinsDiscretizer: `bins` must be a positive integer or a dict of "
                f"them, got {bins!r}"
            )
        if isinstance(bins, Mapping) and any(c not in bins for c in self.columns):
            raise ValueError(
                "UniformKBinsDiscretizer: if `bins` is a dictionary, all elements of `columns` "
                "must be present in it"
            )
        self.bins = bins

    def _compute_stats(self, ds: Dataset) -> dict[str, Any]:
        ranges = statistics.min_max(ds, self.columns)
        stats = {}
        for column, (low, high) in ranges.items():
            count = self.bins[column] if isinstance(self.bins, Mapping) else self.bins
            stats[column] = _uniform_edges(low, high, count, self.right)
        return stats

    def _edges(self, column: str) -> Any:
        return self.stats_[column]


def _uniform_edges(low: float | None, high: float | None, bins: int, right: bool) -> Any:
    """``bins + 1`` edges over ``[low, high]``, as ``pandas.cut`` makes them for a count."""
    if low is None or high is None:
        raise ValueError(
            "UniformKBinsDiscretizer: a column has no values to find its range from. "
            "HINT: fit on data with values in every column"
        )
    low, high = float(low), float(high)
    if np.isinf(low) or np.isinf(high):
        raise ValueError("Cannot specify integer `bins` when input data contains infinity.")
    if low == high:  # widen a single value into a range first
        low -= 0.001 * abs(low) if low != 0 else 0.001
        high += 0.001 * abs(high) if high != 0 else 0.001
        return np.linspace(low, high, bins + 1)
    edges = np.linspace(low, high, bins + 1)
    widen = (high - low) * 0.001
    if right:
        edges[0] -= widen
    else:
        edges[-1] += widen
    return edges
