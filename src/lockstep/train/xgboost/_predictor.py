"""XGBoostPredictor: an xgboost booster and its preprocessor, predicting on batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import xgboost

from lockstep.train._predictor import BoosterPredictor, prediction_frame, select_features
from lockstep.train.xgboost._callback import RayTrainReportCallback

if TYPE_CHECKING:
    import pandas as pd


class XGBoostPredictor(BoosterPredictor):
    """Predicts with an xgboost booster (``model``), after the ``preprocessor`` saved with it.

    Example:
        >>> import numpy as np, pandas as pd, xgboost
        >>> frame = pd.DataFrame({"x": np.arange(10.0), "y": np.arange(10.0) > 4})
        >>> data = xgboost.DMatrix(frame[["x"]], label=frame["y"])
        >>> booster = xgboost.train({"objective": "binary:logistic"}, data, 5)
        >>> predicted = XGBoostPredictor(booster).predict(frame)  # "y" is left out
        >>> (predicted["predictions"] > 0.5).tolist() == frame["y"].tolist()
        True
    """

    _report_callback = RayTrainReportCallback

    def _predict_pandas(
        self,
        data: pd.DataFrame,
        feature_columns: Sequence[str] | None = None,
        dmatrix_kwargs: dict[str, Any] | None = None,
        **predict_kwargs: Any,
    ) -> pd.DataFrame:
        names = list(feature_columns or self.model.feature_names or [])
        features = select_features(data, names, "booster")
        matrix = xgboost.DMatrix(features, **(dmatrix_kwargs or {}))
        return prediction_frame(self.model.predict(matrix, **predict_kwargs), data.index)
