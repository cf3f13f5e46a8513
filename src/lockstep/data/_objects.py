"""A column type for arbitrary Python objects, so that any item a user has can be a row.

Arrow has no type for a PIL image or a ``(tensor, label)`` tuple; Ray Data stores such values
pickled in a binary column, and so does lockstep: the column keeps its type through slicing,
concatenation and pickling, and converts back to the objects when a batch is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

EXTENSION_NAME = "lockstep.python_object"


class PythonObjectType(pa.ExtensionType):  # type: ignore[misc]
    """Arrow type of a column whose values are pickled Python objects."""

    def __init__(self) -> None:
        super().__init__(pa.large_binary(), EXTENSION_NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: bytes) -> PythonObjectType:
        return cls()

    def __reduce__(self) -> tuple[type[PythonObjectType], tuple[()]]:
        return PythonObjectType, ()


OBJECT_TYPE = PythonObjectType()

try:
    pa.register_extension_type(OBJECT_TYPE)
except pa.ArrowKeyError:  # already registered: this module was reloaded
    pass


def is_object_type(arrow_type: Any) -> bool:
    """Whether ``arrow_type`` is the Python-object column type."""
    return isinstance(arrow_type, PythonObjectType)


def objects_to_array(values: Sequence[Any]) -> Any:
    """An Arrow array holding ``values`` pickled; ``None`` stays null."""
    import cloudpickle

    pickles = [None if v is None else cloudpickle.dumps(v) for v in values]
    sizes = np.fromiter((0 if p is None else len(p) for p in pickles), np.int64, len(pickles))
    offsets = np.zeros(len(pickles) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    # one join and the buffers wrapped, not copied again by an Arrow builder
    data = pa.py_buffer(b"".join(p for p in pickles if p is not None))
    valid = None
    nulls = sum(p is None for p in pickles)
    if nulls:
        mask = np.fromiter((p is not None for p in pickles), np.bool_, len(pickles))
        valid = pa.array(mask).buffers()[1]
    storage = pa.Array.from_buffers(
        pa.large_binary(), len(pickles), [valid, pa.py_buffer(offsets), data], null_count=nulls
    )
    return pa.ExtensionArray.from_storage(OBJECT_TYPE, storage)


def objects_to_chunked_array(values: Iterable[Any], chunk_size: int = 256) -> Any:
    """``values`` pickled into a chunked column, ``chunk_size`` at a time: only one chunk's
    pickles are held twice (as bytes and in Arrow) while the column is built."""
    chunks, pending = [], []
    for value in values:
        pending.append(value)
        if len(pending) == chunk_size:
            chunks.append(objects_to_array(pending))
            pending = []
    if pending or not chunks:
        chunks.append(objects_to_array(pending))
    return pa.chunked_array(chunks, type=OBJECT_TYPE)


def array_to_objects(column: Any) -> np.ndarray[Any, Any]:
    """The objects of a Python-object column (an Array or ChunkedArray), unpickled."""
    import pickle

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = np.empty(len(column), dtype=object)
    i = 0
    for chunk in chunks:
        for raw in chunk.storage.to_pylist():
            out[i] = None if raw is None else pickle.loads(raw)
            i += 1
    return out
