"""Pickling what is sent to workers, with an error that names the object that cannot go."""

from __future__ import annotations

import io
import marshal
import pickle
import types
from collections.abc import Iterator
from functools import cache
from typing import Any

from lockstep._core.errors import NotPicklableError

_MAX_DEPTH = 6


def dumps(obj: Any, what: str) -> bytes:
    """Pickle ``obj`` as cloudpickle does, keeping each code object's file name;
    on failure, a NotPicklableError (a ValueError and a TypeError) naming the unpicklable
    part.

    Args:
        obj: What to pickle.
        what: How the user knows ``obj``, e.g. ``"train_loop_config"``.

    Example:
        >>> import pickle
        >>> fn = pickle.loads(dumps(lambda: 1, "fn"))
        >>> fn.__code__.co_filename.startswith("<doctest")  # not "<dynamic-code>"
        True
    """
    try:
        return to_bytes(obj)
    except Exception as exc:
        culprit = find_unpicklable(obj, what)
        raise NotPicklableError(
            f"{culprit} cannot be pickled ({type(exc).__name__}: {exc}), so it cannot be sent "
            "to the workers. HINT: create it inside the training function instead of "
            "passing or capturing it"
        ) from exc


def dumps_plain(obj: Any, what: str) -> bytes:
    """:func:`dumps`, by the C pickler when that means the same: what cloudpickle sends by
    value (anything defined in ``__main__``, functions and classes no module holds, code
    objects, modules registered to go by value) makes the C pickler fail, or name
    ``__main__``, and then cloudpickle pickles ``obj``. Ten times faster on plain data
    (a Tune trial, an experiment's state).

    Example:
        >>> import pickle
        >>> pickle.loads(dumps_plain({"a": [1.5]}, "a dict"))
        {'a': [1.5]}
        >>> pickle.loads(dumps_plain(lambda: 2, "fn"))()
        2
    """
    if not _by_value_modules():
        try:
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            pass  # a lambda, a local class: cloudpickle sends them by value
        else:
            if b"__main__" not in data:
                return data
    return dumps(obj, what)


def _by_value_modules() -> bool:
    from cloudpickle import cloudpickle

    return bool(getattr(cloudpickle, "_PICKLE_BY_VALUE_MODULES", None))


def check(obj: Any, what: str, *, left_out: tuple[type, ...] = ()) -> int:
    """Raise as :func:`dumps` does if ``obj`` cannot be pickled; return how many instances
    of ``left_out`` it holds.

    Instances of ``left_out`` are known to pickle and costly to (in-memory tables): they are
    counted, not pickled, so that checking is cheap.
    """

    class _Counting(_pickler_class()):  # type: ignore[misc]
        found = 0

        def persistent_id(self, part: Any) -> str | None:
            if isinstance(part, left_out):
                self.found += 1
                return "left out"
            return None

    pickler = _Counting(io.BytesIO())
    try:
        pickler.dump(obj)
    except Exception:
        dumps(obj, what)  # raises, naming the part that cannot be pickled
        raise
    return pickler.found


def find_unpicklable(obj: Any, path: str, depth: int = 0) -> str:
    """A description of the innermost part of ``obj`` that cannot be pickled."""
    if depth < _MAX_DEPTH:
        for child_path, child in _parts(obj, path):
            if not _picklable(child):
                return find_unpicklable(child, child_path, depth + 1)
    return f"{path} (a {type(obj).__module__}.{type(obj).__qualname__})"


def to_bytes(obj: Any) -> bytes:
    """``obj`` pickled as cloudpickle does, each code object keeping its file name."""
    buffer = io.BytesIO()
    _pickler_class()(buffer).dump(obj)
    return buffer.getvalue()


@cache
def _pickler_class() -> type:
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


def _picklable(obj: Any) -> bool:
    try:
        to_bytes(obj)
    except Exception:
        return False
    return True


def _parts(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"{path}[{key!r}]", value
    elif isinstance(obj, list | tuple | set | frozenset):
        for i, value in enumerate(obj):
            yield f"{path}[{i}]", value
    elif isinstance(obj, types.FunctionType):
        yield from _function_parts(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type | types.ModuleType):
        for key, value in vars(obj).items():
            yield f"{path}.{key}", value


def _function_parts(fn: types.FunctionType) -> Iterator[tuple[str, Any]]:
    code = fn.__code__
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
        try:
            yield f"variable {name!r} used by {fn.__qualname__}()", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    for name in code.co_names:
        if name in fn.__globals__:
            value = fn.__globals__[name]
            if not isinstance(value, types.ModuleType):
                yield f"global {name!r} used by {fn.__qualname__}()", value
