"""Encoders against scikit-learn (and pandas for Categorizer)."""

from collections import Counter

import numpy as np
import pandas as pd
import pytest
import sklearn.preprocessing as skp
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from lockstep.data.preprocessors import (
    Categorizer,
    LabelEncoder,
    MultiHotEncoder,
    OneHotEncoder,
    OrdinalEncoder,
)
from tests.unit.data.preprocessors.strategies import category_blocks
from tests.unit.data.strategies import SETTINGS

UNSEEN = ["x", "y", "z", "w", "new"]


@settings(**SETTINGS)
@given(category_blocks())
def test_ordinal_encoder_matches_scikit_learn(parts):
    ds = ld.from_arrow(parts)
    values = np.array([v for p in parts for v in p.column("c").to_pylist()]).reshape(-1, 1)
    theirs = skp.OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=np.nan)
    theirs.fit(values)
    ours = OrdinalEncoder(["c"]).fit(ds)
    batch = pd.DataFrame({"c": UNSEEN})
    got = ours.transform_batch(batch)["c"].to_numpy(dtype=float)
    expected = theirs.transform(np.array(UNSEEN).reshape(-1, 1))[:, 0]
    np.testing.assert_array_equal(got, expected)
    assert ours.transform(ds).to_pandas()["c"].tolist() == theirs.transform(values)[:, 0].tolist()


@settings(**SETTINGS)
@given(category_blocks())
def test_one_hot_encoder_matches_scikit_learn(parts):
    ds = ld.from_arrow(parts)
    values = np.array([v for p in parts for v in p.column("c").to_pylist()]).reshape(-1, 1)
    theirs = skp.OneHotEncoder(handle_unknown="ignore", sparse_output=False).fit(values)
    ours = OneHotEncoder(["c"]).fit(ds)
    got = ours.transform_batch({"c": np.array(UNSEEN, dtype=object)})["c"]
    np.testing.assert_array_equal(got, theirs.transform(np.array(UNSEEN).reshape(-1, 1)))
    np.testing.assert_array_equal(ours.transform(ds).take_batch(100)["c"], theirs.transform(values))


def test_one_hot_max_categories_keeps_the_most_frequent():
    ds = ld.from_items([{"c": v} for v in "aaabbc"])
    encoder = OneHotEncoder(["c"], max_categories={"c": 2}).fit(ds)
    assert encoder.stats_ == {"unique_values(c)": {"a": 0, "b": 1}}
    assert encoder.transform_batch(pd.DataFrame({"c": ["c", "b"]}))["c"].map(list).tolist() == [
        [0, 0],
        [0, 1],
    ]
    with pytest.raises(ValueError, match="max_categories"):
        OneHotEncoder(["c"], max_categories={"d": 2})


@settings(**SETTINGS)
@given(st.lists(st.lists(st.sampled_from("abcd"), max_size=4), min_size=1, max_size=20))
def test_multi_hot_encoder_counts_each_category(lists):
    ds = ld.from_items([{"g": g} for g in lists])
    encoder = MultiHotEncoder(["g"]).fit(ds)
    categories = sorted({v for g in lists for v in g})
    assert list(encoder.stats_["unique_values(g)"]) == categories
    got = encoder.transform(ds).take_batch(100)["g"]
    expected = np.array([[Counter(g)[c] for c in categories] for g in lists]).reshape(
        len(lists), -1
    )
    np.testing.assert_array_equal(got.reshape(len(lists), -1), expected)
    if all(len(set(g)) == len(g) for g in lists) and categories:
        binarized = skp.MultiLabelBinarizer(classes=categories).fit_transform(lists)
        np.testing.assert_array_equal(got, binarized)


def test_ordinal_encoder_on_lists():
    ds = ld.from_items([{"g": ["b", "a"]}, {"g": ["c"]}])
    encoded = OrdinalEncoder(["g"]).fit_transform(ds).take_all()
    assert [r["g"] for r in encoded] == [[1, 0], [2]]
    whole = OrdinalEncoder(["g"], encode_lists=False).fit_transform(ds).take_all()
    assert [r["g"] for r in whole] == [0, 1]


# After Ray's python/ray/data/tests/preprocessors/test_encoder.py: encoders refuse nulls,
# one-hot takes whole lists as categories, multi-hot takes single values.


