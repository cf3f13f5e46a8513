"""Normalizer: scale each row's values over some columns to unit norm."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lockstep.data._columns import put_column
from lockstep.data.preprocessors._base import (
    ArrowPreprocessor,
    check_columns,
    output_names,
    require_columns,
)

NORMS = ("l1", "l2", "max")


class Normalizer(ArrowPreprocessor):
    """Divide each row's values in ``columns`` by their norm (l1, l2 or max).

    Stateless (nothing to fit). As in scikit-learn, a row whose norm is zero stays zeros.

    Args:
        columns: The columns that form each row's vector.
        norm: ``"l1"``, ``"l2"`` or ``"max"``.
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"a": 1.0, "b": 3.0}])
        >>> Normalizer(["a", "b"], norm="l1").transform(ds).take_all()
        [{'a': 0.25, 'b': 0.75}]
    """

    _is_fittable = False

    def __init__(
        self, columns: Sequence[str], norm: str = "l2", output_columns: Sequence[str] | None = None
    ):
        self.columns = check_columns(columns, "Normalizer")
        if norm not in NORMS:
            raise ValueError(f"Normalizer: unknown norm {norm!r}. HINT: use one of {NORMS}")
        self.norm = norm
        self.output_columns = output_names(self.columns, output_columns, "Normalizer")

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "Normalizer")
        values = [table.column(c).cast(pa.float64()) for c in self.columns]
        norms = _norm(values, self.norm)
        divisor = pc.if_else(pc.equal(norms, 0.0), 1.0, norms)
        for out, column in zip(self.output_columns, values, strict=True):
            table = put_column(table, out, pc.divide(column, divisor))
        return table


def _norm(values: list[Any], norm: str) -> Any:
    if norm == "l1":
        return functools.reduce(pc.add, [pc.abs(v) for v in values])
    if norm == "max":
        return pc.max_element_wise(*[pc.abs(v) for v in values])
    return pc.sqrt(functools.reduce(pc.add, [pc.multiply(v, v) for v in values]))
