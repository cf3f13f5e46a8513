"""Predictor and BatchPredictor: a trained model, loaded from a checkpoint, used to predict.

A :class:`Predictor` holds a model and the preprocessor the trainer saved with it, and
predicts on one batch: the preprocessor's ``transform_batch`` first (exactly the training
transform), then the model. :class:`BatchPredictor` predicts on a whole
``lockstep.data.Dataset``: a lazy ``map_batches`` over its blocks, with the predictor loaded
once in each process that reads them. As Ray AIR had them (Ray 2.0 to 2.6).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from lockstep._core.checkpoint import Checkpoint

if TYPE_CHECKING:
    import pandas as pd

PREDICTIONS = "predictions"
P = TypeVar("P", bound="BoosterPredictor")


class PredictorNotSerializableException(RuntimeError):
    """A Predictor instance was pickled (sent to another process, say), as Ray forbids."""


class Predictor(abc.ABC):
    """A model that predicts on batches, applying its preprocessor first.

    Subclasses load their model in :meth:`from_checkpoint` and predict on a pandas
    DataFrame of features in :meth:`_predict_pandas`.

    Args:
        preprocessor: Applied to every batch before the model (``transform_batch``).

    Example:
        >>> import pandas as pd
        >>> class Doubler(Predictor):
        ...     @classmethod
        ...     def from_checkpoint(cls, checkpoint):
        ...         return cls(preprocessor=checkpoint.get_preprocessor())
        ...     def _predict_pandas(self, data, **kwargs):
        ...         return pd.DataFrame({"predictions": data["x"] * 2})
        >>> Doubler().predict(pd.DataFrame({"x": [1, 2]}))["predictions"].tolist()
        [2, 4]
    """

    def __init__(self, preprocessor: Any = None) -> None:
        self._preprocessor = preprocessor

    @classmethod
    @abc.abstractmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> Predictor:
        """The predictor of the model in ``checkpoint``, with its saved preprocessor.

        Subclasses may take more (optional) arguments, such as the model's file name.
        """

    def get_preprocessor(self) -> Any:
        """The preprocessor applied before the model, or None.

        Example:
            >>> from lockstep.train.xgboost import XGBoostPredictor
            >>> XGBoostPredictor(model=None).get_preprocessor() is None
            True
        """
        return self._preprocessor

    def set_preprocessor(self, preprocessor: Any) -> None:
        """Replace the preprocessor applied before the model.

        Example:
            >>> from lockstep.data.preprocessors import Normalizer
            >>> from lockstep.train.xgboost import XGBoostPredictor
            >>> predictor = XGBoostPredictor(model=None)
            >>> predictor.set_preprocessor(Normalizer(["x"]))
            >>> type(predictor.get_preprocessor()).__name__
            'Normalizer'
        """
        self._preprocessor = preprocessor

    def predict(self, data: Any, **kwargs: Any) -> Any:
        """Predictions for ``data``: a pandas DataFrame, a ``pyarrow.Table``, a numpy array
        or a dict of numpy arrays. A DataFrame or Table comes back with a ``"predictions"``
        column (``"predictions_0"``, ... for several outputs per row); numpy input comes back
        as numpy, as in Ray: one array for one output column, else a dict of arrays.

        Keyword arguments go to the framework's predict (``feature_columns`` selects the
        model's inputs).

        Example:
            >>> import numpy as np, xgboost
            >>> from lockstep.train.xgboost import XGBoostPredictor
            >>> x = np.arange(20.0).reshape(10, 2)
            >>> booster = xgboost.train({}, xgboost.DMatrix(x, label=x[:, 0]), 10)
            >>> XGBoostPredictor(booster).predict({"a": x[:, 0], "b": x[:, 1]}).shape
            (10,)
        """
        frame = _as_pandas(data)
        if self._preprocessor is not None:
            frame = self._preprocessor.transform_batch(frame)
        return _like(self._predict_pandas(_unwrapped(frame), **kwargs), data)

    @abc.abstractmethod
    def _predict_pandas(self, data: pd.DataFrame, **kwargs: Any) -> pd.DataFrame:
        """Predictions (a DataFrame) for the preprocessed features ``data``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(preprocessor={self._preprocessor!r})"

    def __reduce__(self) -> Any:
        raise PredictorNotSerializableException(
            f"a {type(self).__name__} cannot be pickled (it holds a loaded model). HINT: send "
            f"the checkpoint and call {type(self).__name__}.from_checkpoint(checkpoint) where "
            "it is used, or use BatchPredictor, which loads it once per process"
        )


