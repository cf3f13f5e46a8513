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
    restart would only repeat it.
    """

    def __init__(self, config: FailureConfig) -> None:
        self._max_failures = config.max_failures
        self.hang_timeout_s = config.hang_timeout_s  # the controller's hang watchdog

    def decide(self, failures: dict[int, WorkerFailure], num_restarts: int) -> FailureDecision:
        if not all(f.retryable for f in failures.values()):
            return FailureDecision.RAISE
        if self._max_failures == -1 or num_restarts < self._max_failures:
            return FailureDecision.RESTART
        return FailureDecision.RAISE
