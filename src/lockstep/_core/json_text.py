"""JSON files people read, encoded by json's C encoder.

``json.dumps(..., indent=...)`` encodes in Python, several times slower than without
``indent``; run files written once or twice a run (thousands of Tune trials) pay for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any


def readable_json(
    data: Mapping[str, Any],
    *,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> bytes:
    """``data`` as JSON with each top-level key on a line of its own, its value on the
    same line (the same document as ``json.dumps(data, indent=1)``, laid out otherwise);
    ``default`` as json's, for what JSON cannot hold.

    Example:
        >>> print(readable_json({"b": [1, 2], "a": {"x": None}}, sort_keys=True).decode())
        {
         "a": {"x": null},
         "b": [1, 2]
        }
    """
    keys = sorted(data) if sort_keys else list(data)
    if not keys:
        return b"{}"
    lines = ",\n".join(
        f" {json.dumps(str(key))}: {json.dumps(data[key], sort_keys=sort_keys, default=default)}"
        for key in keys
    )
    return f"{{\n{lines}\n}}".encode()
