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

import base64
import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Range = tuple[int, int]

ROW_ID = "__lockstep_row_id__"


def merged(ranges: Iterable[Sequence[int]] | np.ndarray) -> list[Range]:
    """``ranges`` sorted, empty ones dropped, touching or overlapping ones joined."""
    return [(a, b) for a, b in merged_array(_array(ranges)).tolist()]


def merged_array(ranges: np.ndarray) -> np.ndarray:
    """:func:`merged` of an ``(n, 2)`` array, as one (vectorised: positions are asked for
    at every report, and a shuffled pass's rows make many ranges)."""
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    if not len(ranges):
        return ranges
    ranges = ranges[np.argsort(ranges[:, 0], kind="stable")]
    reach = np.maximum.accumulate(ranges[:, 1])
    first = np.ones(len(ranges), dtype=bool)
    first[1:] = ranges[1:, 0] > reach[:-1]
    heads = np.flatnonzero(first)
    stops = np.maximum.reduceat(ranges[:, 1], heads)
    return np.stack([ranges[heads, 0], stops], axis=1)


def _array(ranges: Iterable[Sequence[int]] | np.ndarray) -> np.ndarray:
    if isinstance(ranges, np.ndarray):
        return ranges.reshape(-1, 2).astype(np.int64, copy=False)
    return np.asarray(list(ranges), dtype=np.int64).reshape(-1, 2)


def num_rows(ranges: Iterable[Sequence[int]]) -> int:
    """The rows in ``ranges`` (assumed disjoint)."""
    return sum(int(b) - int(a) for a, b in ranges)


def subtract(ordered: Sequence[Sequence[int]], taken: Sequence[Sequence[int]]) -> list[Range]:
    """The rows of ``ordered`` not in ``taken``, in the order of ``ordered``."""
    holes = merged(taken)
    stops = [high for _, high in holes]
    out: list[Range] = []
    for start, stop in ordered:
        cursor = int(start)
        # the first hole that ends after the range starts; holes are sorted and disjoint
        for low, high in itertools.islice(holes, bisect.bisect_right(stops, cursor), None):
            if low >= stop:
                break
            if low > cursor:
                out.append((cursor, low))
            cursor = max(cursor, high)
        if cursor < stop:
            out.append((cursor, int(stop)))
    return out


def to_global(local: Sequence[Sequence[int]], ordered: Sequence[Sequence[int]]) -> list[Range]:
    """Local ranges (row positions within a pass over ``ordered``) as global ranges."""
    return [(a, b) for a, b in to_global_array(_array(local), ordered).tolist()]


