"""HyperBand: synchronous successive halving in brackets of different starting budgets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lockstep.tune.schedulers._base import FIFOScheduler


class _Bracket:
    """Trials that run to ``milestone``, wait for each other there, and keep the top
    ``keep`` of them for the next milestone, ``halvings`` times."""

    def __init__(self, capacity: int, milestone: int, eta: float, halvings: int) -> None:
        self.capacity = capacity
        self.keep = capacity
        self.milestone = milestone
        self.eta = eta
        self.halvings = halvings
        self.trials: list[Any] = []
        self.latest: dict[str, tuple[float, float]] = {}  # trial id: (time, score)
        self.ended: set[str] = set()

    def live(self) -> list[Any]:
        return [t for t in self.trials if t.trial_id not in self.ended]

    def ready(self, search_finished: bool) -> bool:
        """Whether every trial it will have reached the milestone."""
        full = len(self.trials) >= self.capacity or search_finished
        return full and all(self.reached(t) for t in self.live())

    def reached(self, trial: Any) -> bool:
        return trial.trial_id in self.latest and self.latest[trial.trial_id][0] >= self.milestone

    def halve(self) -> tuple[list[Any], list[Any]]:
        """Keep the top ``keep / eta`` of the live trials and end the rest; the next
        milestone is ``eta`` times further (never past ``max_t``: the first milestone is
        ``int(max_t / eta**halvings)``)."""
        self.halvings -= 1
        self.keep = math.ceil(self.keep / self.eta)
        self.milestone = int(self.milestone * self.eta)
        live = sorted(self.live(), key=lambda t: self.latest[t.trial_id][1], reverse=True)
        kept, dropped = live[: self.keep], live[self.keep :]
        self.ended.update(t.trial_id for t in dropped)
        return kept, dropped


class HyperBandScheduler(FIFOScheduler):
    """Trials in a bracket pause at each milestone until every one of them reaches it;
    then the top ``1/reduction_factor`` resume (from their checkpoints) and the rest stop.

    As in Ray Tune, each round of brackets starts with the one that runs its trials
    to ``max_t`` without stopping any, then brackets of more trials and earlier first
    milestones: bracket ``s`` takes ``ceil(B / (s + 1) * reduction_factor**s)`` trials
    (``B`` the number of brackets), their first milestone at
    ``max_t / reduction_factor**s``, and halves ``s`` times. A bracket that is not full
    when the search ends halves what it has, keeping as many as a full one would.

    Args:
        time_attr: The result key that counts progress.
        metric: The metric to compare.
        mode: ``"min"`` or ``"max"``.
        max_t: The most ``time_attr`` a trial gets.
        reduction_factor: The fraction ``1/reduction_factor`` is kept at each milestone.
        stop_last_trials: Stop the trials left at a bracket's last milestone (else they
            run on to their own end).

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
        if max_t < 1:
            raise ValueError(
                f"max_t must be at least 1, got {max_t}. HINT: max_t is in units of "
                f"time_attr ({time_attr!r})"
            )
        self._time_attr = time_attr
        self._metric, self._mode = metric, mode
        self.max_t = max_t
        self._eta = reduction_factor
        self._stop_last = stop_last_trials
        self._num_brackets = round(math.log(max_t) / math.log(reduction_factor)) + 1
        self._next_s = 0
        self._brackets: list[_Bracket] = []
        self._bracket_of: dict[str, _Bracket] = {}
        self._resumable: list[Any] = []

    def _new_bracket(self) -> _Bracket:
        while True:
            s, self._next_s = self._next_s, (self._next_s + 1) % self._num_brackets
            first_milestone = int(self.max_t * self._eta**-s)
            if first_milestone > 0:  # a bracket whose first milestone rounds to 0 is skipped
                break
        capacity = math.ceil(self._num_brackets / (s + 1) * self._eta**s)
        bracket = _Bracket(capacity, first_milestone, self._eta, halvings=s)
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
        bracket = self._bracket_of.get(trial.trial_id)
        score = self._score(result)
        if bracket is None or score is None or self._time_attr not in result:
            return self.CONTINUE
        if trial.trial_id in bracket.ended:
            return self.STOP  # its bracket is done with it
        now = float(result[self._time_attr])
        bracket.latest[trial.trial_id] = (now, score)
        if bracket.halvings == 0 and not self._stop_last:
            return self.CONTINUE  # past its last halving: to its own end
        if now < bracket.milestone:
            return self.CONTINUE
        if bracket.halvings == 0:
            bracket.ended.add(trial.trial_id)
            return self.STOP  # its last milestone (Ray pauses it there, then stops it)
        return self._maybe_halve(tune_controller, bracket, trial)

    def _maybe_halve(self, tune_controller: Any, bracket: _Bracket, trial: Any) -> Any:
        """The decision for ``trial``, which reached the milestone: PAUSE until the others
        do, then CONTINUE if it is kept (PAUSE if it is past the next milestone already),
        else STOP."""
        finished = bool(getattr(tune_controller, "search_finished", True))
        if not bracket.ready(finished):
            return self.PAUSE
        kept, dropped = self._halve(bracket, finished)
        for other in dropped:
            if other is not trial and tune_controller is not None:
                tune_controller.stop_trial(other)
        ahead = [t for t in kept if bracket.halvings > 0 and bracket.reached(t)]
        self._resumable += [t for t in kept if t is not trial and t not in ahead]
        if trial in dropped:
            return self.STOP
        return self.PAUSE if trial in ahead else self.CONTINUE

    def _halve(self, bracket: _Bracket, finished: bool) -> tuple[list[Any], list[Any]]:
        """Halve until the kept trials have a milestone ahead (trials may report past one);
        at the last milestone, the trials that reached it end too (``stop_last_trials``)."""
        dropped: list[Any] = []
        while True:
            kept, out = bracket.halve()
            dropped += out
            if bracket.halvings == 0 and self._stop_last:
                done = [t for t in kept if bracket.reached(t)]
                bracket.ended.update(t.trial_id for t in done)
                return [t for t in kept if t not in done], dropped + done
            if bracket.halvings == 0 or not bracket.ready(finished):
                return kept, dropped

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        self._end(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._end(tune_controller, trial)

    def _end(self, tune_controller: Any, trial: Any) -> None:
        """A trial that ends may be the one the others waited for."""
        bracket = self._bracket_of.get(trial.trial_id)
        if bracket is None or trial.trial_id in bracket.ended:
            return
        bracket.ended.add(trial.trial_id)
        if trial in self._resumable:
            self._resumable.remove(trial)
        if bracket.halvings == 0:
            return  # nobody waits at the last milestone
        waiting = [t for t in bracket.live() if bracket.reached(t)]
        if waiting and bracket.ready(bool(getattr(tune_controller, "search_finished", True))):
            first = waiting[0]  # decided for as if it had reported last
            decision = self._maybe_halve(tune_controller, bracket, first)
            if decision == self.CONTINUE:
                self._resumable.insert(0, first)
            elif decision == self.STOP and tune_controller is not None:
                tune_controller.stop_trial(first)

    def choose_trial_to_run(self, tune_controller: Any, trials: Sequence[Any]) -> Any:
        """A paused trial its bracket kept, else the first pending trial."""
        for trial in self._resumable:
            if trial.status == "PAUSED":
                return trial  # it leaves the list when it reports again
        return next((t for t in trials if t.status == "PENDING"), None)
