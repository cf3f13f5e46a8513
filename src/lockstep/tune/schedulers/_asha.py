"""Asynchronous successive halving (ASHA), as Ray Tune's ``AsyncHyperBandScheduler``."""

from __future__ import annotations

import math
from typing import Any

from lockstep.tune.schedulers._base import FIFOScheduler, TrialScheduler


class _Bracket:
    """Rungs at ``grace_period * reduction_factor**k``; each records the scores seen there."""

    def __init__(self, min_t: float, max_t: float, rf: float, s: int) -> None:
        self.rf = rf
        num_rungs = int(math.log(max_t / min_t) / math.log(rf) - s + 1)
        self.rungs: list[tuple[float, dict[str, float]]] = [
            (min_t * rf ** (k + s), {}) for k in reversed(range(max(num_rungs, 0)))
        ]

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        """The score a trial must reach at a rung: the top 1/rf quantile of those seen."""
        if not recorded:
            return None
        import numpy as np

        return float(np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100))

    def on_result(self, trial_id: str, cur_iter: float, score: float, stop_last: bool) -> str:
        """Record ``score`` at the highest rung ``cur_iter`` reached that has no score of
        this trial yet; STOP when it is below that rung's cutoff."""
        for milestone, recorded in self.rungs:
            if cur_iter >= milestone and trial_id in recorded and not stop_last:
                break  # it passed this rung already: rungs below were decided before
            if cur_iter < milestone or trial_id in recorded:
                continue
            cutoff = self.cutoff(recorded)
            recorded[trial_id] = score
            if cutoff is not None and score < cutoff:
                return TrialScheduler.STOP
            return TrialScheduler.CONTINUE
        return TrialScheduler.CONTINUE


class AsyncHyperBandScheduler(FIFOScheduler):
    """Stops a trial at a rung when its score is below the top ``1/reduction_factor`` of
    the scores other trials had at that rung; no trial waits for another.

    With several brackets, each trial joins one at random, a bracket with ``k`` rungs
    ``e**k`` times as likely (as in Ray Tune; ``np.random.seed`` makes it repeatable).

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare (default: ``TuneConfig.metric``).
        mode: ``"min"`` or ``"max"``.
        max_t: Trials stop when ``time_attr`` reaches this.
        grace_period: The first rung: no trial is stopped before it.
        reduction_factor: Each rung keeps the top ``1/reduction_factor``.
        brackets: Number of brackets (each starts its rungs later).
        stop_last_trials: Stop trials at ``max_t``.

    Example:
        >>> asha = ASHAScheduler(metric="acc", mode="max", grace_period=1,
        ...                      reduction_factor=2, max_t=4)
        >>> asha.on_trial_result(None, _T("a"), {"training_iteration": 1, "acc": 0.9})
        'CONTINUE'
        >>> asha.on_trial_result(None, _T("b"), {"training_iteration": 1, "acc": 0.1})
        'STOP'
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 100,
        grace_period: float = 1,
        reduction_factor: float = 4,
        brackets: int = 1,
        stop_last_trials: bool = True,
    ) -> None:
        if grace_period <= 0 or max_t < grace_period:
            raise ValueError(
                f"need 0 < grace_period <= max_t, got grace_period={grace_period}, "
                f"max_t={max_t}. HINT: e.g. grace_period=1, max_t=100"
            )
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor}")
        self._time_attr = time_attr
        self._metric, self._mode = metric, mode
        self._max_t = max_t
        self._stop_last = stop_last_trials
        self._brackets = [
            _Bracket(grace_period, max_t, reduction_factor, s) for s in range(brackets)
        ]
        self._trial_bracket: dict[str, _Bracket] = {}

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._trial_bracket[trial.trial_id] = self._brackets[self._pick_bracket()]

    def _pick_bracket(self) -> int:
        if len(self._brackets) == 1:
            return 0
        import numpy as np

        sizes = np.array([len(b.rungs) for b in self._brackets])
        weights = np.e ** (sizes - sizes.max())
        return int(np.random.choice(len(self._brackets), p=weights / weights.sum()))

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        self._require_metric(type(self).__name__)
        score = self._score(result)
        if self._time_attr not in result or score is None:
            return self.CONTINUE
        cur_iter = result[self._time_attr]
        if self._stop_last and cur_iter >= self._max_t:
            return self.STOP
        return self._bracket(tune_controller, trial).on_result(
            trial.trial_id, cur_iter, score, self._stop_last
        )

    def _bracket(self, tune_controller: Any, trial: Any) -> _Bracket:
        if trial.trial_id not in self._trial_bracket:
            self.on_trial_add(tune_controller, trial)
        return self._trial_bracket[trial.trial_id]

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        # The last result counts at the rungs it reached, as Ray Tune records it.
        score = self._score(result or {})
        if score is not None and self._time_attr in result:
            bracket = self._bracket(tune_controller, trial)
            bracket.on_result(trial.trial_id, result[self._time_attr], score, self._stop_last)
        self._trial_bracket.pop(trial.trial_id, None)


ASHAScheduler = AsyncHyperBandScheduler


class _T:
    """A stand-in trial for the examples."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
