"""Collective operations (barrier, broadcast, all-gather) relayed through the driver.

Each worker numbers its collective calls; when every worker has made call ``seq``, the
relay answers all of them at once. It never blocks: it only decides what to send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep._internal.execution.messages import CollectiveReply, CollectiveRequest

OP_NAMES = {
    "barrier": "barrier()",
    "broadcast": "broadcast_from_rank_zero()",
    "gather": "all_gather()",
}


@dataclass
class CollectiveRelay:
    """Matches the workers' collective calls by sequence number."""

    world_size: int
    _pending: dict[int, dict[int, CollectiveRequest]] = field(default_factory=dict)
    _finished: set[int] = field(default_factory=set)

    def on_request(self, request: CollectiveRequest) -> tuple[list[int], CollectiveReply] | None:
        """Record ``request``; when its call is complete, return (ranks, reply) to send.

        Returns None while other workers have yet to make the call.
        """
        calls = self._pending.setdefault(request.seq, {})
        calls[request.rank] = request
        waiting = self.mismatch()
        if waiting is not None:
            return list(calls), CollectiveReply(request.seq, error=waiting)
        if len(calls) < self.world_size:
            return None
        del self._pending[request.seq]
        return list(range(self.world_size)), CollectiveReply(request.seq, self._combine(calls))

    def on_finished(self, rank: int) -> tuple[list[int], CollectiveReply] | None:
        """A worker's function returned: workers waiting on it can never be answered."""
        self._finished.add(rank)
        error = self.mismatch()
        if error is None:
            return None
        seq = min(self._pending)
        return list(self._pending[seq]), CollectiveReply(seq, error=error)

    def mismatch(self) -> str | None:
        """Why the pending calls can never complete, or None when they still can."""
        for seq in sorted(self._pending):
            calls = self._pending[seq]
            ops = {r.op for r in calls.values()}
            if len(ops) > 1:
                detail = ", ".join(f"rank {r} {OP_NAMES[c.op]}" for r, c in sorted(calls.items()))
                return (
                    f"workers made different collective calls at the same point ({detail}). "
                    "HINT: call the same collective operations in the same order on every worker"
                )
            gone = sorted(self._finished - set(calls))
            if gone:
                op = OP_NAMES[next(iter(ops))]
                return (
                    f"rank {gone[0]} returned from the training function while rank "
                    f"{min(calls)} waits in {op}. HINT: every worker must call {op} the "
                    "same number of times"
                )
        return None

    @staticmethod
    def _combine(calls: dict[int, CollectiveRequest]) -> Any:
        op = calls[0].op
        if op == "barrier":
            return None
        if op == "broadcast":
            return calls[0].payload
        return [calls[rank].payload for rank in sorted(calls)]
