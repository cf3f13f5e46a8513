"""What one pass over a dataset did: batches, rows, and where the time went."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lockstep.data._prefetch import WaitTimer


@dataclass
class IterStats:
    """Figures of the latest pass, filled in while it runs.

    Attributes:
        num_batches: Batches handed to the caller.
        num_rows: Rows in them.
        total_s: Seconds from the first request to the end (or to now, while running).
        timer: Seconds the caller waited for a batch; the rest was the caller's own work.
    """

    num_batches: int = 0
    num_rows: int = 0
    total_s: float = 0.0
    timer: WaitTimer = field(default_factory=WaitTimer)

    def summary(self) -> str:
        """One paragraph for ``stats()``."""
        if not self.num_batches:
            return "No pass over the data has run yet."
        rate = self.num_rows / self.total_s if self.total_s else float("inf")
        return (
            f"Last pass: {self.num_rows} rows in {self.num_batches} batches, "
            f"{self.total_s:.3f}s ({rate:,.0f} rows/s); waiting for data "
            f"{self.timer.wait_s:.3f}s, in the caller's code "
            f"{max(0.0, self.total_s - self.timer.wait_s):.3f}s."
        )


def counted(items: Iterator[tuple[int, Any]], stats: IterStats) -> Iterator[Any]:
    """Yield the batches of ``(num_rows, batch)`` pairs, recording them in ``stats``."""
    started = time.perf_counter()
    try:
        for rows, batch in items:
            stats.num_batches += 1
            stats.num_rows += rows
            stats.total_s = time.perf_counter() - started
            yield batch
    finally:
        stats.total_s = time.perf_counter() - started
        close = getattr(items, "close", None)
        if close is not None:
            close()
