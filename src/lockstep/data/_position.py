"""Where a shard's iteration is: the arithmetic of mid-epoch resume.

A position names rows by their index in the dataset the shards were cut from (its
*global* order): a worker's shard is a list of ``[start, stop)`` ranges of those indices,
and a pass over it hands out rows of those ranges. Which rows it handed out is recorded
as ranges too, so that a restart can compute the rows of the epoch not yet handed out,
and split them again, among as many workers as the new attempt has.

A position (JSON, as it travels in a checkpoint's metadata)::

    {"epoch": 3,                 # the pass number (0-based) in progress, or the last one
     "ended": false,             # that pass reached its end
     "pass": [[0, 50]],          # the global ranges the pass covers, in order (None: all)
     "consumed": [[0, 20]],      # the global rows of the pass handed to the caller
     "shard": [[0, 50]]}         # the ranges of a full pass (the next epochs); None: all

Rows are identified by index, so a local shuffle (``local_shuffle_buffer_size``) keeps
exactly-once, seeded or not; what it needs is that row ``i`` of the dataset is the same
row in every attempt (files read in order, ``random_shuffle(seed=...)``, not an unseeded
``random_shuffle()``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Range = tuple[int, int]

ROW_ID = "__lockstep_row_id__"


def merged(ranges: Iterable[Sequence[int]]) -> list[Range]:
    """``ranges`` sorted, empty ones dropped, touching or overlapping ones joined."""
    out: list[Range] = []
    for start, stop in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def num_rows(ranges: Iterable[Sequence[int]]) -> int:
    """The rows in ``ranges`` (assumed disjoint)."""
    return sum(int(b) - int(a) for a, b in ranges)


def subtract(ordered: Sequence[Sequence[int]], taken: Sequence[Sequence[int]]) -> list[Range]:
    """The rows of ``ordered`` not in ``taken``, in the order of ``ordered``."""
    holes = merged(taken)
    out: list[Range] = []
    for start, stop in ordered:
        cursor = int(start)
        for low, high in holes:
            if high <= cursor or low >= stop:
                continue
            if low > cursor:
                out.append((cursor, low))
            cursor = max(cursor, high)
        if cursor < stop:
            out.append((cursor, int(stop)))
    return out


def to_global(local: Sequence[Sequence[int]], ordered: Sequence[Sequence[int]]) -> list[Range]:
    """Local ranges (row positions within a pass over ``ordered``) as global ranges."""
    out: list[Range] = []
    offsets = [0, *itertools.accumulate(int(b) - int(a) for a, b in ordered)]
    for low, high in local:
        for (start, _), first, last in zip(ordered, offsets, offsets[1:], strict=False):
            a, b = max(low, first), min(high, last)
            if a < b:
                out.append((start + a - first, start + b - first))
    return merged(out)


def split_rows(ordered: Sequence[Sequence[int]], n: int) -> list[list[Range]]:
    """``ordered`` cut into ``n`` consecutive parts whose sizes differ by at most one row."""
    total = num_rows(ordered)
    base, extra = divmod(total, n)
    sizes = [base + (1 if i < extra else 0) for i in range(n)]
    parts: list[list[Range]] = []
    pieces = [(int(a), int(b)) for a, b in ordered if b > a]
    for size in sizes:
        part: list[Range] = []
        while size:
            start, stop = pieces[0]
            take = min(size, stop - start)
            part.append((start, start + take))
            size -= take
            if start + take == stop:
                pieces.pop(0)
            else:
                pieces[0] = (start + take, stop)
        parts.append(part)
    return parts


def as_json(ranges: Sequence[Sequence[int]] | None) -> list[list[int]] | None:
    return None if ranges is None else [[int(a), int(b)] for a, b in ranges]


def as_ranges(value: Any) -> list[Range] | None:
    return None if value is None else [(int(a), int(b)) for a, b in value]


class PassTracker:
    """The rows one pass handed to its caller, by their position within the pass.

    A batch counts as consumed when it is handed over (the caller trains on it before its
    next ``report()``); ``iter_rows`` counts row by row.
    """

    def __init__(self) -> None:
        self._consumed: list[Range] = []
        self._rows: np.ndarray | None = None  # a batch being handed out row by row
        self._rows_used = 0
        self.ended = False

    def hand(self, ids: Range | np.ndarray, *, by_row: bool = False) -> None:
        """A batch of rows ``ids`` (a range, or the positions of shuffled rows) goes out."""
        self._settle()
        if by_row:
            self._rows = np.arange(*ids) if isinstance(ids, tuple) else ids
        elif isinstance(ids, tuple):
            self._consumed.append(ids)
        else:
            self._consumed.extend(_runs(ids))
        if len(self._consumed) > 64:
            self._consumed = merged(self._consumed)

    def advance(self) -> None:
        """One more row of the batch handed out row by row."""
        self._rows_used += 1

    def consumed(self) -> list[Range]:
        """The positions handed out so far, as merged ranges (the batch being handed out
        row by row goes on)."""
        self._consumed = merged(self._consumed)
        if self._rows is None:
            return list(self._consumed)
        return merged([*self._consumed, *_runs(self._rows[: self._rows_used])])

    def _settle(self) -> None:
        if self._rows is not None:
            self._consumed.extend(_runs(self._rows[: self._rows_used]))
            self._rows, self._rows_used = None, 0


def _runs(ids: np.ndarray) -> list[Range]:
    """Sorted integer ``ids`` as ranges of consecutive values."""
    if not len(ids):
        return []
    values = np.sort(np.asarray(ids, dtype=np.int64))
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [len(values)]))
    return [(int(values[a]), int(values[b - 1]) + 1) for a, b in zip(starts, stops, strict=True)]


def with_row_ids(blocks: Iterator[Any]) -> Iterator[Any]:
    """Each block with a column of its rows' positions in the pass (for a local shuffle)."""
    import pyarrow as pa

    offset = 0
    for block in blocks:
        ids = pa.array(np.arange(offset, offset + block.num_rows, dtype=np.int64))
        offset += block.num_rows
        yield block.append_column(ROW_ID, ids)


