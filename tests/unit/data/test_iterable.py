"""Consuming data: batches, formats, local shuffle, torch tensors, the older to_torch()."""

import gc
import sys
import threading

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lockstep.data as ld
from lockstep.data._prefetch import THREAD_NAME
from tests.unit.data.strategies import SETTINGS, blocks, dataset, oracle


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


@settings(**SETTINGS)
@given(blocks(), st.integers(1, 9), st.booleans(), st.integers(0, 3))
def test_batches_have_the_asked_size_and_cover_the_rows(parts, batch_size, drop_last, prefetch):
    rows = oracle(parts)["row"].tolist()
    batches = list(
        dataset(parts).iter_batches(
            batch_size=batch_size, drop_last=drop_last, prefetch_batches=prefetch
        )
    )
    sizes = [len(b["row"]) for b in batches]
    full = len(rows) // batch_size
    assert sizes[:full] == [batch_size] * full
    if drop_last or len(rows) % batch_size == 0:
        assert len(sizes) == full
    else:
        assert sizes[-1] == len(rows) % batch_size
    got = [int(r) for b in batches for r in b["row"]]
    assert got == rows[: len(got)]


@settings(**SETTINGS)
@given(blocks(min_rows=1))
def test_each_batch_format_holds_the_same_values(parts):
    df = oracle(parts)
    ds = dataset(parts)
    numpy_batch = ds.take_batch(100)
    pandas_batch = ds.take_batch(100, batch_format="pandas")
    arrow_batch = ds.take_batch(100, batch_format="pyarrow")
    assert isinstance(pandas_batch, pd.DataFrame) and isinstance(arrow_batch, pa.Table)
    np.testing.assert_array_equal(numpy_batch["i"], df["i"].to_numpy())  # nulls are NaN
    np.testing.assert_array_equal(numpy_batch["f"], df["f"].to_numpy())
    assert list(numpy_batch["s"]) == [None if v is None or v != v else v for v in df["s"]]
    assert pandas_batch["row"].tolist() == df["row"].tolist()
    assert arrow_batch.column("row").to_pylist() == df["row"].tolist()


def test_batch_size_none_gives_whole_blocks():
    ds = ld.range(10, override_num_blocks=3)
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=None)] == [3, 3, 4]


@settings(**SETTINGS)
@given(blocks(min_rows=1), st.integers(1, 8), st.integers(1, 30), st.integers(0, 1000))
def test_local_shuffle_is_a_seeded_permutation(parts, batch_size, buffer, seed):
    rows = oracle(parts)["row"].tolist()

    def order():
        batches = dataset(parts).iter_batches(
            batch_size=batch_size, local_shuffle_buffer_size=buffer, local_shuffle_seed=seed
        )
        return [[int(r) for r in b["row"]] for b in batches]

    first = order()
    assert sorted(r for b in first for r in b) == rows
    assert all(len(b) == batch_size for b in first[:-1])
    assert order() == first


def test_local_shuffle_mixes_rows():
    batches = ld.range(1000).iter_batches(
        batch_size=100, local_shuffle_buffer_size=200, local_shuffle_seed=0
    )
    got = [int(i) for b in batches for i in b["id"]]
    assert sorted(got) == list(range(1000)) and got != list(range(1000))


def test_each_iteration_is_a_new_pass():
    ds = ld.range(5)
    assert [list(b["id"]) for b in ds.iter_batches(batch_size=5)] == [[0, 1, 2, 3, 4]]
    assert [list(b["id"]) for b in ds.iter_batches(batch_size=5)] == [[0, 1, 2, 3, 4]]
    assert [r["id"] for r in ds.iter_rows()] == [0, 1, 2, 3, 4]


def test_the_prefetch_thread_stops_when_the_loop_breaks():
    batches = iter(ld.range(10_000).iter_batches(batch_size=10, prefetch_batches=4))
    for _ in batches:
        break
    assert prefetch_threads()
    batches.close()
    assert not prefetch_threads()


def test_the_prefetch_thread_stops_when_the_iterator_is_dropped():
    batches = iter(ld.range(10_000).iter_batches(batch_size=10))
    next(batches)
    assert prefetch_threads()
    del batches
    gc.collect()
    assert not prefetch_threads()


def test_an_error_while_reading_reaches_the_loop_and_stops_the_thread():
    def boom(batch):
        raise KeyError("broken batch")

    ds = ld.range(100).map_batches(boom)
    with pytest.raises(KeyError, match="broken batch"):
        for _ in ds.iter_batches(prefetch_batches=2):
            pass
    assert not prefetch_threads()


