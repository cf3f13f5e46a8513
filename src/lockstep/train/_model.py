"""Model: what ``Checkpoint.load_model()`` returns, a trained model ready to predict."""

from __future__ import annotations

import os
from typing import Any

from lockstep._core.checkpoint import Checkpoint, register_model_loader
from lockstep.train._predictor import BatchPredictor, Predictor

# The file each framework's checkpoints hold, and where its predictor lives.
_PREDICTORS = (
    ("model.ubj", "lockstep.train.xgboost", "XGBoostPredictor"),
    ("model.json", "lockstep.train.xgboost", "XGBoostPredictor"),
    ("model.txt", "lockstep.train.lightgbm", "LightGBMPredictor"),
    ("model.pkl", "lockstep.train.sklearn", "SklearnPredictor"),
    ("model.pt", "lockstep.train.torch._checkpoint", "MatrixTorchPredictor"),
)


class Model:
    """A trained model from a checkpoint, with the preprocessor saved beside it.

    ``predict`` applies the preprocessor (the training transform), then the model. On a
    ``lockstep.data.Dataset`` it returns a Dataset of predictions (lazily, block by
    block); on a pandas DataFrame or a dict of arrays, predictions of the same kind.

    Args:
        checkpoint: The checkpoint holding the model.
        predictor_cls: The framework's Predictor class.

    Example:
        >>> import shutil, numpy as np, xgboost
        >>> import lockstep.data as ld
        >>> from lockstep.train.xgboost import XGBoostCheckpoint
        >>> x = np.arange(20.0)
        >>> booster = xgboost.train({}, xgboost.DMatrix(x[:, None], label=2 * x), 50)
        >>> checkpoint = XGBoostCheckpoint.from_model(booster)
        >>> model = checkpoint.load_model()
        >>> model.predict(ld.from_items([{"x": 3.0}])).to_pandas()["predictions"].round()
        0    6.0
        Name: predictions, dtype: float32
        >>> shutil.rmtree(checkpoint.path)
    """

    def __init__(self, checkpoint: Checkpoint, predictor_cls: type[Predictor]) -> None:
        self.checkpoint = checkpoint
        self.predictor_cls = predictor_cls
        self._predictor: Predictor | None = None

    @property
    def predictor(self) -> Predictor:
        """The predictor of one batch, loaded on first use."""
        if self._predictor is None:
            self._predictor = self.predictor_cls.from_checkpoint(self.checkpoint)
        return self._predictor

    def get_preprocessor(self) -> Any:
        """The preprocessor saved with the model, or None."""
        return self.checkpoint.get_preprocessor()

    def predict(self, data: Any, **kwargs: Any) -> Any:
        """Predictions for ``data`` (a Dataset, a DataFrame or a dict of arrays)."""
        from lockstep.data import Dataset

        if isinstance(data, Dataset):
            return BatchPredictor(self.checkpoint, self.predictor_cls).predict(data, **kwargs)
        return self.predictor.predict(data, **kwargs)

    def __repr__(self) -> str:
        return f"Model({self.checkpoint!r}, {self.predictor_cls.__name__})"


def load_model(checkpoint: Checkpoint) -> Model | None:
    """The Model of a checkpoint written by a lockstep trainer or framework checkpoint."""
    import importlib

    with checkpoint.as_directory() as local:
        names = set(os.listdir(local))
    for filename, module, predictor in _PREDICTORS:
        if filename in names:
            return Model(checkpoint, getattr(importlib.import_module(module), predictor))
    return None


register_model_loader(load_model)