@pytest.mark.parametrize(
    "encoder", [OrdinalEncoder(["a"]), OneHotEncoder(["a"]), LabelEncoder("a")]
)
def test_encoders_refuse_nulls_in_fit_and_transform(encoder):
    nulls, full = ld.from_items([{"a": 1}, {"a": None}]), ld.from_items([{"a": 1}, {"a": 1}])
    with pytest.raises(ValueError, match="Unable to fit column because it contains null"):
        encoder.fit(nulls)
    encoder.fit(full)
    with pytest.raises(ValueError, match=r"Unable to transform columns \['a'\]"):
        encoder.transform(nulls).materialize()
    with pytest.raises(ValueError, match="contain null values"):
        encoder.transform_batch(pd.DataFrame({"a": [1, None]}))


def test_one_hot_encodes_whole_lists_and_multi_hot_single_values():
    ds = ld.from_items(
        [{"d": ["warm"], "b": "cold"}, {"d": [], "b": "hot"}, {"d": ["warm"], "b": "cold"}]
    )
    one_hot = OneHotEncoder(["d"]).fit(ds)
    assert one_hot.stats_ == {"unique_values(d)": {(): 0, ("warm",): 1}}
    assert one_hot.transform(ds).take_batch()["d"].tolist() == [[0, 1], [1, 0], [0, 1]]
    multi = MultiHotEncoder(["b"]).fit(ds)
    assert multi.stats_ == {"unique_values(b)": {"cold": 0, "hot": 1}}
    assert multi.transform(ds).take_batch()["b"].tolist() == [[1, 0], [0, 1], [1, 0]]


@settings(**SETTINGS)
@given(st.lists(st.sampled_from(["cat", "dog", "emu"]), min_size=1, max_size=20))
def test_label_encoder_matches_scikit_learn_and_inverts(labels):
    ds = ld.from_items([{"y": y, "x": i} for i, y in enumerate(labels)])
    encoder = LabelEncoder("y")
    encoded = encoder.fit_transform(ds)
    assert encoded.to_pandas()["y"].tolist() == skp.LabelEncoder().fit_transform(labels).tolist()
    assert [r["y"] for r in encoder.inverse_transform(encoded).take_all()] == labels
    into = LabelEncoder("y", output_column="label").fit_transform(ds).take(1)[0]
    assert into["y"] == labels[0] and isinstance(into["label"], int)


def test_categorizer_matches_pandas_categoricals():
    df = pd.DataFrame({"c": ["b", "a", "b"], "d": ["u", "v", "u"]})
    ds = ld.from_pandas(df)
    given_dtype = pd.CategoricalDtype(["v", "u", "w"], ordered=True)
    categorizer = Categorizer(["c", "d"], dtypes={"d": given_dtype}).fit(ds)
    assert categorizer.stats_["c"] == pd.CategoricalDtype(["a", "b"])
    got = categorizer.transform(ds).to_pandas()
    expected = df.astype({"c": pd.CategoricalDtype(["a", "b"]), "d": given_dtype})
    pd.testing.assert_frame_equal(got, expected)
    pd.testing.assert_frame_equal(categorizer.transform_batch(df), expected)
    # with every dtype given there is nothing to fit
    fixed = Categorizer(["d"], dtypes={"d": given_dtype})
    assert fixed.transform(ds).to_pandas()["d"].dtype == given_dtype


def test_encoders_check_their_columns():
    ds = ld.from_items([{"c": "a"}])
    encoder = OrdinalEncoder(["c"]).fit(ds)
    with pytest.raises(ValueError, match=r"columns \['c'\] do not exist.*HINT"):
        encoder.transform_batch(pd.DataFrame({"other": [1]}))
    with pytest.raises(ValueError, match="not among columns"):
        Categorizer(["c"], dtypes={"x": pd.CategoricalDtype(["a"])})


def test_max_categories_ties_go_to_the_value_seen_first_as_in_ray():
    # Ray counts with pandas' value_counts and keeps Counter.most_common(k): a tie goes to
    # the value that appears first
    ds = ld.from_pandas([pd.DataFrame({"c": ["b", "a"]}), pd.DataFrame({"c": ["a", "b", "c"]})])
    assert OneHotEncoder(["c"], max_categories={"c": 1}).fit(ds).stats_ == {
        "unique_values(c)": {"b": 0}
    }
    ties = ld.from_items([{"c": x} for x in "zyxxyz"])
    assert OneHotEncoder(["c"], max_categories={"c": 2}).fit(ties).stats_ == {
        "unique_values(c)": {"y": 0, "z": 1}
    }