def test_nothing_starts_before_the_first_batch_is_asked_for():
    batches = iter(ld.range(10).iter_batches())
    assert not prefetch_threads()
    del batches


def test_prefetching_reads_ahead_while_the_consumer_works():
    produced = []
    read_ahead = threading.Event()

    def count(batch):
        produced.append(1)
        if len(produced) >= 6:  # one handed over, up to five queued, one being made
            read_ahead.set()
        return batch

    ds = ld.range(50, override_num_blocks=50).map_batches(count)
    batches = iter(ds.iter_batches(batch_size=1, prefetch_batches=5))
    next(batches)
    assert read_ahead.wait()
    batches.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive int"),
        ({"batch_format": "dict"}, "unknown batch_format"),
        ({"prefetch_batches": -1}, "prefetch_batches"),
        ({"batch_size": None, "local_shuffle_buffer_size": 10}, "needs a batch_size"),
    ],
)
def test_bad_iteration_arguments_fail_at_the_call(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ld.range(3).iter_batches(**kwargs)


def test_torch_batches_are_tensors_with_the_asked_dtypes():
    ds = ld.from_items([{"x": float(i), "y": i, "v": [i, i]} for i in range(5)])
    batches = list(ds.iter_torch_batches(batch_size=2, dtypes={"x": torch.float32}))
    assert [len(b["x"]) for b in batches] == [2, 2, 1]
    first = batches[0]
    assert first["x"].dtype == torch.float32 and first["y"].dtype == torch.int64
    assert first["v"].shape == (2, 2)
    assert torch.equal(torch.cat([b["y"] for b in batches]), torch.arange(5))
    one = next(iter(ds.iter_torch_batches(dtypes=torch.float64, device="cpu")))
    assert all(t.dtype == torch.float64 for t in one.values())


def test_torch_tensors_own_their_memory():
    ds = ld.range(4).materialize()
    batch = next(iter(ds.iter_torch_batches(batch_size=4)))
    batch["id"] += 100  # writing into the batch must not change the dataset
    assert ds.take_all() == [{"id": 0}, {"id": 1}, {"id": 2}, {"id": 3}]


def test_collate_fn_builds_the_batch_from_numpy():
    ds = ld.range(4)
    batches = ds.iter_torch_batches(
        batch_size=2, collate_fn=lambda b: torch.as_tensor(b["id"]) * 10
    )
    assert [b.tolist() for b in batches] == [[0, 10], [20, 30]]
    with pytest.raises(ValueError, match="dtypes is not used with collate_fn"):
        ds.iter_torch_batches(collate_fn=lambda b: b, dtypes=torch.float32)


def test_a_string_column_cannot_become_a_tensor():
    ds = ld.from_items([{"s": "a"}])
    with pytest.raises(ValueError, match=r"column 's' holds str values.*HINT"):
        next(iter(ds.iter_torch_batches()))


def test_to_torch_gives_features_and_label_like_the_older_ray_api():
    ds = ld.from_items([{"a": float(i), "b": 2.0 * i, "y": i % 2} for i in range(6)])
    torch_ds = ds.to_torch(
        label_column="y",
        feature_columns=["a", "b"],
        label_column_dtype=torch.float,
        feature_column_dtypes=torch.float,
        batch_size=4,
    )
    assert isinstance(torch_ds, torch.utils.data.IterableDataset)
    for _ in range(2):  # every iteration is a new pass
        pairs = list(torch_ds)
        features = torch.cat([f for f, _ in pairs])
        labels = torch.cat([y for _, y in pairs])
        assert features.shape == (6, 2) and labels.shape == (6, 1)
        assert torch.equal(features[:, 1], 2 * features[:, 0])
        assert labels.dtype == torch.float32
    loader = torch.utils.data.DataLoader(torch_ds, batch_size=None)
    assert sum(len(y) for _, y in loader) == 6


def test_to_torch_feature_groups_and_defaults():
    ds = ld.from_items([{"a": 1.0, "b": 2.0, "c": 3.0, "y": 0}])
    features, _label = next(iter(ds.to_torch(label_column="y")))
    assert features.tolist() == [[1.0, 2.0, 3.0]]
    groups, _ = next(iter(ds.to_torch(label_column="y", feature_columns=[["a"], ["b", "c"]])))
    assert [g.tolist() for g in groups] == [[[1.0]], [[2.0, 3.0]]]
    named, _ = next(iter(ds.to_torch(label_column="y", feature_columns={"x": ["a", "c"]})))
    assert named["x"].tolist() == [[1.0, 3.0]]
    flat, flat_label = next(
        iter(
            ds.to_torch(
                label_column="y",
                feature_columns=["a"],
                unsqueeze_label_tensor=False,
                unsqueeze_feature_tensors=False,
            )
        )
    )
    assert flat.shape == (1,) and flat_label.shape == (1,)
    with pytest.raises(ValueError, match=r"columns \['nope'\] do not exist"):
        ds.to_torch(label_column="nope")


def test_to_torch_pickles_for_dataloader_workers():
    import pickle

    torch_ds = ld.range(3).to_torch(feature_columns=["id"], batch_size=3)
    copy = pickle.loads(pickle.dumps(torch_ds))
    assert [f.tolist() for f, _ in copy] == [[[0], [1], [2]]]


def test_tensorflow_methods_say_how_to_install_it_when_it_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # "import tensorflow" now fails
    with pytest.raises(ImportError, match="pip install tensorflow"):
        ld.range(2).to_tf("id", "id")
    with pytest.raises(ImportError, match="pip install tensorflow"):
        ld.range(2).iter_tf_batches()


@pytest.mark.parametrize("make", [lambda ds: ds, lambda ds: ds.iterator()])
def test_an_iterable_made_once_reads_the_data_again_at_every_epoch(make):
    source = make(ld.range(6))
    batches = source.iter_batches(batch_size=4)
    rows = source.iter_rows()
    tensors = source.iter_torch_batches(batch_size=6, dtypes=torch.float32)
    for _ in range(3):
        assert [b["id"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5]]
        assert [r["id"] for r in rows] == list(range(6))
        assert [b["id"].tolist() for b in tensors] == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]


