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
from typing import Protocol

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
        self.first_step = num_steps
        self._last_step = num_steps + 1
        deadline_ms = info.deadline_ms
        # The deadline is wall-clock (it comes from outside); waited for on the monotonic
        # clock, less the grace the workers get to exit, so that all are gone by then.
        left = (deadline_ms / 1000 - time.time()) if deadline_ms else 0.0
        left -= flags.WORKER_SHUTDOWN_GRACE_S.get()
        self._deadline = time.monotonic() + max(0.0, left)

    def told_at(self, step: int) -> None:
        """The workers see the notice when step ``step`` is released (later than the
        steps complete when it was decided: the workers may end steps without waiting
        for the driver)."""
        self.first_step = step
        self._last_step = step + 1

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


class DrainingGroup(Protocol):
    """What the policy asks of the worker group: is one of its nodes being drained?"""

    def preemption_notice(self) -> PreemptionInfo | None: ...


class PreemptionPolicy:
    """Decides when an attempt drains, and how: a stop asked of the driver by a signal
    (the run stops, restorable), or a node of the group drained (the run restarts off it).

    Args:
        deadline_s: ``FailureConfig.preemption_deadline_s``: how long from the notice the
            workers have to report once more.
    """

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self.notice: Notice | None = None

    def request(self, reason: str) -> None:
        """A signal asked the driver to stop. Safe in a signal handler: it only records."""
        if self.notice is None:
            self.notice = Notice(reason, time.time())

    def decide(
        self, drain: Drain | None, group: DrainingGroup, *, num_steps: int, num_workers: int
    ) -> Drain | None:
        """The drain the attempt is in from this step on: the one it was in, a new one the
        workers are to be told of, or None. A stop of the driver takes over a node's
        drain (the run stops rather than restarts)."""
        if self.notice is not None and (drain is None or not drain.stops_run):
            info = driver_notice_info(self.notice, self.deadline_s, num_workers)
            return Drain(info, stops_run=True, num_steps=num_steps)
        if drain is not None:
            return drain
        notice = group.preemption_notice()  # checked at most every few seconds by the group
        if notice is None:
            return None
        if notice.deadline_ms is None:
            deadline_ms = int((time.time() + self.deadline_s) * 1000)
            notice = dataclasses.replace(notice, deadline_ms=deadline_ms)
        return Drain(notice, stops_run=False, num_steps=num_steps)
