"""Exact sums of a column's values, so that aggregates do not depend on the block order.

Integers sum as Python ints. Floats sum as a ``Fraction``, vectorized: a double is an
integer of 53 bits times a power of two, and integers add exactly. Squares of floats are
split (Veltkamp) into parts whose products are exact. A value that is not finite (NaN,
inf) makes the sum a float, as pyarrow computes it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Exact = int | Fraction | float

_SPLIT = 134217729.0  # 2**27 + 1: splits a double into two halves of 26 bits
_BIG = 1e150  # beyond this a half's square overflows
_TINY = 2.0**-400  # below this a half's square underflows: scaled up by _UP first
_UP = 2.0**600
_EXPONENT_OFFSET = 1100  # frexp's exponents of doubles are within [-1073, 1024]
_BINS = 2200
_CHUNK = 1 << 16  # values summed at a time: the halves' sums stay below 2**53


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
    if array is None or not np.isfinite(array).all() or np.abs(array).max(initial=0) > _BIG:
        return float(pc.sum(pc.multiply(values, values)).as_py() or 0.0)
    tiny = np.abs(array) < _TINY  # their squares would lose bits below 2**-1022: scaled
    return _squares(array[~tiny]) + _squares(array[tiny] * _UP) / Fraction(_UP) ** 2


def _squares(array: np.ndarray[Any, Any]) -> Fraction:
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
    """The exact sum of finite doubles, vectorized: each is an integer of 53 bits times a
    power of two (``frexp``); the integers of each power are summed exactly (in two
    halves of 27 bits, a chunk at a time), then the few sums are scaled and added."""
    total = Fraction(0)
    for start in range(0, len(array), _CHUNK):
        mantissas, exponents = np.frexp(array[start : start + _CHUNK])
        ints = (mantissas * float(2**53)).astype(np.int64)
        bins = exponents + _EXPONENT_OFFSET
        for half, shift in ((ints >> 26, 26), (ints & (2**26 - 1), 0)):
            sums = np.bincount(bins, weights=half, minlength=_BINS)  # below 2**43: exact
            for index in np.flatnonzero(sums).tolist():
                power = index - _EXPONENT_OFFSET - 53 + shift
                total += Fraction(int(sums[index])) * Fraction(2) ** power
    return total
