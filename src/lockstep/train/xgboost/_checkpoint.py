"""XGBoostCheckpoint: Ray AIR's checkpoint of an XGBoost booster."""

from __future__ import annotations

from typing import Any

import xgboost

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._framework_checkpoint import save_model
from lockstep.train.xgboost._callback import RayTrainReportCallback


class XGBoostCheckpoint(Checkpoint):
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

    @classmethod
    def from_model(
        cls, booster: xgboost.Booster, *, preprocessor: Any = None, path: str | None = None
    ) -> XGBoostCheckpoint:
        """A checkpoint of ``booster`` in ``path`` (by default a new temporary directory,
        which the caller owns)."""
        return save_model(cls, booster.save_model, cls.MODEL_FILENAME, preprocessor, path)

    def get_model(self) -> xgboost.Booster:
        """The booster saved in this checkpoint."""
        return RayTrainReportCallback.get_model(self, self.MODEL_FILENAME)
