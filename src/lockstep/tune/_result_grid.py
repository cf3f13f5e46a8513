"""ResultGrid: every trial's Result, with the best one and a table of all."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from lockstep._core.result import Result
from lockstep.tune._trial import ERROR, TERMINATED, TuneTrial

SCOPES = ("last", "all", "avg", "last-5-avg", "last-10-avg")


class ResultGrid:
    """The results of a Tuner's trials, in the order the trials were created.

    Example:
        >>> import tempfile
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"loss": (config["x"] - 2) ** 2})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     grid = tune.Tuner(objective, param_space={"x": tune.grid_search([1, 2, 3])},
        ...         run_config=tune.RunConfig(storage_path=d, verbose=0)).fit()
        ...     best = grid.get_best_result(metric="loss", mode="min")
        >>> len(grid), best.config, grid.num_errors
        (3, {'x': 2}, 0)
    """

    def __init__(
        self, trials: list[TuneTrial], experiment_path: str, metric: str | None, mode: str | None
    ) -> None:
        self._trials = list(trials)
        self._results = [_with_config(t) for t in self._trials]
        self._path = experiment_path
        self._metric = metric
        self._mode = mode

    @property
    def experiment_path(self) -> str:
        """The experiment directory."""
        return self._path

    @property
    def results(self) -> list[Result]:
        """Every trial's Result (the older way to iterate)."""
        return list(self._results)

    @property
    def errors(self) -> list[BaseException]:
        """The errors of the trials that failed."""
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        """How many trials failed."""
        return sum(t.status == ERROR for t in self._trials)

    @property
    def num_terminated(self) -> int:
        """How many trials ended without an error."""
        return sum(t.status == TERMINATED for t in self._trials)

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, index: int) -> Result:
        return self._results[index]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def __repr__(self) -> str:
        return f"ResultGrid<{self._results!r}>"

    def get_best_result(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Result:
        """The trial with the best ``metric``; ``scope`` picks which of its results count:
        ``"last"``, ``"all"`` (its best), ``"avg"``, ``"last-5-avg"``, ``"last-10-avg"``.

        Raises:
            ValueError: No metric or mode, here or in TuneConfig.
            RuntimeError: No trial reported the metric.
        """
        metric = metric or self._metric
        mode = mode or self._mode
        if metric is None or mode not in ("min", "max"):
            raise ValueError(
                "get_best_result needs a metric and a mode. HINT: "
                "get_best_result(metric='loss', mode='min'), or set them in TuneConfig"
            )
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}. HINT: use one of {', '.join(SCOPES)}")
        best: tuple[float, Result] | None = None
        for trial, result in zip(self._trials, self._results, strict=True):
            value = _scoped(trial, metric, mode, scope)
            if value is None or (filter_nan_and_inf and not math.isfinite(value)):
                continue
            signed = value if mode == "max" else -value
            if best is None or signed > best[0]:
                best = (signed, result)
        if best is None:
            raise RuntimeError(
                f"no trial reported {metric!r} (with a finite value). HINT: check the metric "
                "name against what the trials report"
            )
        return best[1]

    def get_dataframe(
        self, filter_metric: str | None = None, filter_mode: str | None = None
    ) -> Any:
        """One row per trial: its last result (or its best by ``filter_metric``), its
        config as ``config/...`` columns, and its directory."""
        import pandas as pd

        from lockstep._core.mappings import flatten_dict

        rows = []
        for trial in self._trials:
            row = dict(trial.last_result)
            if filter_metric is not None and trial.results:
                pick = max if filter_mode == "max" else min
                scored = [r for r in trial.results if filter_metric in r]
                if scored:
                    row = dict(pick(scored, key=lambda r: r[filter_metric]))
            row.update({f"config/{k}": v for k, v in flatten_dict(trial.config).items()})
            row["trial_id"] = trial.trial_id
            row["logdir"] = trial.path
            rows.append(row)
        return pd.DataFrame(rows)


def _scoped(trial: TuneTrial, metric: str, mode: str, scope: str) -> float | None:
    values = [float(r[metric]) for r in trial.results if _is_number(r.get(metric))]
    if not values:
        return None
    if scope == "last":
        return values[-1]
    if scope == "all":
        return max(values) if mode == "max" else min(values)
    window = {"avg": len(values), "last-5-avg": 5, "last-10-avg": 10}[scope]
    tail = values[-window:]
    return sum(tail) / len(tail)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _with_config(trial: TuneTrial) -> Result:
    result = trial.result()
    result.config = dict(trial.config)  # type: ignore[attr-defined]
    return result
