"""The loggers that write files in the trial's directory: JSON lines, CSV, TensorBoard."""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import IO, Any

from lockstep._core import storage
from lockstep._core.callback import Trial
from lockstep._core.mappings import flatten_dict
from lockstep.train.callbacks._logger import LoggerCallback, scalar, to_json, worker_results

EXPR_PARAM_FILE = "params.json"
EXPR_PARAM_PICKLE_FILE = "params.pkl"
EXPR_RESULT_FILE = "result.json"
EXPR_PROGRESS_FILE = "progress.csv"
RESULTS_LIST_FILE = "results.json"  # Ray Train 1.x's JSON logger, in a Train run


class _LocalDir:
    """The trial's directory when it is local; a temporary one uploaded at the end otherwise."""

    def __init__(self, path: str) -> None:
        self._remote = path if storage.is_uri(path) else None
        self.path = tempfile.mkdtemp(prefix="lockstep-log-") if self._remote else path
        os.makedirs(self.path, exist_ok=True)

    def close(self) -> None:
        if self._remote is None:
            return
        target = storage.StorageDir.from_uri(self._remote)
        for name in os.listdir(self.path):
            target.fs.put(os.path.join(self.path, name), target.join(name))
        shutil.rmtree(self.path, ignore_errors=True)


class JsonLoggerCallback(LoggerCallback):
    """Writes each trial's results as JSON lines to ``result.json`` (and its config to
    ``params.json``/``params.pkl``), as Ray Tune's ``JsonLoggerCallback``.

    A Train run writes ``result.json`` in its run directory itself, one line per report
    with ``training_iteration``; there this logger writes what Ray Train 1.x's
    ``JsonLoggerCallback`` wrote: ``results.json``, one JSON list with an element per
    report, the results of the workers in ``workers_to_log`` (rank 0's dict by default, a
    list of dicts for a list of ranks, every rank for None), rewritten whole each time.

    Args:
        logdir: Where ``results.json`` goes in a Train run; the run's directory by default.
        filename: Its name, ``results.json`` by default.
        workers_to_log: A rank, a list of ranks, or None for every rank.

    Example:
        >>> import json, os, tempfile
        >>> from lockstep._core.callback import Trial
        >>> logdir = tempfile.mkdtemp()
        >>> trial = Trial(trial_id="t1", config={"lr": 0.1}, path=logdir)
        >>> logger = JsonLoggerCallback()
        >>> logger.on_trial_start(0, [trial], trial)
        >>> logger.on_trial_result(1, [trial], trial, {"loss": 0.5, "training_iteration": 1})
        >>> logger.on_trial_complete(1, [trial], trial)
        >>> with open(os.path.join(logdir, "result.json")) as f:
        ...     json.loads(f.readline())["loss"]
        0.5
    """

    def __init__(
        self,
        logdir: str | None = None,
        filename: str | None = None,
        workers_to_log: int | Sequence[int] | None = 0,
    ) -> None:
        self._files: dict[Trial, tuple[_LocalDir, IO[str]]] = {}
        self._run_results = _ResultsList(logdir, filename or RESULTS_LIST_FILE, workers_to_log)

    def _trial_result(
        self, iteration: int, trial: Trial, result: dict[str, Any], info: dict[str, Any]
    ) -> None:
        if trial.results_logged:
            self._run_results.add(trial, worker_results(result, info))
        else:
            super()._trial_result(iteration, trial, result, info)

    def log_trial_start(self, trial: Trial) -> None:
        if trial.results_logged:
            self._run_results.start(trial)
            return
        self.log_trial_end(trial)
        import cloudpickle

        local = _LocalDir(trial.path)
        with open(os.path.join(local.path, EXPR_PARAM_FILE), "w", encoding="utf-8") as f:
            f.write(to_json(trial.config) + "\n")
        with open(os.path.join(local.path, EXPR_PARAM_PICKLE_FILE), "wb") as fb:
            cloudpickle.dump(trial.config, fb)
        stream = open(os.path.join(local.path, EXPR_RESULT_FILE), "a", encoding="utf-8")  # noqa: SIM115
        self._files[trial] = (local, stream)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        if trial.results_logged:
            return
        if trial not in self._files:
            self.log_trial_start(trial)
        stream = self._files[trial][1]
        stream.write(to_json(result) + "\n")
        stream.flush()

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        if trial in self._files:
            local, stream = self._files.pop(trial)
            stream.close()
            local.close()


class _ResultsList:
    """Ray Train 1.x's ``results.json`` of a Train run: one JSON list, rewritten whole at
    each report so that it is valid JSON at any moment."""

    def __init__(
        self, logdir: str | None, filename: str, workers_to_log: int | Sequence[int] | None
    ) -> None:
        self._logdir = logdir
        self._filename = filename
        self._workers_to_log = workers_to_log
        self._target: storage.StorageDir | None = None
        self._logged: list[Any] = []

    def start(self, trial: Trial) -> None:
        directory = os.path.expanduser(self._logdir) if self._logdir is not None else trial.path
        self._target = storage.StorageDir.from_uri(directory)
        self._target.makedirs()
        self._logged = []
        self._write()

    def add(self, trial: Trial, results: list[dict[str, Any]] | None) -> None:
        if results is None:
            return
        if self._target is None:
            self.start(trial)
        workers = self._workers_to_log
        if workers is None:
            self._logged.append(results)
        elif isinstance(workers, int):
            self._logged.append(results[workers])
        else:
            self._logged.append([results[i] for i in workers])
        self._write()

    def _write(self) -> None:
        assert self._target is not None
        self._target.write_atomic(self._filename, to_json(self._logged).encode("utf-8"))


