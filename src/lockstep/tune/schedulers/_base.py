"""The scheduler interface: a policy that returns a decision for every trial result.

The Tuner carries the decisions out: ``CONTINUE``, ``STOP`` (the trial ends now, its
workers released), ``PAUSE`` (the trial stops and waits to be resumed from its latest
checkpoint) and :class:`Exploit` (the trial restarts from another trial's checkpoint with
a new config: population based training).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Exploit:
    """Restart the trial from ``donor``'s latest checkpoint with ``config``."""

    donor: Any
    config: dict[str, Any] = field(default_factory=dict)


class TrialScheduler:
    """Decides, per result, whether a trial continues, stops, pauses or exploits another.

    Example:
        >>> class StopAtThree(TrialScheduler):
        ...     def on_trial_result(self, tune_controller, trial, result):
        ...         return self.STOP if result["training_iteration"] >= 3 else self.CONTINUE
        >>> StopAtThree().on_trial_result(None, None, {"training_iteration": 3})
        'STOP'
    """

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    _metric: str | None = None
    _mode: str | None = None

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Receive the Tuner's metric and mode when the scheduler has none."""
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f'mode must be "min" or "max", got {mode!r}')
        if self._metric is None:
            self._metric = metric
        if self._mode is None:
            self._mode = mode
        return True

    @property
    def metric(self) -> str | None:
        return self._metric

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        """A trial was created."""

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        """The decision for ``trial`` after ``result``."""
        return self.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        """A trial finished (or was stopped)."""

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        """A trial failed."""

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        """A trial ended otherwise."""

    def choose_trial_to_run(self, tune_controller: Any, trials: Sequence[Any]) -> Any:
        """Which of the waiting ``trials`` (pending or paused) starts next, or None."""
        for trial in trials:
            if trial.status == "PENDING":
                return trial
        return None

    def _score(self, result: dict[str, Any]) -> float | None:
        """The result's metric, signed so that higher is better; None when absent."""
        if self._metric is None or self._metric not in result:
            return None
        value = float(result[self._metric])
        return -value if self._mode == "min" else value

    def _require_metric(self, name: str) -> None:
        if self._metric is None or self._mode is None:
            raise ValueError(
                f"{name} needs a metric and a mode. HINT: pass metric= and mode= to the "
                f"scheduler or to TuneConfig"
            )


class FIFOScheduler(TrialScheduler):
    """Runs every trial to its end, in the order they were created (the default).

    A trial that a subclass paused is not run again: it ends once nothing else is left
    (Ray Tune resumes it then).

    Example:
        >>> FIFOScheduler().on_trial_result(None, None, {"loss": 1.0})
        'CONTINUE'
    """

    def __init__(self) -> None:
        pass