class NamedFeaturesPredictor(Predictor):
    """A predictor whose model knows the columns it was trained on: each batch is narrowed
    to them (or to ``feature_columns``, when given) before the model predicts."""

    #: What the model is called in the error about missing columns.
    _model_kind: ClassVar[str] = "model"

    def _predict_pandas(
        self,
        data: pd.DataFrame,
        feature_columns: Sequence[str] | None = None,
        **predict_kwargs: Any,
    ) -> pd.DataFrame:
        names = list(feature_columns or self._feature_names(data))
        features = select_features(data, names, self._model_kind)
        return prediction_frame(self._predict_features(features, **predict_kwargs), data.index)

    @abc.abstractmethod
    def _feature_names(self, data: pd.DataFrame) -> list[str]:
        """The model's features, as columns of ``data`` (none when it does not know)."""

    @abc.abstractmethod
    def _predict_features(self, features: pd.DataFrame, **predict_kwargs: Any) -> Any:
        """The model's predictions for the selected ``features``."""


class BoosterPredictor(NamedFeaturesPredictor):
    """What the XGBoost and LightGBM predictors share: a booster read from a checkpoint by
    the framework's report callback (the subclass's ``_report_callback``).

    Args:
        model: The booster.
        preprocessor: Applied to every batch first.
    """

    _report_callback: ClassVar[Any]
    _model_kind = "booster"

    def __init__(self, model: Any, preprocessor: Any = None) -> None:
        super().__init__(preprocessor)
        self.model = model

    @classmethod
    def from_checkpoint(cls: type[P], checkpoint: Checkpoint, filename: str | None = None) -> P:
        """The booster saved in ``checkpoint`` (as ``filename``), with its preprocessor.

        Example:
            >>> import tempfile, numpy as np, xgboost
            >>> from lockstep.train.xgboost import XGBoostCheckpoint, XGBoostPredictor
            >>> booster = xgboost.train({}, xgboost.DMatrix(np.eye(2), label=[0, 1]), 3)
            >>> with tempfile.TemporaryDirectory() as d:
            ...     checkpoint = XGBoostCheckpoint.from_model(booster, path=d)
            ...     XGBoostPredictor.from_checkpoint(checkpoint).model.num_boosted_rounds()
            3
        """
        model = cls._report_callback.get_model(checkpoint, filename)
        return cls(model, preprocessor=checkpoint.get_preprocessor())


