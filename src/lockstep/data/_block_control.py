"""``override_num_blocks=`` (and Ray's deprecated ``parallelism=``) for every constructor.

A dataset never has more blocks than rows. Rows in memory are cut into near-equal blocks;
files with row counts in their metadata (parquet, numpy) are cut by rows without reading
them; other files (CSV, JSON, text) are grouped, at most one block per file, since cutting
one would mean reading it here.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

from lockstep.data._context import within_block_size
from lockstep.data._dataset import Dataset
from lockstep.data._execute import ConcatSource
from lockstep.data._sources import TableSource


def num_blocks_arg(override_num_blocks: Any, parallelism: Any, where: str) -> int | None:
    """The number of blocks asked for, or None for the reader's own choice."""
    if parallelism is not None and parallelism != -1:
        warnings.warn(
            f"{where}: the argument `parallelism` is deprecated (as in Ray). HINT: pass "
            "override_num_blocks instead",
            DeprecationWarning,
            stacklevel=3,
        )
        if override_num_blocks is None:
            override_num_blocks = parallelism
    if override_num_blocks is None:
        return None
    if (
        not isinstance(override_num_blocks, int)
        or isinstance(override_num_blocks, bool)
        or override_num_blocks < 1
    ):
        raise ValueError(
            f"{where}: override_num_blocks must be a positive int, got {override_num_blocks!r}"
        )
    return override_num_blocks


def rebalance(num_blocks: int | None, ds: Dataset) -> Dataset:
    """``ds`` in ``num_blocks`` blocks (never more than rows), reading no data to do it."""
    if num_blocks is None:
        return _within_block_size(ds)
    if num_blocks == ds.num_blocks():
        return ds
    counts = ds._plan.known_counts()
    if counts is not None:
        return ds.repartition(max(1, min(num_blocks, sum(counts))))
    sources = ds._plan.folded()
    if num_blocks >= len(sources):
        return ds
    bounds = [len(sources) * i // num_blocks for i in range(num_blocks + 1)]
    groups = [tuple(sources[a:b]) for a, b in itertools.pairwise(bounds)]
    return Dataset([ConcatSource(g) if len(g) > 1 else g[0] for g in groups])


def _within_block_size(ds: Dataset) -> Dataset:
    """In-memory blocks above ``DataContext.target_max_block_size`` cut into smaller ones."""
    sources = ds._plan.sources
    if ds._plan.ops or not all(type(s) is TableSource for s in sources):
        return ds
    tables = [t for s in sources for t in within_block_size(s.table)]  # type: ignore[attr-defined]
    if len(tables) == len(sources):
        return ds
    return Dataset([TableSource(t) for t in tables], counts=[t.num_rows for t in tables])
