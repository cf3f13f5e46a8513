"""Numpy batches to TensorFlow tensors, and ``to_tf()``'s ``tf.data.Dataset``.

TensorFlow is imported inside the functions: ``import lockstep.data`` must not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np


def import_tensorflow() -> Any:
    """The tensorflow module, or an ImportError that says how to install it."""
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise ImportError(
            "TensorFlow is not installed; iter_tf_batches() and to_tf() need it. "
            "HINT: pip install tensorflow"
        ) from exc
    return tf


def batch_converter(dtypes: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A function from a numpy batch to a dict of tf tensors with ``dtypes``."""
    tf = import_tensorflow()

    def convert(batch: Mapping[str, Any]) -> dict[str, Any]:
        return {
            name: tf.convert_to_tensor(_plain(array), dtype=_dtype_for(dtypes, name))
            for name, array in batch.items()
        }

    return convert


def _plain(array: np.ndarray[Any, Any]) -> Any:
    """Strings as bytes, so that TensorFlow makes a string tensor of them."""
    if array.dtype == object:
        return [v.encode() if isinstance(v, str) else v for v in array]
    return array


def _dtype_for(dtypes: Any, name: str) -> Any:
    if isinstance(dtypes, Mapping):
        return dtypes.get(name)
    return dtypes


def _spec(tf: Any, array: np.ndarray[Any, Any]) -> Any:
    dtype = (
        tf.string if array.dtype == object or array.dtype.kind in "US" else tf.as_dtype(array.dtype)
    )
    return tf.TensorSpec(shape=(None, *array.shape[1:]), dtype=dtype)


def _select(tf: Any, batch: Mapping[str, Any], columns: str | list[str], spec: Any) -> Any:
    if isinstance(columns, str):
        return _tensor(tf, batch[columns], spec)
    return {c: _tensor(tf, batch[c], spec[c]) for c in columns}


def _tensor(tf: Any, array: np.ndarray[Any, Any], spec: Any) -> Any:
    tensor = tf.convert_to_tensor(_plain(array))
    if tensor.dtype != spec.dtype and spec.dtype != tf.string:
        tensor = tf.cast(tensor, spec.dtype)  # a type spec the user gave wins
    return tensor


def _specs(tf: Any, sample: Mapping[str, Any], columns: str | list[str]) -> Any:
    if isinstance(columns, str):
        return _spec(tf, sample[columns])
    return {c: _spec(tf, sample[c]) for c in columns}


def check_columns(schema_names: list[str], columns: str | list[str], what: str) -> None:
    """Raise a ValueError naming the columns of ``columns`` that do not exist."""
    wanted = [columns] if isinstance(columns, str) else list(columns)
    missing = [c for c in wanted if c not in schema_names]
    if missing:
        raise ValueError(
            f"to_tf: {what} {missing} are not columns of the dataset {schema_names}. "
            "HINT: pass names from ds.columns()"
        )


def tf_dataset(
    batches: Callable[[], Iterable[Mapping[str, Any]]],
    sample: Mapping[str, Any],
    feature_columns: str | list[str],
    label_columns: str | list[str],
    additional_columns: str | list[str] | None,
    type_specs: tuple[Any, Any, Any],
) -> Any:
    """A ``tf.data.Dataset`` of ``(features, labels[, additional])`` over ``batches()``.

    ``sample`` is one batch, from which the tensor specs are taken unless given.
    """
    tf = import_tensorflow()
    feature_spec, label_spec, additional_spec = type_specs
    groups = [feature_columns, label_columns] + ([additional_columns] if additional_columns else [])
    given = [feature_spec, label_spec, additional_spec]
    signature = tuple(
        spec if spec is not None else _specs(tf, sample, cols)
        for cols, spec in zip(groups, given, strict=False)
    )

    def generate() -> Iterator[tuple[Any, ...]]:
        for batch in batches():
            yield tuple(
                _select(tf, batch, cols, spec) for cols, spec in zip(groups, signature, strict=True)
            )

    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    # Each worker already holds its own shard: TensorFlow must not shard it again.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)
