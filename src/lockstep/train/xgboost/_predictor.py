"""XGBoostPredictor: an xgboost booster and its preprocessor, predicting on batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import xgboost

from lockstep.train._predictor import BoosterPredictor
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

    def _feature_names(self, data: pd.DataFrame) -> list[str]:
        return list(self.model.feature_names or [])

    def _predict_features(
        self,
        features: pd.DataFrame,
        dmatrix_kwargs: dict[str, Any] | None = None,
        **predict_kwargs: Any,
    ) -> Any:
        matrix = xgboost.DMatrix(features, **(dmatrix_kwargs or {}))
        return self.model.predict(matrix, **predict_kwargs)
