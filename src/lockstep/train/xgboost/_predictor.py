"""XGBoostPredictor: an xgboost booster and its preprocessor, predicting on batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import xgboost

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._predictor import Predictor, prediction_frame, select_features
from lockstep.train.xgboost._callback import RayTrainReportCallback

if TYPE_CHECKING:
    import pandas as pd


class XGBoostPredictor(Predictor):
    """Predicts with an xgboost booster, after the preprocessor saved with it.

    Args:
        model: The ``xgboost.Booster``.
        preprocessor: Applied to every batch first.

    Example:
        >>> import numpy as np, pandas as pd, xgboost
        >>> frame = pd.DataFrame({"x": np.arange(10.0), "y": np.arange(10.0) > 4})
        >>> data = xgboost.DMatrix(frame[["x"]], label=frame["y"])
        >>> booster = xgboost.train({"objective": "binary:logistic"}, data, 5)
        >>> predicted = XGBoostPredictor(booster).predict(frame)  # "y" is left out
        >>> (predicted["predictions"] > 0.5).tolist() == frame["y"].tolist()
        True
    """

    def __init__(self, model: Any, preprocessor: Any = None) -> None:
        super().__init__(preprocessor)
        self.model = model

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, filename: str = RayTrainReportCallback.CHECKPOINT_NAME
    ) -> XGBoostPredictor:
        """The booster saved in ``checkpoint`` (as ``filename``), with its preprocessor.

        Example:
            >>> import os, tempfile, numpy as np, xgboost
            >>> booster = xgboost.train({}, xgboost.DMatrix(np.eye(2), label=[0, 1]), 3)
            >>> with tempfile.TemporaryDirectory() as d:
            ...     booster.save_model(os.path.join(d, "model.ubj"))
            ...     XGBoostPredictor.from_checkpoint(Checkpoint(d)).model.num_boosted_rounds()
            3
        """
        model = RayTrainReportCallback.get_model(checkpoint, filename)
        return cls(model, preprocessor=checkpoint.get_preprocessor())

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
