"""XGBoostCheckpoint: Ray AIR's checkpoint of an XGBoost booster."""

from __future__ import annotations

from lockstep.train._framework_checkpoint import BoosterCheckpoint
from lockstep.train.xgboost._callback import RayTrainReportCallback


class XGBoostCheckpoint(BoosterCheckpoint):
    """A checkpoint holding an XGBoost booster (``model.ubj``) and its preprocessor.

    Example:
        >>> import shutil, numpy as np, xgboost
        >>> booster = xgboost.train({}, xgboost.DMatrix(np.eye(2), label=[0, 1]), 3)
        >>> checkpoint = XGBoostCheckpoint.from_model(booster)
        >>> checkpoint.get_model().num_boosted_rounds()
        3
        >>> shutil.rmtree(checkpoint.path)
    """

    MODEL_FILENAME = RayTrainReportCallback.CHECKPOINT_NAME
    _report_callback = RayTrainReportCallback
