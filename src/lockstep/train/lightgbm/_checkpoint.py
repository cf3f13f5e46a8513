"""LightGBMCheckpoint: Ray AIR's checkpoint of a LightGBM booster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._framework_checkpoint import save_model
from lockstep.train.lightgbm._callback import RayTrainReportCallback

if TYPE_CHECKING:
    import lightgbm


class LightGBMCheckpoint(Checkpoint):
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

    @classmethod
    def from_model(
        cls, booster: lightgbm.Booster, *, preprocessor: Any = None, path: str | None = None
    ) -> LightGBMCheckpoint:
        """A checkpoint of ``booster`` in ``path`` (by default a new temporary directory,
        which the caller owns)."""
        return save_model(cls, booster.save_model, cls.MODEL_FILENAME, preprocessor, path)

    def get_model(self) -> lightgbm.Booster:
        """The booster saved in this checkpoint."""
        return RayTrainReportCallback.get_model(self, self.MODEL_FILENAME)
