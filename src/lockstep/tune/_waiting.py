"""The trials waiting to run, kept as trials change status rather than found by a scan.

A scheduler chooses the next trial among the waiting ones (pending or paused), in the
order the trials were created; an experiment of thousands of trials has a handful
waiting at any moment, so each choice costs what the waiting trials do, not all trials.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from lockstep.tune._trial import PAUSED, PENDING, TuneTrial

WAITING = (PENDING, PAUSED)


class WaitingTrials:
    """The pending and paused trials, in creation order, and every trial's status change.

    Every status change of a trial the runner knows goes through :meth:`set_status`, so
    that this set is the trials whose status is ``PENDING`` or ``PAUSED``, always.

    Example:
        >>> from lockstep.tune._trial import RUNNING
        >>> class T:
        ...     def __init__(self, trial_id, status):
        ...         self.trial_id, self.status = trial_id, status
        >>> a, b, c = T("a", PENDING), T("b", RUNNING), T("c", PAUSED)
        >>> waiting = WaitingTrials([a, b, c])
        >>> [t.trial_id for t in waiting.ordered()]
        ['a', 'c']
        >>> waiting.set_status(a, RUNNING); waiting.set_status(b, PAUSED)
        >>> [t.trial_id for t in waiting.ordered()]
        ['b', 'c']
    """

    def __init__(self, trials: Iterable[TuneTrial] = ()) -> None:
        self._position: dict[str, int] = {}  # every trial's place in creation order
        self._keys: list[int] = []  # the waiting trials' places, sorted
        self._trials: list[TuneTrial] = []  # the waiting trials, in the same order
        for trial in trials:
            self.add(trial)

    def add(self, trial: TuneTrial) -> None:
        """A trial new to the runner (created, or restored), after all the others."""
        self._position[trial.trial_id] = len(self._position)
        if trial.status in WAITING:
            self._insert(trial)

    def set_status(self, trial: TuneTrial, status: str) -> None:
        """Change ``trial``'s status, keeping it in (or out of) the waiting trials."""
        was_waiting = trial.status in WAITING
        trial.status = status
        if was_waiting and status not in WAITING:
            index = bisect.bisect_left(self._keys, self._position[trial.trial_id])
            del self._keys[index], self._trials[index]
        elif status in WAITING and not was_waiting:
            self._insert(trial)

    def ordered(self) -> list[TuneTrial]:
        """The waiting trials in creation order (the runner's own list: not to change)."""
        return self._trials

    def __len__(self) -> int:
        return len(self._trials)

    def _insert(self, trial: TuneTrial) -> None:
        key = self._position[trial.trial_id]
        index = bisect.bisect_left(self._keys, key)
        self._keys.insert(index, key)
        self._trials.insert(index, trial)
