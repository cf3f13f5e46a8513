"""FailurePolicy: restart the workers, or give up and raise."""

from __future__ import annotations

import enum

from lockstep._core.config import FailureConfig
from lockstep._core.errors import WorkerFailure


class FailureDecision(enum.Enum):
    RESTART = "restart"
    RAISE = "raise"


class FailurePolicy:
    """Restart all workers from the latest checkpoint until ``max_failures`` is used up.

    A misuse of the API (a bad report, mismatched collectives) is raised at once: a
    restart would only repeat it. Preemptions (a drained node) have their own budget,
    ``max_preemption_failures``.
    """

    def __init__(self, config: FailureConfig) -> None:
        self._max_failures = config.max_failures
        self._max_preemptions = config.max_preemption_failures
        self.preemption_deadline_s = config.preemption_deadline_s
        self.hang_timeout_s = config.hang_timeout_s  # the controller's hang watchdog
        self.assumed_mtbf_s = config.assumed_mtbf_s  # the time ledger's advice

    def decide(self, failures: dict[int, WorkerFailure], num_restarts: int) -> FailureDecision:
        """After a failure, with ``num_restarts`` restarts for failures before it."""
        if not all(f.retryable for f in failures.values()):
            return FailureDecision.RAISE
        return _within(self._max_failures, num_restarts)

    def decide_preemption(self, num_restarts: int) -> FailureDecision:
        """After a preemption, with ``num_restarts`` restarts for preemptions before it."""
        return _within(self._max_preemptions, num_restarts)


def _within(limit: int, used: int) -> FailureDecision:
    if limit == -1 or used < limit:
        return FailureDecision.RESTART
    return FailureDecision.RAISE
