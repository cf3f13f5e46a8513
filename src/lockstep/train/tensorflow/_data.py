"""prepare_dataset_shard: a worker's tf.data shard, not sharded again by TensorFlow."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def prepare_dataset_shard(tf_dataset_shard: tf.data.Dataset) -> tf.data.Dataset:
    """Turn TensorFlow's auto-sharding off for a dataset that is already this worker's shard.

    Under ``MultiWorkerMirroredStrategy``, ``model.fit`` splits a dataset across the
    workers again unless told not to; a shard from ``get_dataset_shard`` is split already.
    The result also prefetches (``tf.data.AUTOTUNE``), as Ray's does.

    Example:
        >>> ds = prepare_dataset_shard(tf.data.Dataset.range(3))
        >>> opts = ds.options().experimental_distribute.auto_shard_policy
        >>> opts == tf.data.experimental.AutoShardPolicy.OFF, [int(x) for x in ds]
        (True, [0, 1, 2])
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    prepared: Any = tf_dataset_shard.with_options(options).prefetch(tf.data.AUTOTUNE)
    return prepared
