"""The Preprocessor contract: fitting first, any batch kind, pickling, checkpoints,
streaming statistics."""

import pickle

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockstep.data as ld
from lockstep._core.checkpoint import Checkpoint
from lockstep.data.preprocessors import (
    Chain,
    Concatenator,
    OneHotEncoder,
    Preprocessor,
    PreprocessorNotFittedException,
    SimpleImputer,
    StandardScaler,
)


def fitted_chain():
    ds = ld.from_items([{"a": float(i), "c": "xy"[i % 2]} for i in range(10)])
    return Chain(StandardScaler(["a"]), OneHotEncoder(["c"])).fit(ds)


def test_transforming_before_fit_is_a_clear_error():
    with pytest.raises(PreprocessorNotFittedException, match=r"not fitted.*HINT: call"):
        StandardScaler(["a"]).transform(ld.range(3))
    with pytest.raises(PreprocessorNotFittedException, match="SimpleImputer is not fitted"):
        Chain(SimpleImputer(["a"]), StandardScaler(["a"])).transform_batch(pd.DataFrame({"a": [1]}))
    with pytest.raises(AttributeError):
        StandardScaler(["a"]).stats_  # noqa: B018 -- exists only after fit, as in scikit-learn


def test_fit_takes_a_dataset():
    with pytest.raises(ValueError, match=r"takes a lockstep.data Dataset.*HINT"):
        StandardScaler(["a"]).fit(pd.DataFrame({"a": [1.0]}))


def test_every_batch_kind_gives_the_same_values_in_its_own_kind():
    prep = fitted_chain()
    frame = pd.DataFrame({"a": [0.0, 9.0], "c": ["y", "x"]}, index=[5, 6])
    from_pandas = prep.transform_batch(frame)
    from_numpy = prep.transform_batch({"a": np.array([0.0, 9.0]), "c": np.array(["y", "x"])})
    from_arrow = prep.transform_batch(pa.table({"a": [0.0, 9.0], "c": ["y", "x"]}))
    assert list(from_pandas.index) == [5, 6]
    assert isinstance(from_numpy, dict) and isinstance(from_arrow, pa.Table)
    np.testing.assert_allclose(from_pandas["a"], from_numpy["a"])
    np.testing.assert_array_equal(np.stack(from_pandas["c"]), from_numpy["c"])
    assert from_arrow.column("a").to_pylist() == list(from_numpy["a"])
    with pytest.raises(ValueError, match="pandas DataFrame, a dict of numpy arrays"):
        prep.transform_batch([1, 2])


def test_serving_applies_exactly_the_training_transform():
    ds = ld.from_items([{"a": float(i), "c": "xy"[i % 3 == 0]} for i in range(12)])
    prep = Chain(
        StandardScaler(["a"]), OneHotEncoder(["c"]), Concatenator(["a", "c"], flatten=True)
    )
    trained = prep.fit_transform(ds).take_batch(12)["concat_out"]
    served = prep.transform_batch(ds.to_pandas())["concat_out"]
    np.testing.assert_allclose(np.stack(served), trained)


def test_a_fitted_preprocessor_survives_pickle():
    prep = fitted_chain()
    batch = pd.DataFrame({"a": [3.0], "c": ["y"]})
    for copy in (pickle.loads(pickle.dumps(prep)), Preprocessor.deserialize(prep.serialize())):
        pd.testing.assert_frame_equal(copy.transform_batch(batch), prep.transform_batch(batch))
        assert copy.preprocessors[0].stats_ == prep.preprocessors[0].stats_
    with pytest.raises(ValueError, match="not made by serialize"):
        Preprocessor.deserialize(b"junk")


def test_a_preprocessor_survives_a_checkpoint_round_trip(tmp_path):
    prep = fitted_chain()
    checkpoint = Checkpoint.from_directory(tmp_path)
    # the format of Ray's framework checkpoints: hex cloudpickle under "preprocessor_pkl"
    checkpoint.set_metadata({"preprocessor_pkl": cloudpickle.dumps(prep).hex()})
    metadata = Checkpoint(str(tmp_path)).get_metadata()
    restored = pickle.loads(bytes.fromhex(metadata["preprocessor_pkl"]))
    batch = pd.DataFrame({"a": [1.0, 2.0], "c": ["x", "y"]})
    pd.testing.assert_frame_equal(restored.transform_batch(batch), prep.transform_batch(batch))


