"""iter_tf_batches and to_tf (they need TensorFlow: skipped where it is not installed)."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import lockstep.data as ld  # noqa: E402


def test_iter_tf_batches_gives_tensors():
    ds = ld.from_items([{"x": float(i), "s": f"v{i}"} for i in range(5)])
    batches = list(ds.iter_tf_batches(batch_size=2, dtypes={"x": tf.float32}))
    assert [int(b["x"].shape[0]) for b in batches] == [2, 2, 1]
    assert batches[0]["x"].dtype == tf.float32
    assert batches[0]["s"].dtype == tf.string


def test_to_tf_feeds_keras_fit():
    ds = ld.from_items([{"x": i / 20, "y": 2 * i / 20} for i in range(20)])
    tf_ds = ds.to_tf(feature_columns="x", label_columns="y", batch_size=4)
    features, labels = next(iter(tf_ds))
    assert features.shape == (4,) and labels.shape == (4,)
    assert sum(int(f.shape[0]) for f, _ in tf_ds) == 20  # every iteration is a new pass
    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(tf_ds.map(lambda f, y: (tf.reshape(f, (-1, 1)), y)), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


def test_to_tf_with_lists_of_columns_gives_dicts():
    ds = ld.from_items([{"a": 1.0, "b": 2.0, "y": 0}])
    features, labels = next(iter(ds.to_tf(["a", "b"], ["y"])))
    assert sorted(features) == ["a", "b"] and list(labels) == ["y"]
    np.testing.assert_allclose(features["b"].numpy(), [2.0])
    with pytest.raises(ValueError, match=r"\['nope'\] are not columns"):
        ds.to_tf("nope", "y")


def test_a_worker_shard_iterator_converts_too():
    it = ld.range(8).split(2, equal=True)[1].iterator()
    assert [int(v) for b in it.iter_tf_batches(batch_size=4) for v in b["id"]] == [4, 5, 6, 7]
    spec = tf.TensorSpec(shape=(None,), dtype=tf.float32)
    tf_ds = it.to_tf("id", "id", batch_size=4, feature_type_spec=spec)
    assert next(iter(tf_ds))[0].dtype == tf.float32


@pytest.mark.parametrize("make", [lambda ds: ds, lambda ds: ds.iterator()])
def test_iter_tf_batches_made_once_reads_the_data_again_at_every_epoch(make):
    batches = make(ld.range(6)).iter_tf_batches(batch_size=6)
    for _ in range(3):
        assert [b["id"].numpy().tolist() for b in batches] == [list(range(6))]


def test_to_tf_made_once_reads_the_data_again_at_every_epoch():
    ds = ld.from_items([{"x": float(i), "y": i} for i in range(4)])
    tf_data = ds.iterator().to_tf("x", "y", batch_size=4)
    for _ in range(2):
        assert [x.numpy().tolist() for x, _ in tf_data] == [[0.0, 1.0, 2.0, 3.0]]
