"""Preemption: the run is told it is being stopped, may checkpoint once more, then stops.

Two sources: the driver gets SIGTERM or Ctrl-C (a scheduler, a spot instance reclaimed,
the user), and the run stops, restorable; or, on a Ray cluster, a node hosting workers is
drained, and the run restarts from its latest checkpoint, counted against
``FailureConfig.max_preemption_failures``. Either way every worker is sent a
:class:`~lockstep._core.preemption.PreemptionInfo` and sees it from the same ``report()``
on (see ``messages.Preempted``); the drain ends once the step after that one is recorded
(its checkpoint, if any, committed), or at the deadline.
"""

from __future__ import annotations

import dataclasses
import socket
import time

from lockstep._core import flags
from lockstep._core.errors import WorkerFailure
from lockstep._core.preemption import PreemptionInfo

NODE_DRAINED = "node drained"


@dataclasses.dataclass(frozen=True)
class Notice:
    """A stop asked for by a signal: recorded by its handler, acted on by the controller."""

    reason: str
    time: float  # time.time() when the signal came


def driver_notice_info(notice: Notice, deadline_s: float, num_workers: int) -> PreemptionInfo:
    """The workers' view of a stop of the driver: all ranks, on the driver's host."""
    return PreemptionInfo(
        deadline_ms=int((notice.time + deadline_s) * 1000),
        preempted_node_to_ranks={socket.gethostname(): list(range(num_workers))},
        reason=notice.reason,
    )


class Drain:
    """One preemption in progress: when the workers were told, and when it ends.

    Args:
        info: What the workers are told.
        stops_run: True for a stop of the driver (the run ends, restorable), False for a
            drained node (the run restarts without the node).
        num_steps: Steps complete when the workers were told: they see the notice when
            step ``num_steps`` is released, and their next report is the last one waited for.
    """

    def __init__(self, info: PreemptionInfo, *, stops_run: bool, num_steps: int) -> None:
        self.info = info
        self.stops_run = stops_run
        self._last_step = num_steps + 1
        deadline_ms = info.deadline_ms
        # The deadline is wall-clock (it comes from outside); waited for on the monotonic
        # clock, less the grace the workers get to exit, so that all are gone by then.
        left = (deadline_ms / 1000 - time.time()) if deadline_ms else 0.0
        left -= flags.WORKER_SHUTDOWN_GRACE_S.get()
        self._deadline = time.monotonic() + max(0.0, left)

    def done(self, num_steps: int) -> bool:
        """Whether to stop now: the step after the notice is recorded, or time is up."""
        return num_steps > self._last_step or time.monotonic() >= self._deadline

    def failures(self, num_workers: int) -> dict[int, WorkerFailure]:
        """The records of the ranks a drained node took away (all ranks restart)."""
        ranks = self.info.preempted_ranks or list(range(num_workers))
        nodes = ", ".join(self.info.preempted_node_ids) or "a node"
        now = time.time()
        return {
            rank: WorkerFailure(
                rank=rank,
                pid=None,
                kind="preempted",
                summary=f"rank {rank} was preempted: {nodes} {NODE_DRAINED}",
                time=now,
            )
            for rank in ranks
        }
