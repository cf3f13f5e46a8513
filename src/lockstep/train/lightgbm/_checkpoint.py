"""LightGBMCheckpoint: Ray AIR's checkpoint of a LightGBM booster."""

from __future__ import annotations

from lockstep.train._framework_checkpoint import BoosterCheckpoint
from lockstep.train.lightgbm._callback import RayTrainReportCallback


class LightGBMCheckpoint(BoosterCheckpoint):
    """A checkpoint holding a LightGBM booster (``model.txt``) and its preprocessor.

    Example:
        >>> import shutil, numpy as np, lightgbm
        >>> data = lightgbm.Dataset(np.arange(40.0)[:, None], label=np.arange(40) % 2)
        >>> booster = lightgbm.train({"verbose": -1, "min_data_in_leaf": 2}, data, 4)
        >>> checkpoint = LightGBMCheckpoint.from_model(booster)
        >>> checkpoint.get_model().current_iteration()
        4
        >>> shutil.rmtree(checkpoint.path)
    """

    MODEL_FILENAME = RayTrainReportCallback.CHECKPOINT_NAME
    _report_callback = RayTrainReportCallback
