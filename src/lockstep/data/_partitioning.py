"""Hive partitioning (``root/country=US/year=2024/part.parquet``), as Ray reads it.

The values in a file's directory names become columns of its rows, typed as strings unless
``Partitioning(field_types=...)`` says otherwise (Ray's default); a filter on them keeps
only the files that can match (pushdown), decided from the paths alone.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class Partitioning:
    """How partition values are encoded in paths (Ray's ``Partitioning``; ``"hive"`` only).

    Args:
        style: ``"hive"``: directories named ``key=value``.
        base_dir: The directory below which to look (by default, each path read).
        field_names: Accepted for Ray compatibility (hive paths name their fields).
        field_types: A type per field (``int``, ``float``, ``str`` or a pyarrow type);
            strings by default.
        filesystem: Accepted for Ray compatibility.

    Example:
        >>> from lockstep.data.datasource import Partitioning
        >>> Partitioning("hive", field_types={"year": int}).style
        'hive'
    """

    style: str = "hive"
    base_dir: str | None = None
    field_names: Sequence[str] | None = None
    field_types: Mapping[str, Any] = field(default_factory=dict)
    filesystem: Any = None

    def __post_init__(self) -> None:
        if self.style != "hive":
            raise ValueError(
                f"Partitioning: style {self.style!r} is not supported here; only 'hive' "
                "(directories named key=value). HINT: Partitioning('hive')"
            )

    def arrow_type(self, name: str) -> Any:
        """The pyarrow type of field ``name``."""
        import pyarrow as pa

        kind = self.field_types.get(name, str)
        return {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}.get(
            kind, kind
        )


@dataclass(frozen=True)
class PathPartitionFilter:
    """Keeps the files whose partition values satisfy ``filter_fn`` (Ray's name).

    Example:
        >>> from lockstep.data.datasource import PathPartitionFilter
        >>> keep = PathPartitionFilter.of(lambda values: values["country"] == "US")
        >>> keep({"country": "US"}), keep({"country": "FR"})
        (True, False)
    """

    filter_fn: Callable[[dict[str, Any]], bool]
    style: str = "hive"

    @staticmethod
    def of(
        filter_fn: Callable[[dict[str, Any]], bool], style: str = "hive", **_: Any
    ) -> PathPartitionFilter:
        """A filter calling ``filter_fn`` with each file's partition values (strings)."""
        return PathPartitionFilter(filter_fn, style)

    def __call__(self, values: dict[str, Any]) -> bool:
        return bool(self.filter_fn(values))


def partition_values(path: str, roots: Sequence[str]) -> dict[str, str | None]:
    """The ``key=value`` directories between the deepest root above ``path`` and its file."""
    below = [r for r in roots if path.startswith(r + "/")]
    if not below:
        return {}
    root = max(below, key=len)
    values: dict[str, str | None] = {}
    for part in posixpath.dirname(path[len(root) + 1 :]).split("/"):
        if "=" in part:
            key, value = part.split("=", 1)
            values[unquote(key)] = None if value == NULL_VALUE else unquote(value)
    return values
