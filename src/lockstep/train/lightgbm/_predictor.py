"""LightGBMPredictor: a LightGBM booster and its preprocessor, predicting on batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockstep.train._predictor import BoosterPredictor
from lockstep.train.lightgbm._callback import RayTrainReportCallback

if TYPE_CHECKING:
    import pandas as pd


class LightGBMPredictor(BoosterPredictor):
    """Predicts with a LightGBM booster (``model``), after the ``preprocessor`` saved with it.

    Example:
        >>> import numpy as np, pandas as pd, lightgbm
        >>> frame = pd.DataFrame({"x": np.arange(40.0), "y": np.arange(40) >= 20})
        >>> data = lightgbm.Dataset(frame[["x"]], label=frame["y"])
        >>> params = {"objective": "binary", "min_data_in_leaf": 2, "min_data_in_bin": 1,
        ...           "verbose": -1}
        >>> booster = lightgbm.train(params, data, 5)
        >>> predicted = LightGBMPredictor(booster).predict(frame)  # "y" is left out
        >>> (predicted["predictions"] > 0.5).tolist() == frame["y"].tolist()
        True
    """

    _report_callback = RayTrainReportCallback

    def _feature_names(self, data: pd.DataFrame) -> list[str]:
        """The booster's features as columns of ``data``.

        LightGBM writes spaces in feature names as underscores, so a column "mean radius" was
        feature "mean_radius".
        """
        return _as_columns(list(self.model.feature_name()), data)

    def _predict_features(self, features: pd.DataFrame, **predict_kwargs: Any) -> Any:
        return self.model.predict(features, **predict_kwargs)


def _as_columns(names: list[str], data: pd.DataFrame) -> list[str]:
    """LightGBM's feature ``names`` as the columns of ``data`` they were."""
    if all(n in data.columns for n in names):
        return names
    by_saved_name = {str(c).replace(" ", "_"): c for c in data.columns}
    if all(n in by_saved_name for n in names):
        return [by_saved_name[n] for n in names]
    if len(names) == len(data.columns) and all(n.startswith("Column_") for n in names):
        return list(data.columns)  # trained on unnamed columns (a numpy array)
    return names