class CSVLoggerCallback(LoggerCallback):
    """Writes each trial's results to ``progress.csv``, nested keys as ``a/b`` columns and
    without ``config``, as Ray Tune's ``CSVLoggerCallback`` (columns fixed by the first result).

    A Train run writes ``progress.csv`` in its run directory itself; this logger leaves
    that file to it.

    Example:
        >>> import csv, os, tempfile
        >>> from lockstep._core.callback import Trial
        >>> logdir = tempfile.mkdtemp()
        >>> trial = Trial(trial_id="t1", config={}, path=logdir)
        >>> logger = CSVLoggerCallback()
        >>> logger.on_trial_result(1, [trial], trial, {"m": {"loss": 0.5}, "training_iteration": 1})
        >>> logger.on_trial_complete(1, [trial], trial)
        >>> with open(os.path.join(logdir, "progress.csv")) as f:
        ...     next(csv.DictReader(f))["m/loss"]
        '0.5'
    """

    def __init__(self) -> None:
        self._files: dict[Trial, tuple[_LocalDir, IO[str], csv.DictWriter[str] | None]] = {}

    def log_trial_start(self, trial: Trial) -> None:
        if trial.results_logged:
            return
        self.log_trial_end(trial)
        local = _LocalDir(trial.path)
        path = os.path.join(local.path, EXPR_PROGRESS_FILE)
        stream = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        self._files[trial] = (local, stream, None)

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        if trial.results_logged:
            return
        if trial not in self._files:
            self.log_trial_start(trial)
        local, stream, writer = self._files[trial]
        row = flatten_dict({k: v for k, v in result.items() if k != "config"})
        if writer is None:
            writer = csv.DictWriter(stream, list(row))
            if stream.tell() == 0:
                writer.writeheader()
            self._files[trial] = (local, stream, writer)
        writer.writerow({k: v for k, v in row.items() if k in writer.fieldnames})
        stream.flush()

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        if trial in self._files:
            local, stream, _ = self._files.pop(trial)
            stream.close()
            local.close()


_NOT_LOGGED = ("config", "pid", "timestamp", "time_total_s", "training_iteration")


class TBXLoggerCallback(LoggerCallback):
    """Writes each trial's numeric results as TensorBoard scalars with tensorboardX, as
    Ray Tune's ``TBXLoggerCallback``: tags ``ray/tune/<metric>`` (nested keys joined by
    ``/``), step ``training_iteration``, and the trial's config as hparams at its end.

    Open the files with ``tensorboard --logdir <storage_path>``.

    Example:
        >>> import tempfile
        >>> from lockstep._core.callback import Trial
        >>> import os
        >>> logdir = tempfile.mkdtemp()
        >>> trial = Trial(trial_id="t1", config={"lr": 0.1}, path=logdir)
        >>> logger = TBXLoggerCallback()
        >>> for i in (1, 2):
        ...     logger.on_trial_result(i, [trial], trial, {"loss": 1 / i, "training_iteration": i})
        >>> logger.on_trial_complete(2, [trial], trial)
        >>> [name.startswith("events.out.tfevents.") for name in os.listdir(logdir)]
        [True]
    """

    def __init__(self) -> None:
        from tensorboardX import SummaryWriter

        self._writer_cls = SummaryWriter
        self._writers: dict[Trial, tuple[_LocalDir, Any]] = {}
        self._last: dict[Trial, dict[str, float]] = {}

    def log_trial_start(self, trial: Trial) -> None:
        self._close(trial)
        local = _LocalDir(trial.path)
        self._writers[trial] = (local, self._writer_cls(local.path, flush_secs=30))
        self._last[trial] = {}

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        if trial not in self._writers:
            self.log_trial_start(trial)
        writer = self._writers[trial][1]
        step = result.get("timesteps_total") or result["training_iteration"]
        kept = {k: v for k, v in result.items() if k not in _NOT_LOGGED}
        logged: dict[str, float] = {}
        for name, value in flatten_dict(kept).items():
            number = scalar(value)
            if number is not None:
                logged[f"ray/tune/{name}"] = number
                writer.add_scalar(f"ray/tune/{name}", number, global_step=step)
        self._last[trial] = logged
        writer.flush()

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        if trial in self._writers and self._last.get(trial) and trial.config:
            self._log_hparams(trial)
        self._close(trial)

    def _log_hparams(self, trial: Trial) -> None:
        from tensorboardX.summary import hparams

        params = {
            k: v
            for k, v in flatten_dict(trial.config).items()
            if isinstance(v, str | bool | int | float)
        }
        if not params:
            return
        writer = self._writers[trial][1]
        for summary in hparams(hparam_dict=params, metric_dict=self._last[trial]):
            writer.file_writer.add_summary(summary)

    def _close(self, trial: Trial) -> None:
        if trial in self._writers:
            local, writer = self._writers.pop(trial)
            writer.close()
            local.close()
        self._last.pop(trial, None)
