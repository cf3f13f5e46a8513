"""Exactly-once data across restarts: dataset shards that continue where a checkpoint was.

At every checkpointed report each worker sends the position of its dataset shards (and of
the loaders ``prepare_data_loader`` made); the driver keeps all ranks' positions in the
committed checkpoint's metadata, under :data:`DATA_POSITIONS_KEY`. An attempt that starts
from that checkpoint gets shards whose first pass holds exactly the rows of the interrupted
epoch that no worker was given yet, split again when the number of workers changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._internal.execution.worker.positions import saved_positions


def of_step(reports: Sequence[Any]) -> dict[str, Any] | None:
    """Every rank's positions of one checkpointed step, as kept in the checkpoint's metadata:
    ``{"num_workers": n, "datasets": {name: [rank 0's, ...]}, "loaders": {key: [...]}}``."""
    if all(getattr(r, "data_positions", None) is None for r in reports):
        return None
    kept: dict[str, Any] = {"num_workers": len(reports), "datasets": {}, "loaders": {}}
    for rank, report in enumerate(reports):
        for kind in ("datasets", "loaders"):
            for name, position in ((report.data_positions or {}).get(kind) or {}).items():
                kept[kind].setdefault(name, [None] * len(reports))[rank] = position
    return kept


def shards_for_attempt(
    shards: list[dict[str, Any]], checkpoint: Checkpoint | None
) -> list[dict[str, Any]]:
    """Each rank's datasets for an attempt starting from ``checkpoint``: lockstep datasets
    become iterators that keep their position, continuing the checkpoint's epoch."""
    if not any(shards):
        return [{} for _ in shards]
    # imported here: lockstep.data brings pyarrow (a third of a second), which a run
    # without datasets need not load
    from lockstep.data.resume import resumed_shards

    return resumed_shards(shards, saved_positions(checkpoint).get("datasets") or {})