class BatchPredictor:
    """Predicts on a whole Dataset with the model of a checkpoint.

    The result is a lazy Dataset: its blocks are predicted where they are read, each
    process loading the model once, and the framework predicting each block with its own
    threads.

    Args:
        checkpoint: The checkpoint of the model (and its preprocessor).
        predictor_cls: The framework's Predictor, e.g. ``XGBoostPredictor``.
        **predictor_kwargs: Passed to ``predictor_cls.from_checkpoint``.

    Example:
        >>> import os, tempfile, numpy as np, xgboost
        >>> import lockstep.data as ld
        >>> from lockstep.train.xgboost import XGBoostPredictor
        >>> x = np.arange(20.0)
        >>> booster = xgboost.train({}, xgboost.DMatrix(x[:, None], label=2 * x), 50)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     booster.save_model(os.path.join(d, "model.ubj"))
        ...     batch_predictor = BatchPredictor.from_checkpoint(Checkpoint(d), XGBoostPredictor)
        ...     predicted = batch_predictor.predict(ld.from_items([{"x": 3.0}, {"x": 7.0}]))
        ...     print(predicted.to_pandas()["predictions"].round().tolist())
        [6.0, 14.0]
    """

    def __init__(
        self, checkpoint: Checkpoint, predictor_cls: type[Predictor], **predictor_kwargs: Any
    ) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise ValueError(
                f"BatchPredictor takes a Checkpoint, got {type(checkpoint).__name__}. "
                "HINT: BatchPredictor.from_checkpoint(result.checkpoint, XGBoostPredictor)"
            )
        if not (isinstance(predictor_cls, type) and issubclass(predictor_cls, Predictor)):
            raise ValueError(
                f"predictor_cls must be a Predictor class, got {predictor_cls!r}. "
                "HINT: from lockstep.train.xgboost import XGBoostPredictor"
            )
        self.checkpoint = checkpoint
        self.predictor_cls = predictor_cls
        self.predictor_kwargs = predictor_kwargs

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, predictor_cls: type[Predictor], **predictor_kwargs: Any
    ) -> BatchPredictor:
        """A BatchPredictor of the model in ``checkpoint``.

        Example:
            >>> from lockstep.train.xgboost import XGBoostPredictor
            >>> bp = BatchPredictor.from_checkpoint(Checkpoint("/tmp"), XGBoostPredictor)
            >>> bp.predictor_cls.__name__
            'XGBoostPredictor'
        """
        return cls(checkpoint, predictor_cls, **predictor_kwargs)

    def get_preprocessor(self) -> Any:
        """The preprocessor saved in the checkpoint, applied before the model, or None.

        Example:
            >>> import tempfile
            >>> from lockstep.train.xgboost import XGBoostPredictor
            >>> with tempfile.TemporaryDirectory() as d:
            ...     BatchPredictor(Checkpoint(d), XGBoostPredictor).get_preprocessor()
        """
        return self.checkpoint.get_preprocessor()

    def predict(
        self,
        data: Any,
        *,
        feature_columns: Sequence[str] | None = None,
        keep_columns: Sequence[str] | None = None,
        batch_size: int | None = 4096,
        min_scoring_workers: int = 1,
        max_scoring_workers: int | None = None,
        num_cpus_per_worker: float | None = None,
        num_gpus_per_worker: float | None = None,
        separate_gpu_stage: bool = True,
        ray_remote_args: dict[str, Any] | None = None,
        **predict_kwargs: Any,
    ) -> Any:
        """A Dataset of predictions for the rows of ``data``, one row per input row.

        Args:
            data: A ``lockstep.data.Dataset``.
            feature_columns: The columns to predict from (before the preprocessor);
                all by default.
            keep_columns: Columns of ``data`` to copy next to the predictions.
            batch_size: Rows per prediction call; None for whole blocks.
            min_scoring_workers, max_scoring_workers, num_cpus_per_worker,
                separate_gpu_stage, ray_remote_args: Ray's sizing of its scoring actors,
                accepted: blocks are predicted where they are read.
            num_gpus_per_worker: More than 0 loads the predictor with ``use_gpu=True``,
                as Ray does.
            **predict_kwargs: Passed to the predictor's ``predict``.

        Example:
            >>> import os, tempfile, numpy as np, xgboost
            >>> import lockstep.data as ld
            >>> from lockstep.train.xgboost import XGBoostPredictor
            >>> booster = xgboost.train({}, xgboost.DMatrix(np.eye(2), label=[0, 1]), 2)
            >>> rows = ld.from_items([{"id": 7, "a": 1.0, "b": 0.0}])
            >>> with tempfile.TemporaryDirectory() as d:
            ...     booster.save_model(os.path.join(d, "model.ubj"))
            ...     out = BatchPredictor(Checkpoint(d), XGBoostPredictor).predict(
            ...         rows, feature_columns=["a", "b"], keep_columns=["id"])
            ...     print(out.columns())
            ['predictions', 'id']
        """
        from lockstep.data import Dataset

        if not isinstance(data, Dataset):
            raise ValueError(
                f"BatchPredictor.predict takes a lockstep.data Dataset, got "
                f"{type(data).__name__}. HINT: lockstep.data.from_pandas(df), or call "
                "Predictor.predict(batch) for one batch"
            )
        predictor_kwargs = dict(self.predictor_kwargs)
        if num_gpus_per_worker:
            predictor_kwargs.setdefault("use_gpu", True)
        # a callable class: map_batches builds it once per process, loading the model once
        predict_blocks: Any = _PredictBlocks
        return data.map_batches(
            predict_blocks,
            batch_format="pandas",
            batch_size=batch_size,
            fn_constructor_args=(self.checkpoint, self.predictor_cls, predictor_kwargs),
            fn_kwargs={
                "feature_columns": feature_columns,
                "keep_columns": keep_columns,
                "predict_kwargs": predict_kwargs,
            },
        )

    def __repr__(self) -> str:
        return f"BatchPredictor({self.checkpoint!r}, {self.predictor_cls.__name__})"


