"""cloudpickle as lockstep uses it: functions sent by value keep their file and lines.

One pickler for everything that carries a user's function to another process (the
training function, a dataset's transforms), so that a worker's traceback names the user's
file and line in every case.
"""

from __future__ import annotations

import io
import marshal
import types
from functools import cache
from typing import Any


def to_bytes(obj: Any) -> bytes:
    """``obj`` pickled as cloudpickle does, each code object keeping its file name.

    Example:
        >>> import pickle
        >>> fn = pickle.loads(to_bytes(lambda: 1))
        >>> fn.__code__.co_filename.startswith("<doctest")  # not "<dynamic-code>"
        True
    """
    buffer = io.BytesIO()
    pickler_class()(buffer).dump(obj)
    return buffer.getvalue()


@cache
def pickler_class() -> type:
    """cloudpickle's pickler, with code objects sent whole by ``marshal``.

    cloudpickle 3.1.3 and later replace each code object's ``co_filename`` with
    ``"<dynamic-code>"`` (for deterministic payloads), which would leave a worker's
    traceback without the user's file and source lines. Workers run the driver's Python
    version (as Ray requires too), so ``marshal`` rebuilds the code exactly.
    """
    import cloudpickle

    class _Pickler(cloudpickle.CloudPickler):  # type: ignore[misc]
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.CodeType):
                return marshal.loads, (marshal.dumps(obj),)
            return super().reducer_override(obj)

    return _Pickler
