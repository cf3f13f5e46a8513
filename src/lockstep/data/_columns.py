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
    """``table`` with column ``name`` replaced by ``values``, or appended when new.

    A replaced column drops pandas' metadata (from ``Table.from_pandas``), which would turn
    the new values back into the old column's dtype in ``to_pandas()``.
    """
    if name in table.column_names:
        if table.schema.metadata and b"pandas" in table.schema.metadata:
            table = table.replace_schema_metadata(None)
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)
