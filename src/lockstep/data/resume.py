"""What a restarted run needs of its datasets: shards that continue where a checkpoint was.

The one entry point lockstep's controller uses (its other modules stay private to this
package). Each worker's position in its dataset shards is kept with a checkpoint; an attempt
that starts from that checkpoint gets, through :func:`resumed_shards`, shards whose first pass
holds exactly the rows of the interrupted epoch that no worker was given yet, split again
when the number of workers changed.
"""

from __future__ import annotations

import warnings
from typing import Any

from lockstep.data._dataset import Dataset
from lockstep.data._iterator import DataIterator, placed, reorders, rows_plan
from lockstep.data._plan import Plan
from lockstep.data._position import Resume, ShardPlace, as_ranges, plan_resume

__all__ = ["resumed_shards"]


def resumed_shards(
    shards: list[dict[str, Any]], positions: dict[str, list[Any]]
) -> list[dict[str, Any]]:
    """Each rank's datasets for an attempt, continuing the kept ``positions``.

    Args:
        shards: One dict of dataset name to shard per rank, as the trainer cut them.
        positions: Per dataset name, every old rank's position (``{}`` for a fresh start).

    Returns:
        The same dicts with each ``lockstep.data`` dataset turned into an iterator that
        keeps its position; anything else (Ray's datasets, plain objects) as given.
    """
    out = [dict(s) for s in shards]
    for name in sorted({n for s in shards for n in s}):
        given = [s.get(name) for s in shards]
        parts = [p for p in given if isinstance(p, Dataset)]
        if len(parts) != len(given):
            continue  # Ray datasets (Ray streams them), anything else: as given
        for rank, iterator in enumerate(_iterators(name, parts, positions.get(name))):
            out[rank][name] = iterator
    return out


def _iterators(
    name: str, parts: list[Dataset], positions: list[Any] | None
) -> list[DataIterator[Dataset]]:
    plans: list[Plan] = [p._plan for p in parts]
    parent, shard_ranges = _layout(parts, plans)
    if parent is None:
        return [p.iterator() for p in parts]
    resumes: list[Resume | None] = [None] * len(parts)
    if positions:
        resumes = _resumes(name, parent, positions, len(parts), split=shard_ranges is not None)
    iterators = []
    for rank, part in enumerate(parts):
        resume = resumes[rank]
        plan = None
        if resume is not None and resume.ranges is not None:
            plan = rows_plan(parent, resume.ranges)
        shard = [shard_ranges[rank]] if shard_ranges is not None else None
        iterators.append(placed(part.iterator(), ShardPlace(shard, resume, plan)))
    return iterators


def _layout(parts: list[Dataset], plans: list[Plan]) -> tuple[Plan | None, list[Any] | None]:
    """The dataset the parts were cut from and each part's row window; the window list is
    None when every worker reads the whole dataset. ``(None, None)``: not known."""
    origins = [p.origin for p in plans]
    distinct = len(parts) == 1 or len({id(p) for p in parts}) == len(parts)
    if distinct and all(o is not None for o in origins):
        parents = {id(o[0]) for o in origins if o is not None}
        if len(parents) == 1:
            return origins[0][0], [o[1] for o in origins if o is not None]  # type: ignore[index]
    if all(p is parts[0] for p in parts):
        return plans[0], None
    return None, None


def _resumes(
    name: str, parent: Plan, positions: list[Any], num_workers: int, *, split: bool
) -> list[Resume | None]:
    total = sum(parent.row_counts())
    highest = max(
        (stop for p in positions if p for key in ("pass", "consumed", "shard")
         for _, stop in as_ranges(p.get(key)) or []),
        default=0,
    )  # fmt: skip
    if highest > total:
        warnings.warn(
            f"the checkpoint's position in dataset {name!r} names row {highest - 1}, but the "
            f"dataset has {total} rows now: its epoch starts over. HINT: restore a run with "
            "the datasets it was started with",
            stacklevel=2,
        )
        return [None] * num_workers
    try:
        resumes = plan_resume(positions, num_workers, split=split, total=total)
    except ValueError as exc:
        warnings.warn(f"dataset {name!r}: {exc}; its epoch starts over", stacklevel=3)
        return [None] * num_workers
    if any(r is not None and r.ranges is not None for r in resumes) and reorders(parent):
        warnings.warn(
            f"dataset {name!r} is in a new random order at every pass (random_shuffle() "
            "without a seed), so which rows the interrupted epoch gave is not known: the "
            "rest of that epoch is the right number of rows, not the right rows. HINT: "
            "random_shuffle(seed=...) keeps exactly-once data across restarts",
            stacklevel=2,
        )
    return resumes
