"""Reading and writing data positions on the worker's side (see ``data_positions``)."""

from __future__ import annotations

import logging
from typing import Any

from lockstep._core.checkpoint import DATA_POSITIONS_KEY, Checkpoint

logger = logging.getLogger(__name__)


def position_of(shard: Any) -> dict[str, Any] | None:
    """The position of a worker's dataset shard; None when it keeps none (a Ray dataset).

    Told by the shard's ``_place`` (a ``lockstep.data`` iterator's), not by its class: a
    worker starts without importing ``lockstep.data`` (and pyarrow), and one that never
    asks for a shard never does.
    """
    place = getattr(shard, "_place", None)
    return place.position() if place is not None else None


def saved_positions(checkpoint: Checkpoint | None) -> dict[str, Any]:
    """The positions kept in ``checkpoint``'s metadata; empty when it has none."""
    if checkpoint is None:
        return {}
    try:
        value = checkpoint.get_metadata().get(DATA_POSITIONS_KEY)
    except (OSError, ValueError) as exc:
        logger.warning("could not read the data positions of %s: %s", checkpoint.path, exc)
        return {}
    return value if isinstance(value, dict) else {}
