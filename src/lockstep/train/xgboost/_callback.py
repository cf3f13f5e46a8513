"""The xgboost callback that reports each round's metrics and checkpoints the booster."""

from __future__ import annotations

from typing import Any

import xgboost

from lockstep.train._gbdt import GBDTReportCallback


class RayTrainReportCallback(GBDTReportCallback, xgboost.callback.TrainingCallback):
    """Reports every round's evaluation metrics, and checkpoints the booster.

    Pass it to ``xgboost.train(..., callbacks=[RayTrainReportCallback()])`` in a training
    function. Each round every worker reports the same metrics (xgboost computes them over
    every worker's data), flattened as ``"<eval set>-<metric>"``: ``"train-logloss"``,
    ``"valid-error"``. Rank 0 attaches the booster as ``filename`` every ``frequency``
    rounds and after the last one.

    Args:
        metrics: Which metrics to report: a name, a list of names, or a dict of reported
            name to metric name. None reports all.
        filename: The booster's file name in the checkpoint (``.ubj`` or ``.json``).
        frequency: Checkpoint every this many rounds (counted in the booster, so a resumed
            run keeps the cadence); 0 only at the end.
        checkpoint_at_end: Checkpoint after training unless the last round already was.
        results_postprocessing_fn: A function of the metrics dict returning the dict to
            report.

    Example:
        >>> import tempfile, numpy as np, xgboost
        >>> from lockstep.train import RunConfig
        >>> from lockstep.train.xgboost import XGBoostTrainer
        >>> def train_func():
        ...     x = np.arange(20.0).reshape(10, 2)
        ...     data = xgboost.DMatrix(x, label=x[:, 0] > 8)
        ...     xgboost.train({"objective": "binary:logistic"}, data, num_boost_round=3,
        ...                   evals=[(data, "train")], verbose_eval=False,
        ...                   callbacks=[RayTrainReportCallback(metrics="train-logloss")])
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     result = XGBoostTrainer(
        ...         train_func, run_config=RunConfig(storage_path=storage, verbose=0)).fit()
        ...     booster = RayTrainReportCallback.get_model(result.checkpoint)
        >>> sorted(result.metrics), booster.num_boosted_rounds()
        (['train-logloss'], 3)
    """

    CHECKPOINT_NAME = "model.ubj"
    # The classic trainer knows the last round, so its final checkpoint goes with that
    # round's report instead of a report of its own after training.
    _final_round: int | None = None

    @classmethod
    def _load_booster(cls, path: str) -> xgboost.Booster:
        booster = xgboost.Booster()
        booster.load_model(path)
        return booster

    def after_iteration(self, model: Any, epoch: int, evals_log: dict[str, Any]) -> bool:
        """Report this round's metrics, with the booster when a checkpoint is due."""
        metrics = self._select(flatten(evals_log))
        rounds = model.num_boosted_rounds()
        final = rounds == self._final_round and self._checkpoint_at_end
        save = model.save_model if self._due(rounds) or final else None
        self._report(metrics, rounds, save)
        return False

    def after_training(self, model: Any) -> Any:
        """Checkpoint the final booster unless the last round already did."""
        rounds = model.num_boosted_rounds()
        if self._checkpoint_at_end and self._checkpointed_rounds != rounds:
            self._report(self._last_metrics, rounds, model.save_model)
        return model


def flatten(evals_log: dict[str, Any]) -> dict[str, float]:
    """``{"train": {"logloss": [...]}}`` as ``{"train-logloss": last value}``."""
    flat = {}
    for data, metrics in evals_log.items():
        for name, values in metrics.items():
            last = values[-1]
            flat[f"{data}-{name}"] = float(last[0] if isinstance(last, tuple) else last)
    return flat