def take_row_ids(table: Any) -> tuple[Any, np.ndarray]:
    """``table`` without the row-position column, and that column."""
    ids = table.column(ROW_ID).to_numpy()
    return table.drop_columns([ROW_ID]), ids


@dataclass(frozen=True)
class Resume:
    """Where a worker's shard starts after a restart.

    Attributes:
        epoch: The number of the first pass.
        ranges: The global rows of the first pass (the rest of an interrupted epoch), or
            None for a full pass.
    """

    epoch: int
    ranges: list[Range] | None


def pending(position: dict[str, Any] | None, total: int | None) -> Resume | None:
    """What is left of the pass ``position`` describes: the rest of it, or (it ended) the
    next pass whole. ``total`` is the dataset's row count, for positions over all rows."""
    if position is None:
        return None
    epoch = int(position["epoch"])
    if position.get("ended", False):
        return Resume(epoch + 1, None)
    covered = as_ranges(position.get("pass"))
    if covered is None:
        assert total is not None, "a position over all rows needs the dataset's row count"
        covered = [(0, total)]
    return Resume(epoch, subtract(covered, as_ranges(position["consumed"]) or []))


def plan_resume(
    positions: Sequence[dict[str, Any] | None],
    num_workers: int,
    *,
    split: bool,
    total: int | None = None,
) -> list[Resume | None]:
    """The start of each of ``num_workers`` new shards, from the old ranks' positions.

    With as many workers as before (or a dataset every worker reads whole), each rank
    continues its own position. Otherwise the rows the interrupted epoch had not handed
    out are split again among the new workers (sizes differ by at most one row), and the
    next epochs are the new world's usual shards.

    Raises:
        ValueError: The ranks' positions are in different epochs, so the rows left of
            one epoch cannot be told (the message says which).
    """
    states = [pending(p, total) for p in positions]
    if not split or len(positions) == num_workers:
        return [states[r] if r < len(states) else states[0] for r in range(num_workers)]
    present = [s for s in states if s is not None]
    if not present:
        return [None] * num_workers
    epochs = sorted({s.epoch for s in present})
    if len(epochs) > 1 or len(present) != len(states):
        raise ValueError(
            f"the workers' data positions are in different epochs ({_describe(positions)}), "
            "so the rows left of the interrupted epoch cannot be split among a new number of "
            "workers. HINT: iterate every worker's shard the same number of times between "
            "reports"
        )
    if all(s.ranges is None for s in present):
        return [Resume(epochs[0], None)] * num_workers
    remaining = [r for s, p in zip(present, positions, strict=True) for r in _left(s, p)]
    return [Resume(epochs[0], part) for part in split_rows(remaining, num_workers)]


def _left(state: Resume, position: dict[str, Any] | None) -> list[Range]:
    if state.ranges is not None:
        return state.ranges
    shard = as_ranges((position or {}).get("shard"))
    assert shard is not None, "a split shard's position names its ranges"
    return shard


def _describe(positions: Sequence[dict[str, Any] | None]) -> str:
    parts = []
    for rank, p in enumerate(positions):
        where = "none" if p is None else f"epoch {p['epoch']}{' ended' if p.get('ended') else ''}"
        parts.append(f"rank {rank}: {where}")
    return ", ".join(parts)


class ShardPlace:
    """A worker's dataset shard's place in the data: which pass, and which rows it handed out.

    Args:
        shard: The global ranges of a full pass over the shard; None for all the rows.
        resume: Where the first pass starts, after a restart; None for a fresh start.
        resume_plan: The plan of the first pass's rows when ``resume.ranges`` is given.
    """

    def __init__(
        self, shard: list[Range] | None, resume: Resume | None = None, resume_plan: Any = None
    ) -> None:
        self.shard = shard
        self.epoch = -1
        self.pass_ranges = shard
        self.tracker: PassTracker | None = None
        self._resume = resume
        self._resume_plan = resume_plan

    def begin_pass(self) -> Any:
        """Start the next pass; the plan of its rows, or None for the shard's own."""
        self.tracker = PassTracker()
        resume, self._resume = self._resume, None
        self.pass_ranges = self.shard
        if resume is None:
            self.epoch += 1
            return None
        self.epoch = resume.epoch
        if resume.ranges is None:
            return None
        self.pass_ranges = resume.ranges
        plan, self._resume_plan = self._resume_plan, None
        return plan

    def position(self) -> dict[str, Any] | None:
        """The position to keep with a checkpoint (see the module's docstring)."""
        shard = as_json(self.shard)
        if self.tracker is None:
            resume = self._resume
            if resume is None:
                return None  # no pass yet: a restart starts afresh too
            if resume.ranges is None:
                return {"epoch": resume.epoch - 1, "ended": True, "pass": shard,
                        "consumed": [], "shard": shard}  # fmt: skip
            return {"epoch": resume.epoch, "ended": False, "pass": as_json(resume.ranges),
                    "consumed": [], "shard": shard}  # fmt: skip
        consumed = self.tracker.consumed()
        if self.pass_ranges is not None:
            consumed = to_global(consumed, self.pass_ranges)
        return {
            "epoch": self.epoch,
            "ended": self.tracker.ended,
            "pass": as_json(self.pass_ranges),
            "consumed": as_json(consumed),
            "shard": shard,
        }


# The key of lockstep's record of the data positions in a checkpoint's metadata.
DATA_POSITIONS_KEY = "lockstep_data_positions"
