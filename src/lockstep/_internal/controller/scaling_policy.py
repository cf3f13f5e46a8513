"""Scaling policies: how many workers the next attempt gets (Ray V2's shape and names).

A policy returns a decision, the controller carries it out: :class:`ResizeDecision`
(start, or restart, with ``num_workers`` workers) or :class:`NoopDecision` (keep going, or
keep waiting). :class:`FixedScalingPolicy` always answers ``num_workers``;
:class:`ElasticScalingPolicy` (``ScalingConfig(num_workers=(min, max))``) answers what the
capacity holds, between min and max.

Capacity comes in as a function returning one dict of resources per node, so that the
policy measures nothing itself (tests give it numbers) and the running group is probed only
when a check is due.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from lockstep._core.config import ScalingConfig
from lockstep._internal.execution.capacity import count_workers, worker_resources
from lockstep._internal.execution.worker_group.base import WorkerGroup, WorkerGroupSpec

logger = logging.getLogger(__name__)

Capacity = Callable[[], Sequence[Mapping[str, float]]]


@dataclass(frozen=True)
class ScalingDecision:
    """What a scaling policy decided."""


@dataclass(frozen=True)
class NoopDecision(ScalingDecision):
    """Change nothing: keep the workers running, or keep waiting for room to start."""


@dataclass(frozen=True)
class ResizeDecision(ScalingDecision):
    """(Re)start the worker group with ``num_workers`` workers of ``resources_per_worker``."""

    num_workers: int
    resources_per_worker: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerGroupState:
    """The running worker group, as a policy sees it."""

    num_workers: int
    start_time: float


class ScalingPolicy(abc.ABC):
    """Decides the worker group's size: when it is not running (before the first start and
    after a failure) and, optionally, while it runs healthy."""

    def __init__(self, scaling_config: ScalingConfig) -> None:
        self.scaling_config = scaling_config

    @classmethod
    @abc.abstractmethod
    def supports_elasticity(cls) -> bool:
        """Whether the size can differ from one attempt to the next."""

    @abc.abstractmethod
    def make_decision_for_non_running_worker_group(self, capacity: Capacity) -> ScalingDecision:
        """The size to start with, or NOOP to wait for room."""

    @abc.abstractmethod
    def make_decision_for_running_worker_group(
        self, worker_group_state: WorkerGroupState, capacity: Capacity
    ) -> ScalingDecision:
        """A new size for healthy running workers, or NOOP to keep them."""


class FixedScalingPolicy(ScalingPolicy):
    """``num_workers`` workers, every attempt; capacity is never looked at."""

    @classmethod
    def supports_elasticity(cls) -> bool:
        return False

    def make_decision_for_non_running_worker_group(self, capacity: Capacity) -> ScalingDecision:
        return ResizeDecision(
            max(1, self.scaling_config.max_workers), worker_resources(self.scaling_config)
        )

    def make_decision_for_running_worker_group(
        self, worker_group_state: WorkerGroupState, capacity: Capacity
    ) -> ScalingDecision:
        return NoopDecision()


class ElasticScalingPolicy(ScalingPolicy):
    """As many workers as fit, between ``min_workers`` and ``max_workers``.

    Before a start (the first, or after a failure): the count that fits, or NOOP (wait)
    while fewer than ``min_workers`` fit. While the workers run healthy: every
    ``elastic_resize_monitor_interval_s`` (counted from the group's start or the last
    check), a new size when the count that fits differs and is at least ``min_workers``.

    Example:
        >>> policy = ElasticScalingPolicy(ScalingConfig(num_workers=(1, 8)))
        >>> policy.make_decision_for_non_running_worker_group(lambda: [{"CPU": 2}])
        ResizeDecision(num_workers=2, resources_per_worker={'CPU': 1.0})
    """

    # Ray's: say why the run waits at most this often.
    INSUFFICIENT_WORKERS_WARNING_INTERVAL_S = 30.0

    def __init__(
        self, scaling_config: ScalingConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(scaling_config)
        self._clock = clock
        self._per_worker = worker_resources(scaling_config)
        self._latest_monitor_time = float("-inf")
        self._latest_insufficient_workers_warning_time = float("-inf")

    @classmethod
    def supports_elasticity(cls) -> bool:
        return True

    def count_possible_workers(self, nodes: Sequence[Mapping[str, float]]) -> int:
        """How many workers ``nodes`` hold, at most ``max_workers``."""
        return count_workers(nodes, self._per_worker, at_most=self.scaling_config.max_workers)

    def _measure(self, capacity: Capacity) -> int | None:
        """The count that fits; None (decide nothing) when the cluster cannot be asked
        now, as Ray does: a passing network or GCS hiccup must not end a healthy run."""
        try:
            nodes = capacity()
        except Exception as exc:
            logger.warning("could not read the cluster's resources (%s); not resizing", exc)
            return None
        return self.count_possible_workers(nodes)

    def make_decision_for_non_running_worker_group(self, capacity: Capacity) -> ScalingDecision:
        num_workers = self._measure(capacity)
        if num_workers is None:
            return NoopDecision()
        if num_workers < self.scaling_config.min_workers:
            now = self._clock()
            since = now - self._latest_insufficient_workers_warning_time
            if since >= self.INSUFFICIENT_WORKERS_WARNING_INTERVAL_S:
                self._latest_insufficient_workers_warning_time = now
                logger.warning(
                    "the cluster holds %d workers of %s; waiting for room for "
                    "min_workers=%d before starting",
                    num_workers,
                    self._per_worker,
                    self.scaling_config.min_workers,
                )
            return NoopDecision()
        logger.info("starting with %d workers: as many as the cluster holds", num_workers)
        return ResizeDecision(num_workers, dict(self._per_worker))

    def make_decision_for_running_worker_group(
        self, worker_group_state: WorkerGroupState, capacity: Capacity
    ) -> ScalingDecision:
        latest = max(worker_group_state.start_time, self._latest_monitor_time)
        now = self._clock()
        if now - latest < self.scaling_config.elastic_resize_monitor_interval_s:
            return NoopDecision()
        self._latest_monitor_time = now
        num_workers = self._measure(capacity)
        if (
            num_workers is None
            or num_workers == worker_group_state.num_workers
            or num_workers < self.scaling_config.min_workers
        ):
            return NoopDecision()
        logger.info(
            "resizing the worker group from %d to %d workers",
            worker_group_state.num_workers,
            num_workers,
        )
        return ResizeDecision(num_workers, dict(self._per_worker))


def create_scaling_policy(scaling_config: ScalingConfig) -> ScalingPolicy:
    """:class:`ElasticScalingPolicy` for ``num_workers=(min, max)``, else the fixed one."""
    if scaling_config.elasticity_enabled:
        return ElasticScalingPolicy(scaling_config)
    return FixedScalingPolicy(scaling_config)


class ElasticRun:
    """An elastic run's sizes, decided by its policy and carried out by the controller.

    Args:
        policy: Decides the sizes.
        capacity: The nodes' resources, given the running worker group (or None): what
            the run would have if it started again.
        resize_spec: The worker group spec for a new size (its datasets split anew).
    """

    def __init__(
        self,
        *,
        policy: ScalingPolicy,
        capacity: Callable[[WorkerGroup | None], Sequence[Mapping[str, float]]],
        resize_spec: Callable[[WorkerGroupSpec, int], WorkerGroupSpec],
    ) -> None:
        self.policy = policy
        self.capacity = capacity
        self._resize_spec = resize_spec
        self._next_size: int | None = None  # decided while running, for the next start
        self._sized: int | None = None  # the size the spec was last made for

    def size_to_start(self) -> int | None:
        """The size of the attempt starting now: the one decided while the last attempt
        ran (a resize), or what fits now; None while too few fit (wait, look again)."""
        size, self._next_size = self._next_size, None
        if size is not None:
            return size
        capacity = self.capacity
        decision = self.policy.make_decision_for_non_running_worker_group(lambda: capacity(None))
        if isinstance(decision, NoopDecision):
            return None
        assert isinstance(decision, ResizeDecision)
        return decision.num_workers

    def size_while_running(
        self, group: WorkerGroup, num_workers: int, started_at: float
    ) -> int | None:
        """A new size for the healthy running group (checked every
        ``elastic_resize_monitor_interval_s``), or None to keep it; a new size is the next
        start's."""
        capacity = self.capacity
        decision = self.policy.make_decision_for_running_worker_group(
            WorkerGroupState(num_workers=num_workers, start_time=started_at),
            lambda: capacity(group),
        )
        if not isinstance(decision, ResizeDecision):
            return None
        self._next_size = decision.num_workers
        return decision.num_workers

    def spec_for(self, spec: WorkerGroupSpec, size: int) -> WorkerGroupSpec | None:
        """The spec for ``size`` workers, or None when ``spec`` is already for that size."""
        if size == self._sized:
            return None
        self._sized = size
        return self._resize_spec(spec, size)
