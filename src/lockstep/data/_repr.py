"""How a dataset and its schema print: Ray's table layout, from metadata alone.

A dataset whose schema is known without reading prints as a table of its columns and
types; one held in memory (``materialize()``, ``from_items``...) shows its rows too, the
first and last five when there are more than ten. Nothing is read to print a dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_ELLIPSIS = "…"
_MAX_ROWS = 10
_HEAD_ROWS = 5
_MAX_WIDTH = 40


def schema_table(names: Sequence[str], types: Sequence[Any]) -> str:
    """``Column  Type`` over ``------  ----``, a line per column, aligned."""
    width = max([len("Column"), *(len(n) for n in names)]) + 2
    lines = ["Column".ljust(width) + "Type", "------".ljust(width) + "----"]
    lines += [name.ljust(width) + str(kind) for name, kind in zip(names, types, strict=True)]
    return "\n".join(lines)


def dataset_table(
    schema: Any, num_rows: int | None, rows: tuple[list[Any], list[Any]] | None
) -> str:
    """``shape: (rows, columns)``, the columns and types, the rows when ``rows`` (head,
    tail) are given, and what is shown."""
    names = list(schema.names)
    head = [_cells(r, names) for r in rows[0]] if rows else []
    tail = [_cells(r, names) for r in rows[1]] if rows else []
    body = head + ([[_ELLIPSIS] * len(names)] if head and tail else []) + tail
    headers = [_cut(n) for n in names]
    kinds = [_cut(str(t)) for t in schema.types]
    widths = [
        max(len(c) for c in column)
        for column in zip(headers, kinds, ["---"] * len(names), *body, strict=True)
    ]
    lines = [_border("╭", "┬", "╮", "─", widths), _row(headers, widths)]
    lines += [_row(["---"] * len(names), widths), _row(kinds, widths)]
    if body:
        lines.append(_border("╞", "╪", "╡", "═", widths))
        lines += [_row(cells, widths) for cells in body]
    lines.append(_border("╰", "┴", "╯", "─", widths))
    count = "?" if num_rows is None else num_rows
    shown = (
        f"(Showing {len(head) + len(tail)} of {count} rows)"
        if rows is not None
        else ("(Dataset isn't materialized)")
    )
    return "\n".join([f"shape: ({count}, {len(names)})", *lines, shown])


def preview_rows(table: Any) -> tuple[list[Any], list[Any]]:
    """The rows a materialized dataset shows: all up to ten, else the first and last five."""
    if table.num_rows <= _MAX_ROWS:
        return table.to_pylist(), []
    tail = _MAX_ROWS - _HEAD_ROWS
    return table.slice(0, _HEAD_ROWS).to_pylist(), table.slice(table.num_rows - tail).to_pylist()


def _cells(row: dict[str, Any], names: list[str]) -> list[str]:
    out = []
    for name in names:
        value = row.get(name)
        if isinstance(value, np.generic):
            value = value.item()
        out.append(_cut(str(value).replace("\n", " ").replace("\r", " ")))
    return out


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_WIDTH else text[: _MAX_WIDTH - 1] + _ELLIPSIS


def _border(left: str, middle: str, right: str, fill: str, widths: list[int]) -> str:
    return left + middle.join(fill * (w + 2) for w in widths) + right


def _row(cells: list[str], widths: list[int]) -> str:
    return "│" + "┆".join(f" {c.ljust(w)} " for c, w in zip(cells, widths, strict=True)) + "│"
