"""iter_tf_batches and to_tf (TensorFlow is in the test extra: a broken install fails)."""

import numpy as np
import pytest
import tensorflow as tf

import lockstep.data as ld


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
    history = model.fit(
        # Keras cannot count a generator's batches: a pass (20 rows in batches of 4) is 5
        # steps, and each epoch goes on into the next pass
        tf_ds.map(lambda f, y: (tf.reshape(f, (-1, 1)), y)).repeat(),
        epochs=2,
        steps_per_epoch=5,
        shuffle=False,  # the dataset's order is to_tf's to choose
        verbose=0,
    )
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


def test_from_tf_reads_dict_elements_as_rows_and_others_as_items():
    rows = ld.from_tf(tf.data.Dataset.from_tensor_slices({"x": [1, 2], "y": [0.5, 1.5]}))
    assert rows.take_all() == [{"x": 1, "y": 0.5}, {"x": 2, "y": 1.5}]
    pairs = ld.from_tf(tf.data.Dataset.from_tensor_slices(([1, 2], [3, 4])))
    assert [tuple(int(v) for v in r["item"]) for r in pairs.take_all()] == [(1, 3), (2, 4)]


def test_read_tfrecords_reads_tf_train_examples(tmp_path):
    def feature(values):
        if isinstance(values[0], bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        if isinstance(values[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    for part in range(2):
        with tf.io.TFRecordWriter(str(tmp_path / f"{part}.tfrecords")) as writer:
            for i in range(3):
                features = {
                    "id": feature([part * 3 + i]),
                    "name": feature([b"n%d" % i]),
                    "vector": feature([1.0, 2.0]),
                }
                example = tf.train.Example(features=tf.train.Features(feature=features))
                writer.write(example.SerializeToString())
    ds = ld.read_tfrecords(str(tmp_path))
    rows = ds.take_all()
    assert [r["id"] for r in rows] == list(range(6))
    assert rows[0]["name"] == b"n0" and rows[0]["vector"] == [1.0, 2.0]
    (tmp_path / "broken.tfrecords").write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match="ends inside a record header"):
        ld.read_tfrecords(str(tmp_path / "broken.tfrecords")).take_all()