def test_fit_streams_over_files_with_memory_bounded_by_a_file(tmp_path):
    for i in range(20):
        values = np.arange(i * 10_000, (i + 1) * 10_000, dtype=np.float64)
        pq.write_table(pa.table({"a": values, "b": -values}), tmp_path / f"{i:02d}.parquet")
    file_bytes = pq.read_table(tmp_path / "00.parquet").nbytes
    ds = ld.read_parquet(str(tmp_path))
    baseline = pa.total_allocated_bytes()
    peak = 0

    def track(batch):
        nonlocal peak
        peak = max(peak, pa.total_allocated_bytes() - baseline)
        return batch

    stats = StandardScaler(["a", "b"]).fit(ds.map_batches(track, batch_format="pyarrow")).stats_
    all_values = np.arange(200_000, dtype=np.float64)
    assert stats["mean(a)"] == pytest.approx(all_values.mean())
    assert stats["std(b)"] == pytest.approx(all_values.std())
    assert peak < 3 * file_bytes  # the whole dataset is 20 files


def test_transform_is_lazy_and_keeps_row_counts_known():
    ds = ld.range(100)
    out = StandardScaler(["id"]).fit(ds).transform(ds)
    assert out._plan.known_counts() == [100]  # a split of the transformed data reads nothing
    assert [p.count() for p in out.split(4, equal=True)] == [25] * 4


def test_has_stats_fit_status_and_preferred_format():
    prep = StandardScaler(["id"])
    assert not prep.has_stats() and prep.fit_status().value == "NOT_FITTED"
    prep.fit(ld.range(3))
    assert prep.has_stats() and prep.fit_status().value == "FITTED"
    assert prep.preferred_batch_format() == "pyarrow"
    assert repr(prep) == "StandardScaler(columns=['id'], output_columns=['id'])"


# After Ray's python/ray/data/tests/preprocessors/test_encoder.py (TestEncoderSerialization)
# and test_imputer.py: the serialized record of a preprocessor.


def test_a_serializable_preprocessor_is_rebuilt_from_its_record():
    from lockstep.data.preprocessor import SerializablePreprocessorBase
    from lockstep.data.preprocessors import OneHotEncoder
    from lockstep.data.preprocessors.version_support import UnknownPreprocessorError

    ds = ld.from_items([{"c": c} for c in "abcab"])
    fitted = OneHotEncoder(["c"], max_categories={"c": 2}).fit(ds)
    data = fitted.serialize()
    assert data.startswith(SerializablePreprocessorBase.MAGIC_CLOUDPICKLE)
    record = cloudpickle.loads(data[len(SerializablePreprocessorBase.MAGIC_CLOUDPICKLE) :])
    assert record["fields"] == {
        "columns": ["c"],
        "max_categories": {"c": 2},
        "output_columns": ["c"],
    }
    assert record["stats"] == fitted.stats_
    copy = SerializablePreprocessorBase.deserialize(data)
    assert type(copy) is OneHotEncoder and copy._fitted and copy.stats_ == fitted.stats_
    batch = pd.DataFrame({"c": ["a", "c"]})
    pd.testing.assert_frame_equal(copy.transform_batch(batch), fitted.transform_batch(batch))
    unknown = {"type": "NonExistentEncoder", "version": 1, "fields": {}, "stats": {}}
    with pytest.raises(UnknownPreprocessorError, match="NonExistentEncoder"):
        SerializablePreprocessorBase.deserialize(
            SerializablePreprocessorBase.MAGIC_CLOUDPICKLE + cloudpickle.dumps(unknown)
        )


def test_reprs_are_short_and_name_functions_as_ray_does():
    # after Ray's python/ray/data/tests/preprocessors/test_preprocessors.py (test_repr)
    from lockstep.data.constants import MAX_REPR_LENGTH
    from lockstep.data.preprocessors import CountVectorizer, HashingVectorizer

    for prep in (CountVectorizer(columns=["X"]), HashingVectorizer(columns=["X"], num_features=1)):
        text = repr(prep)
        assert len(text) < MAX_REPR_LENGTH and "tokenization_fn=simple_split_tokenizer" in text


def test_input_and_output_columns_of_every_kind_of_preprocessor():
    # after Ray's python/ray/data/tests/preprocessors/test_preprocessors.py
    from lockstep.data.preprocessors import (
        Concatenator,
        FeatureHasher,
        LabelEncoder,
        StandardScaler,
    )

    assert StandardScaler(["A"], output_columns=["B"]).get_output_columns() == ["B"]
    assert LabelEncoder("t").get_input_columns() == LabelEncoder("t").get_output_columns() == ["t"]
    assert LabelEncoder("t", output_column="e").get_output_columns() == ["e"]
    assert Concatenator(["A", "B"]).get_output_columns() == ["concat_out"]
    hasher = FeatureHasher(["a"], num_features=8, output_column="h")
    assert hasher.get_input_columns() == ["a"] and hasher.get_output_columns() == ["h"]
