"""LoggerCallback: Ray Tune's logging interface on top of the one callback protocol."""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

from lockstep._core.callback import Callback, Trial


class TrialLifecycleCallback(Callback):
    """The trial hooks as three events: a trial started, gave a result, ended.

    The base of the logging interfaces that see a trial's life and not the experiment's
    (:class:`LoggerCallback`, Ray Train 1.x's ``TrainingCallback``), so that each maps the
    hooks once. ``info`` holds the hook's keyword arguments (``worker_results`` in a Train
    run).
    """

    def _trial_started(self, trial: Trial) -> None:
        """A trial started (or restarted)."""

    def _trial_result(
        self, iteration: int, trial: Trial, result: dict[str, Any], info: dict[str, Any]
    ) -> None:
        """A trial reported ``result``."""

    def _trial_ended(self, trial: Trial, failed: bool) -> None:
        """A trial ended; ``failed`` when with an error."""

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._trial_started(trial)

    def on_trial_result(
        self,
        iteration: int,
        trials: list[Trial],
        trial: Trial,
        result: dict[str, Any],
        **info: Any,
    ) -> None:
        self._trial_result(iteration, trial, result, info)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._trial_ended(trial, failed=False)

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self._trial_ended(trial, failed=True)


class LoggerCallback(TrialLifecycleCallback):
    """Logs each trial's start, results and end; as ``ray.tune.logger.LoggerCallback``.

    Override the ``log_trial_*`` methods; the :class:`Callback` hooks call them. The same
    subclass serves a Train run (``RunConfig(callbacks=[...])``, the run being the only
    trial) and a Tune experiment (one call per trial). Close files in
    :meth:`log_trial_end`.

    Example:
        >>> class PrintLoss(LoggerCallback):
        ...     def log_trial_result(self, iteration, trial, result):
        ...         print(trial, result["training_iteration"], result["loss"])
        >>> trial = Trial(trial_id="t1", config={}, path="/tmp")
        >>> PrintLoss().on_trial_result(1, [trial], trial, {"training_iteration": 1, "loss": 0.5})
        t1 1 0.5
    """

    def log_trial_start(self, trial: Trial) -> None:
        """Called when a trial starts (or restarts)."""

    def log_trial_restore(self, trial: Trial) -> None:
        """Called when a trial is restored from a checkpoint."""

    def log_trial_save(self, trial: Trial) -> None:
        """Called after a checkpoint of the trial is committed."""

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        """Called for each result, with ``training_iteration`` and the other auto-filled keys."""

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        """Called once when a trial ends; ``failed`` when it ended with an error."""

    def _trial_started(self, trial: Trial) -> None:
        self.log_trial_start(trial)

    def _trial_result(
        self, iteration: int, trial: Trial, result: dict[str, Any], info: dict[str, Any]
    ) -> None:
        self.log_trial_result(iteration, trial, result)

    def _trial_ended(self, trial: Trial, failed: bool) -> None:
        self.log_trial_end(trial, failed=failed)

    def on_checkpoint(
        self, iteration: int, trials: list[Trial], trial: Trial, checkpoint: Any, **info: Any
    ) -> None:
        self.log_trial_save(trial)


def worker_results(result: dict[str, Any], info: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every worker's results of a step as Ray Train 1.x's callbacks got them: what each
    reported plus ``_training_iteration``, ``_timestamp`` and ``_time_this_iter_s``. None
    for a step of ``save_checkpoint()`` alone, which was no result in Ray 1.x."""
    auto = {
        "_training_iteration": result.get("training_iteration"),
        "_timestamp": result.get("timestamp"),
        "_time_this_iter_s": result.get("time_this_iter_s"),
    }
    workers = info.get("worker_results") or [{k: v for k, v in result.items() if k != "config"}]
    if not any(workers):
        return None
    return [{**w, **auto} for w in workers]


def scalar(value: Any) -> float | None:
    """``value`` as a float when it is a real number (numpy ones too) and not NaN."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return None if math.isnan(number) else number


def to_json(value: Any) -> str:
    """One JSON line; values JSON cannot hold (arrays, objects) become lists or their repr."""
    return json.dumps(value, default=_json_default)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return repr(value)
