"""The LightGBM callback that reports each round's metrics and checkpoints the booster."""

from __future__ import annotations

import math
from typing import Any

import lightgbm

from lockstep.train._gbdt import GBDTReportCallback
from lockstep.train._session import _require, get_context

# Metrics that are a root of a mean over rows; the others are combined as row-weighted means.
_ROOT_MEAN_SQUARE = ("rmse", "l2_root", "root_mean_squared_error")


class RayTrainReportCallback(GBDTReportCallback):
    """Reports every round's evaluation metrics, and checkpoints the booster.

    Pass it to ``lightgbm.train(..., callbacks=[RayTrainReportCallback()])`` in a training
    function. LightGBM evaluates each worker's own rows only; with several workers this
    callback combines the workers' values (row-weighted means; root mean squares for
    ``rmse``; an approximation for metrics such as ``auc`` that are not means) and puts them
    back into the evaluation results, so every worker reports the same metrics and later
    callbacks (early stopping) agree across workers. Metrics are flattened as
    ``"<valid name>-<metric>"``: ``"train-binary_logloss"``. Rank 0 attaches the booster as
    ``filename`` every ``frequency`` rounds and after the last round (an early stop ends
    training before it: checkpoint by frequency then).

    Takes the arguments of :class:`lockstep.train.xgboost.RayTrainReportCallback`
    (``metrics``, ``filename``, ``frequency``, ``checkpoint_at_end``,
    ``results_postprocessing_fn``); the booster's file is ``model.txt`` by default.

    Example:
        >>> import tempfile, numpy as np, lightgbm
        >>> from lockstep.train import RunConfig
        >>> from lockstep.train.lightgbm import LightGBMTrainer
        >>> def train_func():
        ...     x = np.arange(40.0).reshape(20, 2)
        ...     data = lightgbm.Dataset(x, label=x[:, 0] > 18)
        ...     lightgbm.train({"objective": "binary", "verbose": -1, "min_data_in_leaf": 2},
        ...                    data, num_boost_round=3, valid_sets=[data],
        ...                    valid_names=["train"], callbacks=[RayTrainReportCallback()])
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     result = LightGBMTrainer(
        ...         train_func, run_config=RunConfig(storage_path=storage, verbose=0)).fit()
        ...     booster = RayTrainReportCallback.get_model(result.checkpoint)
        >>> sorted(result.metrics), booster.current_iteration()
        (['train-binary_logloss'], 3)
    """

    CHECKPOINT_NAME = "model.txt"
    # Before LightGBM's own callbacks (logging 10, recording 20, early stopping 30) and the
    # user's (negative by default), so that they all see the combined values.
    order = -(10**9)
    before_iteration = False

    @classmethod
    def _load_booster(cls, path: str) -> lightgbm.Booster:
        return lightgbm.Booster(model_file=path)

    def __call__(self, env: Any) -> None:
        """Report this round's metrics, with the booster when a checkpoint is due."""
        results = env.evaluation_result_list or []
        if get_context().get_world_size() > 1 and results:
            results[:] = combine_across_workers(env.model, results)
        metrics = self._select({f"{r[0]}-{r[1]}": float(r[2]) for r in results})
        rounds = env.iteration + 1
        final = rounds == env.end_iteration and self._checkpoint_at_end
        save = None
        if self._due(rounds) or final:
            save = lambda path: env.model.save_model(path, num_iteration=-1)  # noqa: E731
        self._report(metrics, rounds, save)


def combine_across_workers(model: Any, results: list[Any]) -> list[Any]:
    """Every worker's evaluation results, combined over the workers' rows."""
    rows = _rows_per_dataset(model)
    mine = [(float(r[2]), rows.get(r[0], 1)) for r in results]
    everyone = _require("lightgbm's RayTrainReportCallback").all_gather(mine)
    combined = []
    for i, result in enumerate(results):
        values = [worker[i] for worker in everyone]
        combined.append(_with_value(result, _combine(result[1], values)))
    return combined


def _rows_per_dataset(model: Any) -> dict[str, int]:
    rows = {model._train_data_name: model.train_set.num_data()}
    for name, dataset in zip(model.name_valid_sets, model.valid_sets, strict=False):
        rows[name] = dataset.num_data()
    return rows


def _combine(metric: str, values: list[tuple[float, int]]) -> float:
    total = sum(n for _, n in values) or 1
    if metric in _ROOT_MEAN_SQUARE:
        return math.sqrt(sum(v * v * n for v, n in values) / total)
    return sum(v * n for v, n in values) / total


def _with_value(result: Any, value: float) -> Any:
    fields = getattr(result, "_fields", None)
    if fields is not None:  # lightgbm >= 4.7: an EvalResult
        return type(result)(*(value if f == "metric_value" else getattr(result, f) for f in fields))
    return (result[0], result[1], value, *tuple(result)[3:])
