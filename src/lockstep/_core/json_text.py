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
    # One encoder for the document (json.dumps with options makes one per call)
    encoder = _ENCODERS[sort_keys] if default is None else _encoder(sort_keys, default)
    encode = encoder.encode
    lines = ",\n".join(f" {_quoted(str(key))}: {encode(data[key])}" for key in keys)
    return f"{{\n{lines}\n}}".encode()


def _encoder(sort_keys: bool, default: Callable[[Any], Any] | None) -> json.JSONEncoder:
    return json.JSONEncoder(sort_keys=sort_keys, default=default)


_ENCODERS = {False: _encoder(False, None), True: _encoder(True, None)}
_quoted = json.encoder.encode_basestring_ascii  # a key as json.dumps writes it
