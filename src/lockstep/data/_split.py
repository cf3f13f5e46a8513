"""Row windows of a plan: the arithmetic behind split, split_at_indices, limit, repartition.

A window ``[start, stop)`` of a dataset's rows becomes, for each source it touches, that
source narrowed to its part (row groups of a parquet file, a slice of a table). Nothing is
read to do it when row counts come from metadata.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from lockstep.data._execute import fold
from lockstep.data._ops import Op
from lockstep.data._sources import Source


def window_sources(
    sources: Sequence[Source], ops: Sequence[Op], counts: Sequence[int], start: int, stop: int
) -> list[tuple[Source, int]]:
    """The sources (ops folded in) holding output rows ``[start, stop)``, with their rows."""
    folded = fold(sources, ops, counts)
    out: list[tuple[Source, int]] = []
    position = 0
    for source, rows in zip(folded, counts, strict=True):
        low, high = max(start, position), min(stop, position + rows)
        if low < high:
            whole = low == position and high == position + rows
            out.append((source if whole else source.slice(low - position, high - low), high - low))
        position += rows
    if not out and folded:
        # no rows, but keep a (zero-row) source, so the schema is still known
        out.append((folded[0].slice(0, 0), 0))
    return out


def split_ranges(total: int, n: int, equal: bool) -> list[tuple[int, int]]:
    """``n`` consecutive row ranges: ``total // n`` rows each when ``equal`` (dropping at most
    ``n - 1`` rows at the end, as Ray does), else sizes that differ by at most one."""
    if equal:
        size = total // n
        return [(i * size, (i + 1) * size) for i in range(n)]
    base, extra = divmod(total, n)
    ranges, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


def check_num_splits(n: object, where: str) -> int:
    """``n`` if it is a positive int, else a ValueError."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ValueError(f"{where}: n must be a positive int, got {n!r}. HINT: split(2)")
    return n


def index_ranges(total: int, indices: Sequence[int]) -> list[tuple[int, int]]:
    """The ranges between sorted ``indices``, clamped to ``[0, total]``."""
    points = list(indices)
    if not points:
        raise ValueError(
            "indices must be a non-empty list. HINT: split_at_indices([n]) cuts before row n"
        )
    if any(not isinstance(i, int) or isinstance(i, bool) for i in points):
        raise ValueError(f"split_at_indices: indices must be ints, got {points}")
    if any(i < 0 for i in points):
        raise ValueError(
            f"split_at_indices: indices must be >= 0, got {points}. HINT: count rows from 0"
        )
    if points != sorted(points):
        raise ValueError(
            f"split_at_indices: indices must be sorted, got {points}. HINT: sorted(indices)"
        )
    bounds = [0, *(min(i, total) for i in points), total]
    return list(itertools.pairwise(bounds))


def proportion_indices(total: int, proportions: Sequence[float]) -> list[int]:
    """Split points for ``split_proportionately``; the last part takes the rest.

    Raises:
        ValueError: A proportion is not in (0, 1), they add up to 1 or more, or a part
            would be empty.
    """
    values = list(proportions)
    if not values or any(not 0 < p < 1 for p in values) or sum(values) >= 1:
        raise ValueError(
            f"split_proportionately: proportions must be between 0 and 1 and add up to less "
            f"than 1, got {values}. HINT: [0.8] gives 80% and the remaining 20%"
        )
    indices = [int(total * p) for p in itertools.accumulate(values)]
    # every part gets at least one row, as Ray makes sure: earlier cuts move down
    subtract = 0
    for i in range(len(indices) - 2, -1, -1):
        indices[i] -= subtract
        if indices[i] == indices[i + 1]:
            subtract += 1
            indices[i] -= 1
    if any(i <= 0 for i in indices) or indices[-1] >= total:
        raise ValueError(
            "Couldn't create non-empty splits with the given proportions. HINT: "
            f"split_proportionately: {values} of {total} rows; use larger proportions or a "
            "larger dataset"
        )
    return indices
