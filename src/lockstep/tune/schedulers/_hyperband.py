"""HyperBand: synchronous successive halving in brackets of different starting budgets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lockstep.tune.schedulers._base import TrialScheduler


class _Bracket:
    def __init__(self, capacity: int, milestone: float, eta: float) -> None:
        self.capacity = capacity
        self.milestone = milestone
        self.eta = eta
        self.trials: list[Any] = []
        self.scores: dict[str, float] = {}
        self.ended: set[str] = set()

    def live(self) -> list[Any]:
        return [t for t in self.trials if t.trial_id not in self.ended]

    def ready(self, search_finished: bool) -> bool:
        full = len(self.trials) >= self.capacity or search_finished
        return full and all(t.trial_id in self.scores for t in self.live())

    def halve(self) -> tuple[list[Any], list[Any]]:
        """Keep the top 1/eta of the live trials for the next milestone."""
        live = sorted(self.live(), key=lambda t: self.scores[t.trial_id], reverse=True)
        keep = max(1, math.ceil(len(live) / self.eta))
        self.milestone *= self.eta
        self.scores = {}
        return live[:keep], live[keep:]


class HyperBandScheduler(TrialScheduler):
    """Trials in a bracket pause at each milestone until every one of them reaches it;
    then the top ``1/reduction_factor`` resume (from their checkpoints) and the rest stop.

    Brackets start at ``max_t / reduction_factor**s`` for ``s`` from the largest down, so
    some brackets explore many short trials and others few long ones.

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare.
        mode: ``"min"`` or ``"max"``.
        max_t: The most ``time_attr`` a trial gets.
        reduction_factor: The fraction ``1/reduction_factor`` is kept at each milestone.
        stop_last_trials: Stop trials at ``max_t``.

    Example:
        >>> HyperBandScheduler(metric="acc", mode="max", max_t=9).max_t
        9
    """

    def __init__(
        self,
        time_attr: str = "training_iteration",
        metric: str | None = None,
        mode: str | None = None,
        max_t: float = 81,
        reduction_factor: float = 3,
        stop_last_trials: bool = True,
    ) -> None:
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor}")
        self._time_attr = time_attr
        self._metric, self._mode = metric, mode
        self.max_t = max_t
        self._eta = reduction_factor
        self._stop_last = stop_last_trials
        self._s_max = int(math.log(max_t) / math.log(reduction_factor) + 1e-9)
        self._next_s = self._s_max
        self._brackets: list[_Bracket] = []
        self._bracket_of: dict[str, _Bracket] = {}
        self._resumable: list[Any] = []

    def _new_bracket(self) -> _Bracket:
        s = self._next_s
        self._next_s = self._s_max if s == 0 else s - 1
        capacity = math.ceil((self._s_max + 1) / (s + 1) * self._eta**s)
        bracket = _Bracket(capacity, self.max_t * self._eta**-s, self._eta)
        self._brackets.append(bracket)
        return bracket

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        open_brackets = [b for b in self._brackets if len(b.trials) < b.capacity]
        bracket = open_brackets[0] if open_brackets else self._new_bracket()
        bracket.trials.append(trial)
        self._bracket_of[trial.trial_id] = bracket

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> Any:
        self._require_metric("HyperBandScheduler")
        if trial in self._resumable:
            self._resumable.remove(trial)
        cur = result.get(self._time_attr, 0)
        if self._stop_last and cur >= self.max_t:
            return self.STOP
        bracket = self._bracket_of.get(trial.trial_id)
        score = self._score(result)
        if bracket is None or score is None or cur < bracket.milestone:
            return self.CONTINUE
        bracket.scores[trial.trial_id] = score
        return self._maybe_halve(tune_controller, bracket, trial)

    def _maybe_halve(self, tune_controller: Any, bracket: _Bracket, trial: Any) -> Any:
        finished = bool(getattr(tune_controller, "search_finished", True))
        if not bracket.ready(finished):
            return self.PAUSE
        kept, dropped = bracket.halve()
        decision = self.CONTINUE if trial in kept else self.STOP
        for other in dropped:
            bracket.ended.add(other.trial_id)
            if other is not trial and tune_controller is not None:
                tune_controller.stop_trial(other)
        self._resumable += [t for t in kept if t is not trial]
        return decision

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        self._end(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._end(tune_controller, trial)

    def _end(self, tune_controller: Any, trial: Any) -> None:
        bracket = self._bracket_of.get(trial.trial_id)
        if bracket is None or trial.trial_id in bracket.ended:
            return
        bracket.ended.add(trial.trial_id)
        bracket.scores.pop(trial.trial_id, None)
        paused = [t for t in bracket.live() if t.trial_id in bracket.scores]
        if paused and bracket.ready(bool(getattr(tune_controller, "search_finished", True))):
            first = paused[0]
            if self._maybe_halve(tune_controller, bracket, first) == self.CONTINUE:
                self._resumable.insert(0, first)
            elif tune_controller is not None:
                tune_controller.stop_trial(first)

    def choose_trial_to_run(self, tune_controller: Any, trials: Sequence[Any]) -> Any:
        for trial in self._resumable:
            if trial.status == "PAUSED":
                return trial  # it leaves the list when it reports again
        return super().choose_trial_to_run(tune_controller, trials)
