"""MedianStoppingRule: stop a trial doing worse than the median of the others."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lockstep.tune.schedulers._base import TrialScheduler


class MedianStoppingRule(TrialScheduler):
    """Stops a trial whose best score so far is below the median of the other trials'
    running mean scores at the same point (``time_attr``).

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare.
        mode: ``"min"`` or ``"max"``.
        grace_period: No trial is stopped before ``time_attr`` reaches this.
        min_samples_required: Other trials needed before comparing.
        min_time_slice: Unused here (each trial has its own resources).
        hard_stop: Stop the trial (True) or pause it (False).

    Example:
        >>> rule = MedianStoppingRule(time_attr="training_iteration", metric="acc",
        ...                           mode="max", grace_period=1, min_samples_required=1)
        >>> rule.on_trial_result(None, _T("a"), {"training_iteration": 1, "acc": 0.9})
        'CONTINUE'
        >>> rule.on_trial_result(None, _T("b"), {"training_iteration": 1, "acc": 0.1})
        'STOP'
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        grace_period: float = 60.0,
        min_samples_required: int = 3,
        min_time_slice: float = 0,
        hard_stop: bool = True,
    ) -> None:
        self._time_attr = time_attr
        self._metric, self._mode = metric, mode
        self._grace = grace_period
        self._min_samples = min_samples_required
        self._hard_stop = hard_stop
        self._history: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self._completed: set[str] = set()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        self._require_metric("MedianStoppingRule")
        score = self._score(result)
        if score is None or self._time_attr not in result:
            return self.CONTINUE
        now = float(result[self._time_attr])
        self._history[trial.trial_id].append((now, score))
        if now < self._grace:
            return self.CONTINUE
        others = [self._mean_until(tid, now) for tid in self._history if tid != trial.trial_id]
        means = [m for m in others if m is not None]
        if len(means) < self._min_samples:
            return self.CONTINUE
        import numpy as np

        best = max(s for _, s in self._history[trial.trial_id])
        if best < float(np.median(means)):
            return self.STOP if self._hard_stop else self.PAUSE
        return self.CONTINUE

    def _mean_until(self, trial_id: str, now: float) -> float | None:
        scores = [s for t, s in self._history[trial_id] if t <= now]
        return sum(scores) / len(scores) if scores else None


class _T:
    """A stand-in trial for the examples."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
