"""PowerTransformer: Yeo-Johnson or Box-Cox with a given power (Ray's preprocessor)."""

from __future__ import annotations

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

METHODS = ("yeo-johnson", "box-cox")


class PowerTransformer(ArrowPreprocessor):
    """Make data more Gaussian-like with a power transform of a given ``power`` (lambda).

    Stateless, as in Ray: the power is given, not fitted. Box-Cox needs positive values.

    Args:
        columns: The columns to transform.
        power: The power (lambda) of the transform.
        method: ``"yeo-johnson"`` (any values) or ``"box-cox"`` (positive values).
        output_columns: Where to write the results; in place by default.

    Example:
        >>> import lockstep.data as ld
        >>> ds = ld.from_items([{"x": 0.0}, {"x": 3.0}])
        >>> PowerTransformer(["x"], power=0.5).transform(ds).take_all()
        [{'x': 0.0}, {'x': 2.0}]
    """

    _is_fittable = False

    def __init__(
        self,
        columns: Sequence[str],
        power: float,
        method: str = "yeo-johnson",
        output_columns: Sequence[str] | None = None,
    ):
        self.columns = check_columns(columns, "PowerTransformer")
        if method not in METHODS:
            raise ValueError(
                f"PowerTransformer: method must be one of {METHODS}, got {method!r}. "
                'HINT: method="yeo-johnson" takes any values, "box-cox" positive ones'
            )
        self.power = float(power)
        self.method = method
        self.output_columns = output_names(self.columns, output_columns, "PowerTransformer")

    def _transform_arrow(self, table: Any) -> Any:
        require_columns(table, self.columns, "PowerTransformer")
        transform = _yeo_johnson if self.method == "yeo-johnson" else _box_cox
        for column, out in zip(self.columns, self.output_columns, strict=True):
            values = table.column(column).cast(pa.float64())
            table = put_column(table, out, transform(values, self.power))
        return table


def _power(values: Any, power: float) -> Any:
    """``(values ** power - 1) / power``, or ``log(values)`` for a power of 0."""
    if power == 0:
        return pc.ln(values)
    return pc.divide(pc.subtract(pc.power(values, power), 1.0), power)


def _yeo_johnson(values: Any, power: float) -> Any:
    positive = _power(pc.add(values, 1.0), power)
    # x < 0: -((1 - x) ** (2 - power) - 1) / (2 - power)
    negative = pc.negate(_power(pc.subtract(1.0, values), 2.0 - power))
    return pc.if_else(pc.greater_equal(values, 0.0), positive, negative)


def _box_cox(values: Any, power: float) -> Any:
    if pc.any(pc.less_equal(values, 0.0)).as_py():
        raise ValueError(
            "PowerTransformer: box-cox needs positive values. HINT: use "
            'method="yeo-johnson" for zeros and negative values'
        )
    return _power(values, power)
