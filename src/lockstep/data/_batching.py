"""Cutting a stream of Arrow tables into batches of a given size, optionally shuffled."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from lockstep.data._convert import concat


def rebatch(
    blocks: Iterator[Any], batch_size: int | None, drop_last: bool = False
) -> Iterator[Any]:
    """Batches of exactly ``batch_size`` rows (the last may be smaller unless ``drop_last``).

    Slicing is zero-copy; rows are copied only where a batch spans two blocks.
    ``batch_size=None`` gives the non-empty blocks as they are.
    """
    if batch_size is None:
        yield from (b for b in blocks if b.num_rows)
        return
    pending: list[Any] = []
    pending_rows = 0
    for block in blocks:
        offset = 0
        while offset < block.num_rows:
            length = min(batch_size - pending_rows, block.num_rows - offset)
            pending.append(block.slice(offset, length) if length < block.num_rows else block)
            pending_rows += length
            offset += length
            if pending_rows == batch_size:
                yield concat(pending)
                pending, pending_rows = [], 0
        # Let go of the block before the next is read: held, it would double peak memory.
        # Rows left for the next batch are copied, since a slice keeps its whole block.
        pending = [_compact(t) for t in pending]
        del block
    if pending_rows and not drop_last:
        yield concat(pending)


def _compact(table: Any) -> Any:
    """A copy of ``table`` that holds only its own rows."""
    return table.take(np.arange(table.num_rows))


def shuffle_batches(
    blocks: Iterator[Any],
    batch_size: int,
    buffer_size: int,
    seed: int | None,
    drop_last: bool = False,
) -> Iterator[Any]:
    """Batches drawn at random from a buffer holding at least ``buffer_size`` rows.

    As in Ray: the buffer fills to ``buffer_size + batch_size`` rows, is shuffled, and
    batches are taken from it while at least ``buffer_size`` rows remain; at the end of the
    stream what remains is shuffled and emitted too.
    """
    rng = np.random.default_rng(seed)
    buffered: list[Any] = []
    rows = 0
    for block in blocks:
        if not block.num_rows:
            continue
        buffered.append(block)
        rows += block.num_rows
        if rows >= buffer_size + batch_size:
            table = _shuffled(concat(buffered), rng)
            keep = buffer_size + (table.num_rows - buffer_size) % batch_size
            emitted = table.num_rows - keep
            yield from rebatch(iter([table.slice(0, emitted)]), batch_size)
            buffered, rows = [table.slice(emitted)], keep
    if rows:
        yield from rebatch(iter([_shuffled(concat(buffered), rng)]), batch_size, drop_last)


def _shuffled(table: Any, rng: np.random.Generator) -> Any:
    return table.take(rng.permutation(table.num_rows))
