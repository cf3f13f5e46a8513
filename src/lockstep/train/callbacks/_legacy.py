"""Ray Train 1.x's callback interface (``TrainingCallback.handle_result(results)``)."""

from __future__ import annotations

from typing import Any

from lockstep._core.callback import Trial
from lockstep.train.callbacks._logger import TrialLifecycleCallback, worker_results


class TrainingCallback(TrialLifecycleCallback):
    """The callback of early Ray Train: ``handle_result`` gets every worker's results.

    Override ``start_training``, ``handle_result`` and ``finish_training``. Works in
    ``Trainer.run(callbacks=[...])`` and in ``RunConfig(callbacks=[...])``. Each worker's
    dict holds what it reported plus ``_training_iteration``, ``_timestamp`` and
    ``_time_this_iter_s``, as Ray Train 1.x added them.

    Example:
        >>> class PrintLosses(TrainingCallback):
        ...     def handle_result(self, results, **info):
        ...         print([r["loss"] for r in results])
        >>> trial = Trial(trial_id="run", config={}, path="/tmp")
        >>> PrintLosses().on_trial_result(1, [trial], trial, {"training_iteration": 1},
        ...     worker_results=[{"loss": 0.5}, {"loss": 0.7}])
        [0.5, 0.7]
    """

    def start_training(self, logdir: str, config: dict[str, Any], **info: Any) -> None:
        """Called once before training starts, with the run directory and the config."""

    def handle_result(self, results: list[dict[str, Any]], **info: Any) -> None:
        """Called for each report with every worker's results, in rank order."""

    def finish_training(self, error: bool = False, **info: Any) -> None:
        """Called once after training ends; ``error`` when it failed."""

    def _trial_started(self, trial: Trial) -> None:
        self.start_training(trial.path, trial.config)

    def _trial_result(
        self, iteration: int, trial: Trial, result: dict[str, Any], info: dict[str, Any]
    ) -> None:
        results = worker_results(result, info)
        if results is not None:
            self.handle_result(results)

    def _trial_ended(self, trial: Trial, failed: bool) -> None:
        self.finish_training(error=failed)


class PrintCallback(TrainingCallback):
    """Prints every worker's results of each report (Ray Train 1.x's ``PrintCallback``).

    Example:
        >>> trial = Trial(trial_id="run", config={}, path="/tmp")
        >>> PrintCallback().on_trial_result(1, [trial], trial, {"training_iteration": 1},
        ...     worker_results=[{"loss": 0.5}])
        [{'loss': 0.5, '_training_iteration': 1, '_timestamp': None, '_time_this_iter_s': None}]
    """

    def handle_result(self, results: list[dict[str, Any]], **info: Any) -> None:
        print(results)
