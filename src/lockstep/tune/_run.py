"""``tune.run``: Ray Tune's older entry point, a Tuner underneath, and the ExperimentAnalysis
it returns."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig, FailureConfig
from lockstep.tune._result_grid import ResultGrid
from lockstep.tune._trainable import with_resources
from lockstep.tune._trial import TuneTrial
from lockstep.tune._tuner import RunConfig, TuneConfig, Tuner


class TuneError(Exception):
    """An experiment could not be completed: trials failed (``tune.run``'s
    ``raise_on_failed_trial``), as Ray's ``TuneError``."""


def run(
    run_or_experiment: Any,
    *,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Any = None,
    time_budget_s: float | None = None,
    config: Mapping[str, Any] | None = None,
    resources_per_trial: Mapping[str, float] | None = None,
    num_samples: int = 1,
    storage_path: str | os.PathLike[str] | None = None,
    local_dir: str | os.PathLike[str] | None = None,
    search_alg: Any = None,
    scheduler: Any = None,
    checkpoint_config: CheckpointConfig | None = None,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    verbose: int | None = None,
    callbacks: Sequence[Any] | None = None,
    max_failures: int = 0,
    fail_fast: bool = False,
    raise_on_failed_trial: bool = True,
    max_concurrent_trials: int | None = None,
    trial_name_creator: Callable[[Any], str] | None = None,
    trial_dirname_creator: Callable[[Any], str] | None = None,
    resume: bool | str | None = None,
    **_ignored: Any,
) -> ExperimentAnalysis:
    """Run a function (or trainer) once per config of ``config``, as Ray Tune's older
    ``tune.run`` did; a :class:`~lockstep.tune.Tuner` does the work.

    ``resume=True`` (or ``"AUTO"``) continues the experiment of the same name when there
    is one. Options of Ray's that only concern its cluster are accepted and ignored.

    Raises:
        TuneError: A trial failed and ``raise_on_failed_trial`` is set.

    Example:
        >>> import tempfile
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"loss": (config["x"] - 2) ** 2})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     analysis = tune.run(objective, config={"x": tune.grid_search([1, 2, 3])},
        ...                         metric="loss", mode="min", storage_path=d, verbose=0)
        >>> analysis.best_config
        {'x': 2}
    """
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    if checkpoint_config is None:
        checkpoint_config = CheckpointConfig(
            num_to_keep=keep_checkpoints_num,
            checkpoint_score_attribute=checkpoint_score_attr,
        )
    where = storage_path or local_dir
    run_config = RunConfig(
        name=name,
        storage_path=os.fspath(where) if where is not None else None,
        stop=stop,
        callbacks=list(callbacks or []),
        checkpoint_config=checkpoint_config,
        failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
        verbose=1 if verbose is None else verbose,
    )
    tune_config = TuneConfig(
        metric=metric,
        mode=mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=num_samples,
        max_concurrent_trials=max_concurrent_trials,
        time_budget_s=time_budget_s,
        trial_name_creator=trial_name_creator,
        trial_dirname_creator=trial_dirname_creator,
    )
    tuner = Tuner(trainable, param_space=config, tune_config=tune_config, run_config=run_config)
    path = tuner._experiment_dir.uri
    if resume and Tuner.can_restore(path):
        tuner = Tuner.restore(path, trainable=trainable, param_space=config)
    grid = tuner.fit()
    analysis = ExperimentAnalysis(grid, metric=metric, mode=mode)
    failed = [t for t in analysis.trials if t.status == "ERROR"]
    if failed and raise_on_failed_trial:
        raise TuneError(f"Trials did not complete: {[str(t) for t in failed]}")
    return analysis


class ExperimentAnalysis:
    """What ``tune.run`` returns: every trial, and the best by a metric (Ray's names).

    Example:
        >>> import tempfile
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"score": config["x"]})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     analysis = tune.run(objective, config={"x": tune.grid_search([1, 5])},
        ...                         storage_path=d, verbose=0)
        >>> analysis.get_best_config(metric="score", mode="max"), len(analysis.trials)
        ({'x': 5}, 2)
    """

    def __init__(
        self, grid: ResultGrid, *, metric: str | None = None, mode: str | None = None
    ) -> None:
        self._grid = grid
        self.default_metric = metric
        self.default_mode = mode
        self.trials: list[TuneTrial] = list(grid._trials)

    @property
    def experiment_path(self) -> str:
        """The experiment directory."""
        return self._grid.experiment_path

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        """Every trial's last result, by trial id."""
        return {t.trial_id: dict(t.last_result) for t in self.trials}

    @property
    def results_df(self) -> Any:
        """One row per trial: its last result and config."""
        return self._grid.get_dataframe()

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        """Every result of each trial, one table per trial directory."""
        import pandas as pd

        return {t.path: pd.DataFrame(t.results) for t in self.trials}

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """One row per trial: its last result, or its best by ``metric`` and ``mode``."""
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    def get_best_trial(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> TuneTrial | None:
        """The trial with the best ``metric`` (None when no trial reported it)."""
        try:
            best = self._grid.get_best_result(
                metric or self.default_metric, mode or self.default_mode, scope
            )
        except RuntimeError:
            return None
        return next(t for t in self.trials if t.path == best.path)

    def get_best_config(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict[str, Any] | None:
        trial = self.get_best_trial(metric, mode, scope)
        return dict(trial.config) if trial is not None else None

    def get_best_checkpoint(
        self, trial: TuneTrial, metric: str | None = None, mode: str | None = None
    ) -> Checkpoint | None:
        """The trial's latest checkpoint (its kept ones, by ``metric``, are in its run)."""
        del metric, mode
        return trial.checkpoint

    def get_all_configs(self) -> dict[str, dict[str, Any]]:
        """Every trial's config, by its directory."""
        return {t.path: dict(t.config) for t in self.trials}

    @property
    def best_trial(self) -> TuneTrial | None:
        """The best trial by the metric and mode given to ``tune.run``."""
        self._check_defaults()
        return self.get_best_trial()

    @property
    def best_config(self) -> dict[str, Any] | None:
        self._check_defaults()
        return self.get_best_config()

    @property
    def best_result(self) -> dict[str, Any] | None:
        trial = self.best_trial
        return dict(trial.last_result) if trial is not None else None

    @property
    def best_checkpoint(self) -> Checkpoint | None:
        trial = self.best_trial
        return trial.checkpoint if trial is not None else None

    @property
    def best_logdir(self) -> str | None:
        trial = self.best_trial
        return trial.path if trial is not None else None

    best_path = best_logdir

    def _check_defaults(self) -> None:
        if self.default_metric is None or self.default_mode is None:
            raise ValueError(
                "the best trial needs a metric and a mode. HINT: tune.run(..., metric='loss', "
                "mode='min'), or get_best_trial(metric=..., mode=...)"
            )
