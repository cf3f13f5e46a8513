"""Normalizer against scikit-learn's."""

import numpy as np
import pytest
import sklearn.preprocessing as skp
from hypothesis import given, settings

from lockstep.data.preprocessors import (
    Normalizer,
)
from tests.unit.data.preprocessors.strategies import matrix, numeric_blocks, transformed
from tests.unit.data.strategies import SETTINGS


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
@settings(**SETTINGS)
@given(parts=numeric_blocks(missing=False))
def test_normalizer_matches_scikit_learn(norm, parts):
    data = matrix(parts, ["a", "b"])
    expected = skp.Normalizer(norm=norm).fit_transform(data)
    got = transformed(Normalizer(["a", "b"], norm=norm), parts, ["a", "b"])
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
