"""TorchCheckpoint: Ray AIR's checkpoint of a torch model, and a predictor for it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._framework_checkpoint import FrameworkCheckpoint, save_model
from lockstep.train._predictor import Predictor, prediction_frame, select_features

if TYPE_CHECKING:
    import pandas as pd

MODEL_FILENAME = "model.pt"


class TorchCheckpoint(FrameworkCheckpoint):
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
        default a new temporary directory the caller owns.

        The model is pickled with cloudpickle, so a model class defined inside a function
        is saved too (``torch.load`` reads the file as usual).
        """
        import cloudpickle

        model = getattr(model, "module", model)

        def write(f: str) -> None:
            torch.save(model, f, pickle_module=cloudpickle)

        return save_model(cls, write, MODEL_FILENAME, preprocessor, path)

    @classmethod
    def from_state_dict(
        cls, state_dict: dict[str, Any], *, preprocessor: Any = None, path: str | None = None
    ) -> TorchCheckpoint:
        """A checkpoint of a model's ``state_dict``; :meth:`get_model` needs the model.

        The ``module.`` prefix of a DistributedDataParallel model's keys is left out, as in
        Ray, so the weights load into the bare model.
        """
        from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

        state_dict = dict(state_dict)  # the caller's dict stays as it is
        consume_prefix_in_state_dict_if_present(state_dict, "module.")
        return save_model(
            cls, lambda f: torch.save(state_dict, f), MODEL_FILENAME, preprocessor, path
        )

    def get_model(self, model: torch.nn.Module | None = None) -> torch.nn.Module:
        """The saved model; with ``model``, the saved weights loaded into it.

        Raises:
            ValueError: The checkpoint holds a state dict and no ``model`` was given.
        """
        saved = self._saved()
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

    def _saved(self) -> Any:
        """What ``model.pt`` holds, or the ``"model"`` entry of a Ray AIR dict checkpoint."""
        from_dict = self._dict_entry("model")
        if from_dict is not None:
            return from_dict
        with self.as_directory() as d:
            path = os.path.join(d, MODEL_FILENAME)
            return torch.load(path, map_location="cpu", weights_only=False)


class TorchPredictor(Predictor):
    """Predicts with a torch model, after the preprocessor saved with it, as Ray's does.

    What the model is called with: the column itself when the batch has one column (a 1-D
    tensor, or the stacked arrays of a column of arrays), the whole array when a numpy
    array was given, and a dict of tensors by column name otherwise (a model of several
    inputs). ``predict(batch, dtype=...)`` chooses the tensors' dtype; without it,
    floating-point features take the dtype of the model's weights. The model may return
    a tensor or a dict of tensors; a subclass's :meth:`call_model` may also return a
    pandas DataFrame, which is taken as the predictions.

    Args:
        model: The torch model (put in eval mode).
        preprocessor: Applied to every batch first.
        use_gpu: Predict on the first CUDA device.

    Example:
        >>> import numpy as np, torch
        >>> class Double(torch.nn.Module):
        ...     def forward(self, x):
        ...         return x * 2
        >>> TorchPredictor(Double()).predict(np.array([1.0, 2.0])).tolist()
        [2.0, 4.0]
    """

    def __init__(self, model: torch.nn.Module, preprocessor: Any = None, use_gpu: bool = False):
        super().__init__(preprocessor)
        if use_gpu and not torch.cuda.is_available():
            raise ValueError(
                "TorchPredictor(use_gpu=True) found no CUDA device here. HINT: use_gpu=False "
                "predicts on the CPU"
            )
        self.use_gpu = use_gpu
        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.model = model.to(self.device).eval()

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, model: torch.nn.Module | None = None, use_gpu: bool = False
    ) -> TorchPredictor:
        """The model saved in ``checkpoint`` (its weights loaded into ``model`` when the
        checkpoint holds a state dict), with its preprocessor."""
        torch_checkpoint = TorchCheckpoint.from_checkpoint(checkpoint)
        loaded = torch_checkpoint.get_model(model)
        return cls(loaded, preprocessor=checkpoint.get_preprocessor(), use_gpu=use_gpu)

    def _inputs(self, features: pd.DataFrame, dtype: Any) -> Any:
        return _model_inputs(features, dtype, self.device, _float_dtype(self.model))

    def call_model(self, inputs: torch.Tensor | dict[str, torch.Tensor]) -> Any:
        """The model's output for ``inputs``; override to adapt a model's output."""
        return self.model(inputs)

    def _predict_pandas(
        self,
        data: pd.DataFrame,
        dtype: torch.dtype | dict[str, torch.dtype] | None = None,
        feature_columns: Sequence[str] | None = None,
        **unknown: Any,
    ) -> pd.DataFrame:
        if unknown:
            raise TypeError(
                f"TorchPredictor.predict got unexpected arguments {sorted(unknown)}. HINT: it "
                "takes dtype= and feature_columns="
            )
        features = select_features(data, feature_columns, "model")
        with torch.no_grad():
            output = self.call_model(self._inputs(features, dtype))
        return _output_frame(output, data.index)


