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
        """The iterator's part of ``stats()``, in Ray's layout, with lockstep's figures
        (there are no tasks or object store: a pass reads in the caller's process)."""
        if not self.num_batches:
            return "No pass over the data has run yet."
        rate = self.num_rows / self.total_s if self.total_s else float("inf")
        user = max(0.0, self.total_s - self.timer.wait_s)
        return (
            "Dataset iterator time breakdown:\n"
            f"* Total time overall: {_seconds(self.total_s)}\n"
            "    * Total time user thread is blocked by lockstep.data iter_batches: "
            f"{_seconds(self.timer.wait_s)}\n"
            f"    * Total execution time for user thread: {_seconds(user)}\n"
            f"* Last pass: {self.num_rows} rows in {self.num_batches} batches\n"
            "\n"
            "Dataset throughput:\n"
            f"* lockstep.data throughput: {rate:,.0f} rows/s"
        )


def _seconds(value: float) -> str:
    return f"{value * 1000:.2f}ms" if value < 1 else f"{value:.2f}s"


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
