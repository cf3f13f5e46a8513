"""Trials and a runner as the schedulers see them, for unit tests without a Tuner.

A scheduler reads a trial's ``trial_id``, ``status``, ``config`` and ``checkpoint``, and
of the runner only ``search_finished`` and ``stop_trial``: the fakes have exactly those.
``FakeRunner`` plays the Tuner's part around one scheduler: it adds trials, reports results
and carries the decisions out as the Tuner does (a stopped trial that waits ends at once,
and the scheduler hears of it then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lockstep.tune.schedulers import Exploit, TrialScheduler


@dataclass(eq=False)
class FakeTrial:
    trial_id: str
    config: dict[str, Any] = field(default_factory=dict)
    status: str = "PENDING"
    checkpoint: Any = None
    last_result: dict[str, Any] = field(default_factory=dict)
    stop_requested: bool = False

    def __repr__(self) -> str:
        return f"FakeTrial({self.trial_id}, {self.status})"


class FakeRunner:
    """The Tuner's side of the scheduler interface, decisions carried out at once."""

    def __init__(self, scheduler: TrialScheduler, search_finished: bool = False) -> None:
        self.scheduler = scheduler
        self.search_finished = search_finished
        self.trials: list[FakeTrial] = []
        self.stopped: list[str] = []  # the ids stop_trial was called with, in order

    def add(self, trial_id: str, config: dict[str, Any] | None = None) -> FakeTrial:
        trial = FakeTrial(trial_id, dict(config or {}), status="RUNNING")
        self.trials.append(trial)
        self.scheduler.on_trial_add(self, trial)
        return trial

    def add_all(self, count: int) -> list[FakeTrial]:
        return [self.add(f"t{i}") for i in range(count)]

    def report(self, trial: FakeTrial, **result: Any) -> Any:
        """The scheduler's decision for ``result``; PAUSE and STOP change the trial's
        status as the Tuner would once the trial's thread has ended."""
        trial.last_result = result
        decision = self.scheduler.on_trial_result(self, trial, result)
        if decision == TrialScheduler.PAUSE:
            trial.status = "PAUSED"
        elif decision == TrialScheduler.STOP:
            self.complete(trial)
        elif isinstance(decision, Exploit):
            trial.status, trial.config = "PENDING", dict(decision.config)
        return decision

    def complete(self, trial: FakeTrial) -> None:
        trial.status = "TERMINATED"
        self.scheduler.on_trial_complete(self, trial, trial.last_result)

    def fail(self, trial: FakeTrial) -> None:
        trial.status = "ERROR"
        self.scheduler.on_trial_error(self, trial)

    def resume(self, trial: FakeTrial) -> None:
        trial.status = "RUNNING"

    def stop_trial(self, trial: FakeTrial) -> None:
        """As the Tuner: a running trial stops at its next report, a waiting one now."""
        self.stopped.append(trial.trial_id)
        if trial.status == "RUNNING":
            trial.stop_requested = True
        elif trial.status in ("PENDING", "PAUSED"):
            self.complete(trial)

    def next_to_run(self) -> FakeTrial | None:
        waiting = [t for t in self.trials if t.status in ("PENDING", "PAUSED")]
        return self.scheduler.choose_trial_to_run(self, waiting)  # type: ignore[no-any-return]


def through_experiment_state(tmp_path: Any, **objects: Any) -> dict[str, Any]:
    """``objects`` written into an experiment state file and read back, as the Tuner saves
    its searcher and scheduler and ``Tuner.restore`` loads them (one pickle: objects that
    share a trial still share it)."""
    from lockstep._core import storage
    from lockstep.tune._state import read_state, write_state

    exp_dir = storage.StorageDir.from_uri(str(tmp_path))
    write_state(exp_dir, {"status": "running", "trials": [], **objects})
    return read_state(exp_dir)
