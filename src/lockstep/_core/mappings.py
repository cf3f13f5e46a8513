"""Nested dicts flattened to ``outer/inner`` keys, as Ray writes results and configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SCALARS = frozenset({float, int, str, bool, type(None)})


def flatten_dict(row: Mapping[str, Any], delimiter: str = "/", prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` becomes ``{"a/b": 1}``, as Ray's loggers and progress.csv have it.

    Example:
        >>> flatten_dict({"a": {"b": 1}, "c": 2})
        {'a/b': 1, 'c': 2}
    """
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        # the type check first: a metric is nearly always a number (the ABC check is slow)
        if type(value) not in _SCALARS and isinstance(value, Mapping):
            flat.update(flatten_dict(value, delimiter, f"{name}{delimiter}"))
        else:
            flat[name] = value
    return flat
