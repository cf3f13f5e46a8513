"""PreemptionInfo: what a worker learns when the run is being stopped from outside."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PreemptionInfo:
    """The run is about to be stopped: what stops it, and by when.

    ``lockstep.train.get_preemption_info()`` returns it in every worker once the driver
    got SIGTERM or Ctrl-C, or (on a Ray cluster) a node that hosts workers is draining.
    Every worker sees it from the same ``report()`` on, so all of them can agree to
    report one more checkpoint, which is committed if it comes before the deadline.

    Attributes:
        deadline_ms: When the workers are stopped, UNIX time in milliseconds (None: no
            deadline given).
        preempted_node_to_ranks: The ranks on each node being stopped, by node id (the
            host name for local processes, where a stop of the driver concerns them all).
        reason: What stops the run: ``"SIGTERM"``, ``"Ctrl-C"`` or ``"node drained"``.

    Example:
        >>> info = PreemptionInfo(deadline_ms=1_000, preempted_node_to_ranks={"n2": [3, 2]})
        >>> info.preempted_ranks, info.preempted_node_ids
        ([2, 3], ['n2'])
    """

    deadline_ms: int | None
    preempted_node_to_ranks: dict[str, list[int]] = field(default_factory=dict)
    reason: str = ""

    @property
    def preempted_node_ids(self) -> list[str]:
        """The ids of the nodes being stopped, sorted."""
        return sorted(self.preempted_node_to_ranks)

    @property
    def preempted_ranks(self) -> list[int]:
        """Every rank on a node being stopped, sorted."""
        return sorted({r for ranks in self.preempted_node_to_ranks.values() for r in ranks})
