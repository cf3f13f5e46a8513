"""PowerTransformer, the discretizers and the text preprocessors, against scikit-learn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import CountVectorizer as SkCountVectorizer
from sklearn.preprocessing import KBinsDiscretizer
from sklearn.preprocessing import PowerTransformer as SkPowerTransformer

import lockstep.data as ld
from lockstep.data.preprocessors import (
    CountVectorizer,
    CustomKBinsDiscretizer,
    FeatureHasher,
    HashingVectorizer,
    PowerTransformer,
    Tokenizer,
    UniformKBinsDiscretizer,
)
from lockstep.data.preprocessors._text import simple_hash


def column(ds, name):
    return ds.to_pandas()[name].to_numpy()


@pytest.mark.parametrize(
    ("method", "power"),
    [
        ("yeo-johnson", 0.5),
        ("yeo-johnson", 0.0),
        ("yeo-johnson", 2.0),
        ("box-cox", 0.3),
        ("box-cox", 0.0),
    ],
)
def test_power_transformer_matches_scikit_learn_with_the_same_power(method, power):
    rng = np.random.default_rng(0)
    x = rng.normal(size=200) if method == "yeo-johnson" else rng.uniform(0.1, 5.0, size=200)
    sk = SkPowerTransformer(method=method, standardize=False).fit(x.reshape(-1, 1))
    sk.lambdas_ = np.array([power])
    expected = sk.transform(x.reshape(-1, 1))[:, 0]
    ds = ld.from_items([{"x": float(v)} for v in x], override_num_blocks=3)
    out = PowerTransformer(["x"], power=power, method=method).transform(ds)
    np.testing.assert_allclose(column(out, "x"), expected, rtol=1e-10, atol=1e-12)


def test_power_transformer_refuses_bad_input():
    with pytest.raises(ValueError, match="method must be one of"):
        PowerTransformer(["x"], power=1.0, method="log")
    with pytest.raises(ValueError, match="box-cox needs positive values"):
        PowerTransformer(["id"], power=1.0, method="box-cox").transform(ld.range(3)).take_all()


def test_uniform_bins_match_scikit_learn_away_from_the_edges():
    x = np.random.default_rng(1).uniform(-3, 7, size=500)
    expected = KBinsDiscretizer(n_bins=5, encode="ordinal", strategy="uniform").fit_transform(
        x.reshape(-1, 1)
    )[:, 0]
    ds = ld.from_items([{"x": float(v)} for v in x], override_num_blocks=4)
    out = UniformKBinsDiscretizer(["x"], bins=5).fit_transform(ds)
    np.testing.assert_array_equal(column(out, "x"), expected.astype(int))


def test_uniform_bins_as_ray_documents_them():
    df = pd.DataFrame(
        {"value_1": [0.2, 1.4, 2.5, 6.2, 9.7, 2.1], "value_2": [10, 15, 13, 12, 23, 25]}
    )
    ds = ld.from_pandas(df)
    out = UniformKBinsDiscretizer(["value_1", "value_2"], bins=4).fit_transform(ds).to_pandas()
    assert out["value_1"].tolist() == [0, 0, 0, 2, 3, 0]
    assert out["value_2"].tolist() == [0, 1, 0, 0, 3, 3]
    per_column = UniformKBinsDiscretizer(["value_1", "value_2"], bins={"value_1": 4, "value_2": 3})
    out = per_column.fit_transform(ds).to_pandas()
    assert out["value_2"].tolist() == [0, 0, 0, 0, 2, 2]
    with pytest.raises(TypeError, match="must be a positive integer"):
        UniformKBinsDiscretizer(["x"], bins=[1, 2])


def test_custom_bins_as_ray_documents_them():
    df = pd.DataFrame(
        {"value_1": [0.2, 1.4, 2.5, 6.2, 9.7, 2.1], "value_2": [10, 15, 13, 12, 23, 25]}
    )
    ds = ld.from_pandas(df)
    out = CustomKBinsDiscretizer(["value_1", "value_2"], bins=[0, 1, 4, 10, 25]).transform(ds)
    frame = out.to_pandas()
    assert frame["value_1"].tolist() == [0, 1, 1, 2, 2, 1]
    assert frame["value_2"].tolist() == [2, 3, 3, 3, 3, 3]
    per_column = CustomKBinsDiscretizer(
        ["value_1", "value_2"], bins={"value_1": [0, 1, 4], "value_2": [0, 18, 35, 70]}
    )
    frame = per_column.transform(ds).to_pandas()
    assert frame["value_1"].isna().tolist() == [False, False, False, True, True, False]
    assert frame["value_2"].tolist() == [0, 0, 0, 0, 1, 1]
    labelled = CustomKBinsDiscretizer(
        ["value_1"], bins=[0, 5, 10], dtypes={"value_1": pd.CategoricalDtype(["low", "high"])}
    )
    batch = labelled.transform_batch(pd.DataFrame({"value_1": [1.0, 7.0]}))
    assert batch["value_1"].tolist() == ["low", "high"]
    with pytest.raises(ValueError, match="all elements of `columns`"):
        CustomKBinsDiscretizer(["a", "b"], bins={"a": [0, 1]})


CORPUS = ["Jimmy likes volleyball", "Bob likes volleyball too", "Bob also likes fruit jerky"]


def test_count_vectorizer_counts_as_scikit_learn_does():
    ds = ld.from_items([{"corpus": t} for t in CORPUS], override_num_blocks=2)
    prep = CountVectorizer(["corpus"]).fit(ds)
    vocabulary = [t for t, _ in prep.stats_["token_counts(corpus)"].most_common()]
    assert vocabulary[:2] == ["likes", "volleyball"] or vocabulary[:2] == ["likes", "Bob"]
    sk = SkCountVectorizer(tokenizer=str.split, lowercase=False, token_pattern=None)
    matrix = sk.fit_transform(CORPUS).toarray()
    order = [sk.vocabulary_[t] for t in vocabulary]
    got = np.array([r["corpus"] for r in prep.transform(ds).take_all()])
    np.testing.assert_array_equal(got, matrix[:, order])
    top = CountVectorizer(["corpus"], max_features=2, output_columns=["counts"]).fit_transform(ds)
    rows = top.take_all()
    assert [r["counts"] for r in rows] == [[1, 1], [1, 1], [1, 0]] and rows[0]["corpus"] == CORPUS[
        0
    ]


def test_hashing_vectorizer_puts_tokens_in_rays_buckets():
    ds = ld.from_items([{"corpus": t} for t in CORPUS])
    rows = HashingVectorizer(["corpus"], num_features=8).transform(ds).take_all()
    for text, row in zip(CORPUS, rows, strict=True):
        expected = [0] * 8
        for token in text.split(" "):
            expected[simple_hash(token, 8)] += 1
        assert row["corpus"] == expected
    assert sum(rows[2]["corpus"]) == 5


def test_feature_hasher_sums_the_columns_into_their_buckets():
    ds = ld.from_items(
        [{"I": 1, "like": 1, "Python": 1, "id": 7}, {"I": 1, "like": 0, "Python": 2, "id": 8}]
    )
    out = FeatureHasher(["I", "like", "Python"], num_features=16, output_column="h").transform(ds)
    rows = out.take_all()
    assert set(rows[0]) == {"id", "h"}
    for source, row in zip(
        ({"I": 1, "like": 1, "Python": 1}, {"I": 1, "like": 0, "Python": 2}), rows, strict=True
    ):
        expected = np.zeros(16)
        for name, value in source.items():
            expected[simple_hash(name, 16)] += value
        np.testing.assert_array_equal(row["h"], expected)


def test_tokenizer_with_a_custom_function_and_output_columns():
    ds = ld.from_items([{"t": "a,b"}, {"t": None}])
    out = Tokenizer(["t"], tokenization_fn=lambda s: s.split(","), output_columns=["tokens"])
    assert out.transform(ds).take_all() == [
        {"t": "a,b", "tokens": ["a", "b"]},
        {"t": None, "tokens": None},
    ]