class MatrixTorchPredictor(TorchPredictor):
    """A TorchPredictor that calls the model with the features as one 2-D tensor, a row
    per example and a column per feature: the model of ``Checkpoint.load_model()``, as the
    material uses it (``model.predict(frame)`` of a model taking a feature matrix)."""

    def _inputs(self, features: pd.DataFrame, dtype: Any) -> Any:
        import numpy as np

        matrix = np.array(features.to_numpy(dtype="float64" if dtype is None else None))
        dtype = dtype if dtype is not None else _float_dtype(self.model) or torch.float32
        return torch.tensor(matrix, dtype=dtype, device=self.device)


def _float_dtype(model: torch.nn.Module) -> torch.dtype | None:
    """The dtype of the model's floating-point weights, or None when it has none."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), None)


def _model_inputs(
    features: pd.DataFrame, dtype: Any, device: torch.device, float_dtype: torch.dtype | None
) -> torch.Tensor | dict[str, torch.Tensor]:
    """What the model is called with (see :class:`TorchPredictor`). Without ``dtype``,
    floating-point features take the model's weights' dtype (a float64 frame for a float32
    model), the others keep theirs."""
    import numpy as np

    def tensor(values: Any, name: Any) -> torch.Tensor:
        column_dtype = dtype.get(name) if isinstance(dtype, dict) else dtype
        # a copy: pandas hands out read-only arrays, which torch will not wrap
        array = np.array(values)
        if column_dtype is None and array.dtype.kind == "f":
            column_dtype = float_dtype
        return torch.tensor(array, dtype=column_dtype, device=device)

    columns = list(features.columns)
    if len(columns) == 1:
        return tensor(_column_array(features[columns[0]]), columns[0])
    if all(isinstance(c, int) for c in columns):  # a numpy array's columns: kept whole
        return tensor(features.to_numpy(), None)
    return {str(c): tensor(_column_array(features[c]), c) for c in columns}


def _column_array(column: pd.Series) -> Any:
    """A column as one array: a column of arrays (an image per row, say) is stacked."""
    import numpy as np

    if column.dtype == object and len(column) and isinstance(column.iloc[0], np.ndarray):
        return np.stack(column.to_list())
    return column.to_numpy()


def _output_frame(output: Any, index: Any) -> pd.DataFrame:
    """The model's output as the predictions frame (``index`` kept when the lengths agree)."""
    import pandas as pd

    if isinstance(output, pd.DataFrame):
        return output
    if isinstance(output, torch.Tensor):
        values = output.cpu().numpy()
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        return prediction_frame(values, index if len(values) == len(index) else None)
    if isinstance(output, dict) and all(isinstance(v, torch.Tensor) for v in output.values()):
        arrays = {k: v.cpu().numpy() for k, v in output.items()}
        columns = {k: list(a) if a.ndim > 1 else a for k, a in arrays.items()}
        lengths = {len(a) for a in arrays.values()}
        return pd.DataFrame(columns, index=index if lengths == {len(index)} else None)
    raise ValueError(
        f"the model returned {type(output).__name__}; TorchPredictor takes a torch.Tensor, a "
        "dict of torch.Tensor, or a pandas.DataFrame as fallthrough. HINT: subclass "
        "TorchPredictor and override call_model() to return one of them"
    )