class _PredictBlocks:
    """``map_batches``'s callable class: the predictor, loaded once per process."""

    def __init__(
        self, checkpoint: Checkpoint, predictor_cls: type[Predictor], kwargs: dict[str, Any]
    ) -> None:
        self.predictor = predictor_cls.from_checkpoint(checkpoint, **kwargs)

    def __call__(
        self,
        batch: pd.DataFrame,
        *,
        feature_columns: Sequence[str] | None,
        keep_columns: Sequence[str] | None,
        predict_kwargs: dict[str, Any],
    ) -> pd.DataFrame:
        features = batch[list(feature_columns)] if feature_columns else batch
        predictions: pd.DataFrame = self.predictor.predict(features, **predict_kwargs)
        if len(predictions) != len(batch):  # a model may predict once per batch, say
            if keep_columns:
                raise ValueError(
                    f"keep_columns needs a prediction per row, but the model gave "
                    f"{len(predictions)} for {len(batch)} rows. HINT: leave keep_columns out"
                )
            return predictions.reset_index(drop=True)
        predictions.index = batch.index
        for column in keep_columns or ():
            predictions[column] = batch[column]
        return predictions


def prediction_frame(values: Any, index: Any = None) -> pd.DataFrame:
    """Model outputs as a DataFrame: ``"predictions"``, or ``"predictions_<i>"`` for
    several outputs per row."""
    import numpy as np
    import pandas as pd

    array = np.asarray(values)
    if array.ndim <= 1:
        return pd.DataFrame({PREDICTIONS: array}, index=index)
    flat = array.reshape(len(array), -1)
    return pd.DataFrame(
        {f"{PREDICTIONS}_{i}": flat[:, i] for i in range(flat.shape[1])}, index=index
    )


def select_features(data: pd.DataFrame, names: Sequence[str] | None, model: str) -> pd.DataFrame:
    """The columns of ``data`` a model was trained on, in its order; ``data`` when unknown.

    A batch may carry more columns than the model's features (the label, an id): those
    are left out.
    """
    if not names:
        return data
    missing = [n for n in names if n not in data.columns]
    if missing:
        raise ValueError(
            f"the {model} was trained on columns {missing} that the batch lacks (it has "
            f"{list(data.columns)}). HINT: predict on data with the training columns; the "
            "preprocessor saved with the checkpoint is applied first"
        )
    return data[list(names)]


def _as_pandas(data: Any) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, dict):
        return pd.DataFrame(data)
    if isinstance(data, np.ndarray):
        return _positional_frame(data)
    if type(data).__name__ == "Table":
        from lockstep.data._convert import to_pandas

        frame: pd.DataFrame = to_pandas(data)
        return frame
    raise ValueError(
        f"predict takes a pandas DataFrame, a numpy array, a dict of numpy arrays or a "
        f"pyarrow Table, got {type(data).__name__}. HINT: pd.DataFrame(rows)"
    )


def _unwrapped(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame whose one column holds a 1-D array per row (``from_numpy`` of a 2-D array)
    as the array itself, a column per feature, as Ray reads such a tensor column."""
    import numpy as np

    if len(frame.columns) != 1 or frame.empty or frame.dtypes.iloc[0].kind != "O":
        return frame
    rows = frame.iloc[:, 0].to_list()
    if not all(isinstance(r, np.ndarray) and r.ndim == 1 for r in rows):
        return frame
    if len({len(r) for r in rows}) != 1:
        return frame
    return _positional_frame(np.stack(rows)).set_axis(frame.index)


def _positional_frame(array: Any) -> pd.DataFrame:
    """A numpy batch as a frame whose columns are the array's column numbers, as Ray reads
    one: a 2-D array has a column per feature (``feature_columns=[0, 2]`` picks two), a
    1-D array is one feature, and rows of higher rank stay whole in one column."""
    import pandas as pd

    if array.ndim == 2:
        return pd.DataFrame(array)
    if array.ndim <= 1:
        return pd.DataFrame({0: array})
    return pd.DataFrame({0: list(array)})


def _like(predictions: pd.DataFrame, data: Any) -> Any:
    """``predictions`` in the kind of batch ``data`` was: numpy input (an array or a dict of
    arrays) gives one array for one output column and a dict for several, as in Ray."""
    import numpy as np

    if isinstance(data, dict | np.ndarray):
        if len(predictions.columns) == 1:
            return predictions.iloc[:, 0].to_numpy()
        return {name: predictions[name].to_numpy() for name in predictions.columns}
    if type(data).__name__ == "Table":
        import pyarrow as pa

        return pa.Table.from_pandas(predictions, preserve_index=False)
    return predictions
