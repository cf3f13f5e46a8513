"""Columns of Arrow blocks: checking that they exist, and setting one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def require_columns(
    available: Sequence[str],
    names: Sequence[str],
    where: str,
    hint: str = "check the names with ds.columns()",
) -> None:
    """Raise a ValueError naming the columns of ``names`` that are not ``available``.

    Example:
        >>> require_columns(["a", "b"], ["a", "c"], "select_columns")
        Traceback (most recent call last):
        ...
        ValueError: select_columns: columns ['c'] do not exist; the columns are ['a', 'b']. \
HINT: check the names with ds.columns()
    """
    missing = [n for n in names if n not in available]
    if missing:
        raise ValueError(
            f"{where}: columns {missing} do not exist; the columns are {list(available)}. "
            f"HINT: {hint}"
        )


def put_column(table: Any, name: str, values: Any) -> Any:
    """``table`` with column ``name`` replaced by ``values``, or appended when new."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)
