"""Chain against a scikit-learn pipeline."""

import numpy as np
import pandas as pd
import pytest
import sklearn.impute as ski
import sklearn.preprocessing as skp

import lockstep.data as ld
from lockstep.data.preprocessors import (
    Chain,
    MinMaxScaler,
    Normalizer,
    SimpleImputer,
    StandardScaler,
)


def test_chain_fits_each_stage_on_the_previous_output_like_a_pipeline():
    from sklearn.pipeline import make_pipeline

    data = np.array([[1.0, 10.0], [np.nan, 20.0], [3.0, np.nan], [7.0, 40.0]])
    df = pd.DataFrame(data, columns=["a", "b"])
    chain = Chain(SimpleImputer(["a", "b"]), StandardScaler(["a", "b"]), MinMaxScaler(["a"]))
    got = chain.fit_transform(ld.from_pandas(df)).to_pandas().to_numpy()
    pipe = make_pipeline(ski.SimpleImputer(), skp.StandardScaler())
    expected = pipe.fit_transform(data)
    expected[:, 0] = skp.MinMaxScaler().fit_transform(expected[:, :1])[:, 0]
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(chain.transform_batch(df).to_numpy(), expected)
    assert chain.fit_status().value == "FITTED"


def test_chain_status_and_repr():
    chain = Chain(StandardScaler(["a"]), Normalizer(["a"]))
    assert chain.fit_status().value == "NOT_FITTED"
    assert Chain(Normalizer(["a"])).fit_status().value == "NOT_FITTABLE"
    assert repr(chain).startswith("Chain(StandardScaler(columns=['a']")
    with pytest.raises(ValueError, match="one or more preprocessors"):
        Chain()
