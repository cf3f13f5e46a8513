"""Column statistics computed streaming over a dataset's blocks with ``pyarrow.compute``.

Only the columns asked for are read, block by block; nothing is converted to pandas. As in
scikit-learn, nulls and NaN are missing values: they count in no statistic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._aggregate import Moments

if TYPE_CHECKING:
    from lockstep.data._dataset import Dataset


def present(column: Any) -> Any:
    """The column without nulls and, for floats, without NaN."""
    column = column.drop_null()
    if pa.types.is_floating(column.type):
        column = column.filter(pc.invert(pc.is_nan(column)))
    return column


def _blocks(dataset: Dataset, columns: Sequence[str]) -> Iterator[Any]:
    for block in dataset.select_columns(list(columns))._pass_blocks():
        if block.num_rows:
            yield block


def moments(dataset: Dataset, columns: Sequence[str]) -> dict[str, Moments]:
    """Per column: count, mean and M2 of the present values."""
    result = {c: Moments() for c in columns}
    for block in _blocks(dataset, columns):
        for name in columns:
            result[name] = result[name].merge(_block_moments(block.column(name)))
    return result


def _block_moments(column: Any) -> Moments:
    moments = Moments.of(column)
    if moments.count and math.isnan(moments.mean):  # NaN present: leave it out (rare)
        moments = Moments.of(present(column))
    return moments


def min_max(dataset: Dataset, columns: Sequence[str]) -> dict[str, tuple[Any, Any]]:
    """Per column: the smallest and largest present values, or ``(None, None)``."""
    result: dict[str, tuple[Any, Any]] = {c: (None, None) for c in columns}
    for block in _blocks(dataset, columns):
        for name in columns:
            low, high = (s.as_py() for s in pc.min_max(block.column(name)).values())
            if low is None or (isinstance(low, float) and math.isnan(low)):
                continue
            old_low, old_high = result[name]
            result[name] = (
                low if old_low is None else min(old_low, low),
                high if old_high is None else max(old_high, high),
            )
    return result


def quantiles(
    dataset: Dataset, columns: Sequence[str], qs: Sequence[float]
) -> dict[str, list[Any]]:
    """Per column: exact quantiles (linear interpolation, as numpy) of the present values.

    Exact quantiles need every value: the columns asked for (only those) are gathered.
    """
    parts: dict[str, list[Any]] = {c: [] for c in columns}
    for block in _blocks(dataset, columns):
        for name in columns:
            parts[name].extend(present(block.column(name)).chunks)
    result = {}
    for name, chunks in parts.items():
        values = (
            pa.chunked_array(chunks, type=pa.float64()) if not chunks else pa.chunked_array(chunks)
        )
        if not len(values):
            result[name] = [None] * len(qs)
            continue
        result[name] = pc.quantile(values, q=list(qs), interpolation="linear").to_pylist()
    return result


def value_counts(
    dataset: Dataset,
    columns: Sequence[str],
    *,
    lists: bool = False,
    refuse_missing: bool = False,
) -> dict[str, Counter[Any]]:
    """Per column: how often each present value occurs (in list elements when ``lists``).

    Raises:
        ValueError: ``refuse_missing`` and a column holds a null or NaN (as Ray's encoders
            refuse them).
    """
    result: dict[str, Counter[Any]] = {c: Counter() for c in columns}
    for block in _blocks(dataset, columns):
        for name in columns:
            column = block.column(name)
            if lists:
                column = pc.list_flatten(column)
            kept = present(column)
            if refuse_missing and len(kept) != len(column):
                raise ValueError(
                    "Unable to fit column because it contains null values. Consider "
                    f"imputing missing values first. HINT: column {name!r} has nulls; "
                    "fill them with SimpleImputer before this preprocessor"
                )
            counts = pc.value_counts(kept)
            values = counts.field("values").to_pylist()
            result[name].update(dict(zip(values, counts.field("counts").to_pylist(), strict=True)))
    return result


def list_value_counts(
    dataset: Dataset, columns: Sequence[str], *, refuse_missing: bool = False
) -> dict[str, Counter[Any]]:
    """Per column of lists: how often each whole list occurs (as a tuple)."""
    result: dict[str, Counter[Any]] = {c: Counter() for c in columns}
    for block in _blocks(dataset, columns):
        for name in columns:
            values = block.column(name).to_pylist()
            if refuse_missing and None in values:
                raise ValueError(
                    "Unable to fit column because it contains null values. Consider "
                    f"imputing missing values first. HINT: column {name!r} has nulls"
                )
            result[name].update(tuple(v) for v in values if v is not None)
    return result
