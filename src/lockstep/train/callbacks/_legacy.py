"""Ray Train 1.x's callback interface (``TrainingCallback.handle_result(results)``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from lockstep._core import storage
from lockstep._core.callback import Trial
from lockstep.train.callbacks._logger import TrialLifecycleCallback, to_json

RESULTS_FILE = "results.json"


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
        auto = {
            "_training_iteration": result.get("training_iteration"),
            "_timestamp": result.get("timestamp"),
            "_time_this_iter_s": result.get("time_this_iter_s"),
        }
        workers = info.get("worker_results") or [{k: v for k, v in result.items() if k != "config"}]
        if any(workers):  # a step of save_checkpoint() alone is no result, as in Ray 1.x
            self.handle_result([{**w, **auto} for w in workers])

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


class JsonLoggerCallback(TrainingCallback):
    """Ray Train 1.x's JSON logger: ``results.json`` in the run's directory holds one JSON
    list, an element per report.

    Each element is the results of the workers in ``workers_to_log``: by default rank 0's
    dict; a list of dicts for a list of ranks (None: every rank). The file is rewritten
    whole at each report, so it is valid JSON at any moment. Ray Tune's logger, which
    writes ``result.json`` lines, is ``lockstep.tune.logger.JsonLoggerCallback``.

    Args:
        logdir: The directory of the file; by default the run's directory.
        filename: The file's name, ``results.json`` by default.
        workers_to_log: A rank, a list of ranks, or None for every rank.

    Example:
        >>> import json, os, tempfile
        >>> logdir = tempfile.mkdtemp()
        >>> trial = Trial(trial_id="run", config={}, path=logdir)
        >>> logger = JsonLoggerCallback()
        >>> logger.on_trial_start(0, [trial], trial)
        >>> logger.on_trial_result(1, [trial], trial, {"training_iteration": 1},
        ...     worker_results=[{"loss": 0.5}, {"loss": 0.7}])
        >>> with open(os.path.join(logdir, "results.json")) as f:
        ...     [r["loss"] for r in json.load(f)]
        [0.5]
    """

    def __init__(
        self,
        logdir: str | None = None,
        filename: str | None = None,
        workers_to_log: int | Sequence[int] | None = 0,
    ) -> None:
        self._logdir = logdir
        self._filename = filename or RESULTS_FILE
        self._workers_to_log = workers_to_log
        self._target: storage.StorageDir | None = None
        self._logged: list[Any] = []

    @property
    def log_path(self) -> str | None:
        """The file written, once training started."""
        return None if self._target is None else self._target.join(self._filename)

    def start_training(self, logdir: str, config: dict[str, Any], **info: Any) -> None:
        directory = os.path.expanduser(self._logdir) if self._logdir is not None else logdir
        self._target = storage.StorageDir.from_uri(directory)
        self._target.makedirs()
        self._logged = []
        self._write()

    def handle_result(self, results: list[dict[str, Any]], **info: Any) -> None:
        workers = self._workers_to_log
        if workers is None:
            self._logged.append(results)
        elif isinstance(workers, int):
            self._logged.append(results[workers])
        else:
            self._logged.append([results[i] for i in workers])
        self._write()

    def _write(self) -> None:
        if self._target is not None:
            self._target.write_atomic(self._filename, to_json(self._logged).encode("utf-8"))
