"""Exact sums of columns: what makes aggregates independent of the blocks."""

from fractions import Fraction

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.data._exact import exact_sum, exact_sum_of_squares
from tests.unit.data.strategies import SETTINGS

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(**SETTINGS)
@given(st.lists(finite, max_size=50))
def test_float_sums_are_exact(values):
    column = pa.array(values, pa.float64())
    assert exact_sum(column) == sum((Fraction(v) for v in values), Fraction(0))


@settings(**SETTINGS)
@given(st.lists(st.floats(-1e100, 1e100, allow_nan=False), max_size=50))
def test_float_sums_of_squares_are_exact(values):
    column = pa.array(values, pa.float64())
    assert exact_sum_of_squares(column) == sum((Fraction(v) ** 2 for v in values), Fraction(0))


def test_integer_sums_are_python_ints_even_past_int64():
    big = pa.array([2**62, 2**62, 2**62], pa.int64())
    assert exact_sum(big) == 3 * 2**62
    assert exact_sum_of_squares(pa.array([3, -4], pa.int64())) == 25


def test_a_value_that_is_not_finite_gives_a_float_as_pyarrow_does():
    assert np.isnan(exact_sum(pa.array([1.0, float("nan")])))
    assert exact_sum(pa.array([1.0, float("inf")])) == float("inf")