def to_global_array(local: np.ndarray, ordered: Sequence[Sequence[int]]) -> np.ndarray:
    """:func:`to_global` of an ``(n, 2)`` array of merged local ranges, as one."""
    lengths = np.asarray([int(b) - int(a) for a, b in ordered], dtype=np.int64)
    starts = np.asarray([int(a) for a, _ in ordered], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    if not len(local) or not len(lengths):
        return np.zeros((0, 2), dtype=np.int64)
    if len(lengths) == 1:  # a shard of one window: a shift keeps the ranges merged
        shifted: np.ndarray = local + int(starts[0] - offsets[0])
        return shifted
    low, high = local[:, 0], local[:, 1]
    piece = np.searchsorted(offsets, low, side="right") - 1
    last = np.searchsorted(offsets, high - 1, side="right") - 1
    inside = piece == last  # most ranges lie in one piece of ``ordered``
    shift = starts[piece[inside]] - offsets[piece[inside]]
    out = [np.stack([low[inside] + shift, high[inside] + shift], axis=1)]
    for lo, hi, first, end in zip(
        low[~inside], high[~inside], piece[~inside], last[~inside], strict=True
    ):
        for at in range(first, end + 1):
            a, b = max(lo, offsets[at]), min(hi, offsets[at + 1])
            out.append(np.asarray([[starts[at] + a - offsets[at], starts[at] + b - offsets[at]]]))
    return merged_array(np.concatenate(out))


def _to_global_few(local: list[list[int]], ordered: Sequence[Sequence[int]]) -> list[Range]:
    """:func:`to_global` for a few ranges, without numpy's per-call cost."""
    out: list[Range] = []
    offset = 0
    for start, stop in ordered:
        length = stop - start
        for low, high in local:
            a, b = max(low, offset), min(high, offset + length)
            if a < b:
                out.append((start + a - offset, start + b - offset))
        offset += length
    return sorted(out)


def split_rows(ordered: Sequence[Sequence[int]], n: int) -> list[list[Range]]:
    """``ordered`` cut into ``n`` consecutive parts whose sizes differ by at most one row."""
    total = num_rows(ordered)
    base, extra = divmod(total, n)
    sizes = [base + (1 if i < extra else 0) for i in range(n)]
    parts: list[list[Range]] = []
    pieces = [(int(a), int(b)) for a, b in ordered if b > a]
    at = 0
    for size in sizes:
        part: list[Range] = []
        while size:
            start, stop = pieces[at]
            take = min(size, stop - start)
            part.append((start, start + take))
            size -= take
            if start + take == stop:
                at += 1
            else:
                pieces[at] = (start + take, stop)
        parts.append(part)
    return parts


_FEW = 32  # more ranges than this are kept as packed int64 pairs, not a JSON list


def as_json(ranges: Sequence[Sequence[int]] | np.ndarray | None) -> Any:
    """Ranges as kept in JSON: ``[[start, stop], ...]``, or (many: a shuffled pass) their
    int64 pairs packed, ``{"int64": base64}``, which costs microseconds to make."""
    if ranges is None:
        return None
    if len(ranges) <= _FEW:
        return [[int(a), int(b)] for a, b in ranges]
    packed = _array(ranges).astype("<i8", copy=False).tobytes()
    return {"int64": base64.b64encode(packed).decode("ascii")}


def as_ranges(value: Any) -> list[Range] | None:
    """The ranges :func:`as_json` kept."""
    if value is None:
        return None
    if isinstance(value, dict):
        pairs = np.frombuffer(base64.b64decode(value["int64"]), dtype="<i8").reshape(-1, 2)
        return [(a, b) for a, b in pairs.tolist()]
    return [(int(a), int(b)) for a, b in value]


class PassTracker:
    """The rows one pass handed to its caller, by their position within the pass.

    A batch counts as consumed when it is handed over (the caller trains on it before its
    next ``report()``); ``iter_rows`` counts row by row. Batches in order are ranges;
    shuffled ones mark their rows in a mask, which stays cheap however scattered they are.
    """

    def __init__(self) -> None:
        self._consumed: list[Range] = []
        self._mask = np.zeros(0, dtype=bool)  # rows of shuffled batches
        self._rows: np.ndarray | None = None  # a batch being handed out row by row
        self._rows_used = 0
        self.ended = False

    def hand(self, ids: Range | np.ndarray, *, by_row: bool = False) -> None:
        """A batch of rows ``ids`` (a range, or the positions of shuffled rows) goes out."""
        self._settle()
        if by_row:
            self._rows = np.arange(*ids) if isinstance(ids, tuple) else ids
        elif isinstance(ids, tuple):
            if self._consumed and self._consumed[-1][1] == ids[0]:
                self._consumed[-1] = (self._consumed[-1][0], ids[1])  # the usual: in order
            else:
                self._consumed.append(ids)
        else:
            self._mark(ids)

    def advance(self) -> None:
        """One more row of the batch handed out row by row."""
        self._rows_used += 1

    def consumed(self) -> list[Range]:
        """The positions handed out so far, as merged ranges (the batch being handed out
        row by row goes on)."""
        return [(a, b) for a, b in self.consumed_array().tolist()]

    def consumed_array(self) -> np.ndarray:
        """:meth:`consumed` as an ``(n, 2)`` array."""
        ordered = _array(self._consumed)
        if not self._mask.any() and self._rows is None:
            # batches in order: one range, or a few to merge
            return ordered if len(ordered) <= 1 else merged_array(ordered)
        shuffled = _runs(np.flatnonzero(self._mask), distinct=True)
        if not len(ordered) and self._rows is None:
            return shuffled  # sorted and merged already
        parts = [ordered, shuffled]
        if self._rows is not None:
            parts.append(_runs(self._rows[: self._rows_used]))
        return merged_array(np.concatenate(parts))

    def _mark(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        needed = int(ids.max()) + 1
        if needed > len(self._mask):
            grown = np.zeros(max(needed, 2 * len(self._mask)), dtype=bool)
            grown[: len(self._mask)] = self._mask
            self._mask = grown
        self._mask[ids] = True

    def _settle(self) -> None:
        if self._rows is not None:
            self._mark(self._rows[: self._rows_used])
            self._rows, self._rows_used = None, 0


def _runs(ids: np.ndarray, *, distinct: bool = False) -> np.ndarray:
    """Integer ``ids`` as the sorted ``(n, 2)`` ranges of consecutive values they make up
    (``distinct``: they are sorted and distinct already)."""
    if not len(ids):
        return np.zeros((0, 2), dtype=np.int64)
    values = np.asarray(ids, dtype=np.int64)
    if not distinct:
        values = np.unique(values)
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    starts = values[np.concatenate(([0], breaks))]
    stops = values[np.concatenate((breaks - 1, [len(values) - 1]))] + 1
    return np.stack([starts, stops], axis=1)


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
        self._pass_cache: tuple[Any, list[list[int]] | None] | None = None

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
        return {
            "epoch": self.epoch,
            "ended": self.tracker.ended,
            "pass": self._pass_json(),
            "consumed": as_json(self._consumed()),
            "shard": shard,
        }

    def _consumed(self) -> Any:
        """The global rows the pass handed out: in Python for the usual few ranges (a
        pass in order), vectorised for the many of a shuffled one."""
        assert self.tracker is not None
        local = self.tracker.consumed_array()
        covered = self.pass_ranges
        if covered is None:
            return local
        if len(local) <= _FEW and len(covered) <= _FEW:
            return _to_global_few(local.tolist(), covered)
        return to_global_array(local, covered)

    def _pass_json(self) -> list[list[int]] | None:
        """The pass's ranges as JSON, made once a pass (a resumed one may have many)."""
        if self._pass_cache is None or self._pass_cache[0] is not self.pass_ranges:
            self._pass_cache = (self.pass_ranges, as_json(self.pass_ranges))
        return self._pass_cache[1]
