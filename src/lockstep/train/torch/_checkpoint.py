"""TorchCheckpoint: Ray AIR's checkpoint of a torch model, and a predictor for it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._framework_checkpoint import save_model
from lockstep.train._predictor import Predictor, prediction_frame, select_features

if TYPE_CHECKING:
    import pandas as pd

MODEL_FILENAME = "model.pt"


class TorchCheckpoint(Checkpoint):
    """A checkpoint holding a torch model or its state dict (``model.pt``).

    Example:
        >>> import shutil, torch
        >>> checkpoint = TorchCheckpoint.from_state_dict(torch.nn.Linear(2, 1).state_dict())
        >>> model = checkpoint.get_model(torch.nn.Linear(2, 1))
        >>> type(model).__name__
        'Linear'
        >>> shutil.rmtree(checkpoint.path)
    """

    MODEL_FILENAME = MODEL_FILENAME

    @classmethod
    def from_model(
        cls, model: torch.nn.Module, *, preprocessor: Any = None, path: str | None = None
    ) -> TorchCheckpoint:
        """A checkpoint of the whole ``model`` (unwrapped from DDP) in ``path``, by
        default a new temporary directory the caller owns."""
        model = getattr(model, "module", model)
        return save_model(cls, lambda f: torch.save(model, f), MODEL_FILENAME, preprocessor, path)

    @classmethod
    def from_state_dict(
        cls, state_dict: dict[str, Any], *, preprocessor: Any = None, path: str | None = None
    ) -> TorchCheckpoint:
        """A checkpoint of a model's ``state_dict``; :meth:`get_model` needs the model."""
        return save_model(
            cls, lambda f: torch.save(state_dict, f), MODEL_FILENAME, preprocessor, path
        )

    def get_model(self, model: torch.nn.Module | None = None) -> torch.nn.Module:
        """The saved model; with ``model``, the saved weights loaded into it.

        Raises:
            ValueError: The checkpoint holds a state dict and no ``model`` was given.
        """
        with self.as_directory() as d:
            saved = torch.load(
                os.path.join(d, MODEL_FILENAME), map_location="cpu", weights_only=False
            )
        if isinstance(saved, torch.nn.Module):
            if model is None:
                return saved
            saved = saved.state_dict()
        if model is None:
            raise ValueError(
                "this TorchCheckpoint holds a state dict, not a model. HINT: pass the "
                "model to load it into: checkpoint.get_model(MyModel())"
            )
        model.load_state_dict(saved)
        return model


class TorchPredictor(Predictor):
    """Predicts with a torch model on float features, after the saved preprocessor."""

    def __init__(self, model: torch.nn.Module, preprocessor: Any = None) -> None:
        super().__init__(preprocessor)
        self.model = model.eval()

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, model: torch.nn.Module | None = None
    ) -> TorchPredictor:
        loaded = TorchCheckpoint(checkpoint.path, checkpoint.filesystem).get_model(model)
        return cls(loaded, preprocessor=checkpoint.get_preprocessor())

    def _predict_pandas(
        self, data: pd.DataFrame, feature_columns: Sequence[str] | None = None, **kwargs: Any
    ) -> pd.DataFrame:
        features = select_features(data, feature_columns, "model")
        with torch.no_grad():
            out = self.model(torch.tensor(features.to_numpy(dtype="float32")))
        values = out.numpy()
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        return prediction_frame(values, data.index)
