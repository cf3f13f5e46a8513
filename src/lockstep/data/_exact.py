"""Exact sums of a column's values, so that aggregates do not depend on the block order.

Integers sum as Python ints. Floats sum as a ``Fraction``: ``math.fsum`` rounds the exact
sum correctly, so the exact sum is ``fsum`` plus the (again correctly rounded) remainder,
and so on until nothing remains, two or three passes in practice. Squares of floats are
split (Veltkamp) into parts whose products are exact. A value that is not finite (NaN,
inf) makes the sum a float, as pyarrow computes it.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Exact = int | Fraction | float

_SPLIT = 134217729.0  # 2**27 + 1: splits a double into two halves of 26 bits
_SQUARE_LIMIT = 1e150  # beyond this a half's square overflows


def exact_sum(values: Any) -> Exact:
    """The exact sum of a column without nulls."""
    kind = values.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return _int_sum(values)
    array = _floats(values)
    if array is None or not np.isfinite(array).all():
        return float(pc.sum(values).as_py() or 0.0)
    return _float_sum(array)


def exact_sum_of_squares(values: Any) -> Exact:
    """The exact sum of the squares of a column without nulls."""
    kind = values.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return int(sum(v * v for v in values.to_pylist()))
    array = _floats(values)
    if array is None or not np.isfinite(array).all() or np.abs(array).max() > _SQUARE_LIMIT:
        return float(pc.sum(pc.multiply(values, values)).as_py() or 0.0)
    t = _SPLIT * array
    high = t - (t - array)
    low = array - high
    return _float_sum(high * high) + _float_sum(2.0 * high * low) + _float_sum(low * low)


def _int_sum(values: Any) -> int:
    low, high = (s.as_py() for s in pc.min_max(values).values())
    bound = max(abs(int(low or 0)), abs(int(high or 0)))
    if bound * len(values) < 2**62:
        return int(pc.sum(pc.cast(values, pa.int64())).as_py() or 0)
    return sum(int(v) for v in values.to_pylist())


def _floats(values: Any) -> np.ndarray[Any, Any] | None:
    if not (pa.types.is_floating(values.type) or pa.types.is_decimal(values.type)):
        return None
    return np.asarray(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False))


def _float_sum(array: np.ndarray[Any, Any]) -> Fraction:
    rest = array.tolist()
    total = Fraction(0)
    while True:
        part = math.fsum(rest)
        if part == 0.0:  # an exact sum of doubles that is not zero never rounds to zero
            return total
        total += Fraction(part)
        rest.append(-part)