def test_a_local_shuffle_without_a_seed_differs_between_epochs_and_with_one_repeats():
    ds = ld.range(200)
    unseeded = ds.iter_batches(batch_size=200, local_shuffle_buffer_size=200)
    first, second = ([b["id"].tolist() for b in unseeded] for _ in range(2))
    assert first != second and sorted(first[0]) == sorted(second[0]) == list(range(200))
    seeded = ds.iter_batches(batch_size=200, local_shuffle_buffer_size=200, local_shuffle_seed=3)
    assert [b["id"].tolist() for b in seeded] == [b["id"].tolist() for b in seeded]


# After Ray's python/ray/data/tests/test_iterator.py and the older test_torch.py.


def test_a_column_of_nulls_becomes_a_nan_tensor():
    table = pa.table({"fruit_apple": pa.chunked_array([pa.nulls(1), pa.nulls(2)])})
    (batch,) = list(ld.from_arrow(table).iterator().iter_torch_batches())
    assert batch["fruit_apple"].shape == (3,) and torch.isnan(batch["fruit_apple"]).all()


def test_to_torch_gives_each_column_its_own_axis_as_ray_does():
    arr = np.arange(24).reshape(3, 2, 2, 2)
    ds = ld.from_items([{"one": arr[i], "two": arr[i] + 1, "label": float(i)} for i in range(3)])
    with pytest.warns(DeprecationWarning, match="iter_torch_batches"):
        torch_ds = ds.to_torch(label_column="label", batch_size=3, unsqueeze_label_tensor=False)
    features, labels = next(iter(torch_ds))
    assert features.shape == (3, 2, 2, 2, 2)
    np.testing.assert_array_equal(features.numpy(), np.stack([arr, arr + 1], axis=1))
    lists = ld.from_items([{"v": [1, 2, 3], "y": 1.0}, {"v": [4, 5, 6], "y": 2.0}])
    with pytest.warns(DeprecationWarning):
        features, labels = next(iter(lists.to_torch(label_column="y", batch_size=2)))
    assert features.shape == (2, 1, 3) and labels.shape == (2, 1)


def test_numpy_integers_are_batch_sizes():
    ds = ld.range(10)
    assert [len(b["id"]) for b in ds.iter_batches(batch_size=np.int64(4))] == [4, 4, 2]
    assert ds.map_batches(lambda b: b, batch_size=np.int32(3)).count() == 10
    assert ds.take(np.int64(2)) == [{"id": 0}, {"id": 1}]
