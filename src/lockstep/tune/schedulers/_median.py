"""MedianStoppingRule: stop a trial doing worse than the median of the others."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from lockstep.tune.schedulers._base import FIFOScheduler


class MedianStoppingRule(FIFOScheduler):
    """Stops a trial whose best score so far is below the median of the running mean
    scores of the other trials that got as far (``time_attr``), each mean over their
    results from ``grace_period`` up to that point (as Ray Tune's rule).

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare.
        mode: ``"min"`` or ``"max"``.
        grace_period: No trial is stopped before ``time_attr`` reaches this; the means
            start there.
        min_samples_required: Other trials needed before comparing.
        min_time_slice: Unused here: a trial never yields its resources to a waiting one
            while there are too few others to compare with.
        hard_stop: Stop the trial (True) or pause it (False): a paused trial ends once
            nothing else is left to run (Ray Tune resumes it then, to run to its end).

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
        # Per trial, its (time, score) results in the order they came.
        self._history: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self._stopped: set[str] = set()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        self._require_metric("MedianStoppingRule")
        score = self._score(result)
        if score is None or self._time_attr not in result:
            return self.CONTINUE
        if trial.trial_id in self._stopped:
            return self.CONTINUE  # paused once and resumed: it runs to its end
        now = float(result[self._time_attr])
        self._history[trial.trial_id].append((now, score))
        if now < self._grace:
            return self.CONTINUE
        means = self._means_of_others(trial.trial_id, now)
        if len(means) < self._min_samples:
            return self.CONTINUE
        import numpy as np

        best = max(s for _, s in self._history[trial.trial_id])
        if best < float(np.median(means)):
            self._stopped.add(trial.trial_id)
            return self.STOP if self._hard_stop else self.PAUSE
        return self.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        # A last result the rule has not seen (the trial ended on a stopper) counts too.
        score = self._score(result or {})
        if score is None or self._time_attr not in result:
            return
        now = float(result[self._time_attr])
        history = self._history[trial.trial_id]
        if not history or now > history[-1][0]:
            history.append((now, score))

    def _means_of_others(self, trial_id: str, now: float) -> list[float]:
        """The finite running means, up to ``now``, of the other trials that reached it."""
        means = []
        for other, history in self._history.items():
            if other == trial_id or history[-1][0] < now:
                continue
            scores = [s for t, s in history if self._grace <= t <= now]
            mean = sum(scores) / len(scores) if scores else math.nan
            if math.isfinite(mean):
                means.append(mean)
        return means


class _T:
    """A stand-in trial for the examples."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
