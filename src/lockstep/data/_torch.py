"""Numpy batches to torch tensors, and the older ``to_torch()`` iterable dataset.

torch is imported inside the functions: ``import lockstep.data`` must not import it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np


def resolve_device(device: Any) -> Any:
    """``"auto"`` is the current CUDA device when there is one, else the CPU (as in Ray)."""
    import torch

    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    return torch.device(device)


def to_tensor(array: np.ndarray[Any, Any], name: str, dtype: Any = None, device: Any = None) -> Any:
    """One column as a tensor that owns its memory (Arrow buffers are read-only and shared)."""
    import torch

    if array.dtype == object and all(v is None for v in array):
        array = np.full(len(array), np.nan)  # a column of nulls: NaN, as Ray gives
    if array.dtype == object or array.dtype.kind in "USMm":
        sample = next((v for v in array if v is not None), None)
        raise ValueError(
            f"column {name!r} holds {type(sample).__name__} values, which a tensor cannot "
            f"hold. HINT: leave it out with select_columns()/drop_columns(), or encode it "
            "(e.g. lockstep.data.preprocessors.OrdinalEncoder)"
        )
    if not array.flags.writeable:
        array = array.copy()
    tensor = torch.from_numpy(array)
    if dtype is not None:
        tensor = tensor.to(dtype)
    if device is not None and device.type != "cpu":
        tensor = tensor.to(device, non_blocking=True)
    return tensor


def batch_converter(dtypes: Any, device: Any) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A function from a numpy batch to a dict of tensors with ``dtypes`` on ``device``."""
    target = resolve_device(device)

    def convert(batch: Mapping[str, Any]) -> dict[str, Any]:
        return {
            name: to_tensor(array, name, _dtype_for(dtypes, name), target)
            for name, array in batch.items()
        }

    return convert


def _dtype_for(dtypes: Any, name: str) -> Any:
    if isinstance(dtypes, Mapping):
        return dtypes.get(name)
    return dtypes


def features_and_label(
    batch: Mapping[str, np.ndarray[Any, Any]],
    label_column: str | None,
    feature_columns: Any,
    label_column_dtype: Any,
    feature_column_dtypes: Any,
    unsqueeze_label_tensor: bool,
    unsqueeze_feature_tensors: bool,
) -> tuple[Any, Any]:
    """``(features, label)`` for one batch, shaped as Ray's ``Dataset.to_torch`` gives them."""
    label = None
    if label_column is not None:
        label = to_tensor(batch[label_column], label_column, label_column_dtype)
        if unsqueeze_label_tensor and label.ndim == 1:
            label = label.unsqueeze(1)
    if feature_columns is None:
        feature_columns = [c for c in batch if c != label_column]
    if isinstance(feature_columns, Mapping):
        features: Any = {
            key: _stack(
                batch, cols, _dtype_for(feature_column_dtypes, key), unsqueeze_feature_tensors
            )
            for key, cols in feature_columns.items()
        }
    elif feature_columns and not isinstance(feature_columns[0], str):
        dtypes = _per_group(feature_column_dtypes, len(feature_columns))
        features = [
            _stack(batch, cols, dtype, unsqueeze_feature_tensors)
            for cols, dtype in zip(feature_columns, dtypes, strict=True)
        ]
    else:
        features = _stack(batch, feature_columns, feature_column_dtypes, unsqueeze_feature_tensors)
    return features, label


def _per_group(dtypes: Any, count: int) -> list[Any]:
    if isinstance(dtypes, Sequence) and not isinstance(dtypes, str):
        return list(dtypes)
    return [dtypes] * count


def _stack(batch: Mapping[str, Any], columns: Sequence[str], dtype: Any, unsqueeze: bool) -> Any:
    import torch

    # Ray's shapes: each column gets an axis after the batch's (a column of vectors of 3:
    # (batch, 1, 3)), then the columns are concatenated along it
    tensors = []
    for name in columns:
        tensor = to_tensor(batch[name], name, dtype)
        tensors.append(tensor.unsqueeze(1) if unsqueeze else tensor)
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=1)


@functools.cache
def _iterable_dataset_class() -> type:
    from torch.utils.data import IterableDataset

    class TorchIterableDataset(IterableDataset):  # type: ignore[type-arg]
        """A torch IterableDataset whose every ``iter()`` is a fresh pass over the data."""

        def __init__(self, batches: Callable[[], Iterable[Any]], shape: tuple[Any, ...]):
            self._batches = batches
            self._shape = shape

        def __iter__(self) -> Iterator[tuple[Any, Any]]:
            for batch in self._batches():
                yield features_and_label(batch, *self._shape)

        def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
            # the class is made when torch is first needed; pickle by the factory instead
            return torch_iterable, (self._batches, self._shape)

    return TorchIterableDataset


def torch_iterable(batches: Callable[[], Iterable[Any]], shape: tuple[Any, ...]) -> Any:
    """A ``torch.utils.data.IterableDataset`` of ``(features, label)`` over ``batches()``."""
    return _iterable_dataset_class()(batches, shape)
