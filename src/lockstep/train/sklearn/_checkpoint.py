"""SklearnCheckpoint: Ray AIR's checkpoint of a fitted scikit-learn estimator."""

from __future__ import annotations

from typing import Any

from lockstep.train._framework_checkpoint import FrameworkCheckpoint, save_model
from lockstep.train.sklearn._trainer import MODEL_FILE, SklearnTrainer


class SklearnCheckpoint(FrameworkCheckpoint):
    """A checkpoint holding a fitted estimator (``model.pkl``) and its preprocessor.

    Example:
        >>> import shutil
        >>> from sklearn.dummy import DummyRegressor
        >>> checkpoint = SklearnCheckpoint.from_estimator(DummyRegressor().fit([[0]], [5]))
        >>> checkpoint.get_estimator().predict([[1]])
        array([5.])
        >>> shutil.rmtree(checkpoint.path)
    """

    MODEL_FILENAME = MODEL_FILE

    @classmethod
    def from_estimator(
        cls, estimator: Any, *, preprocessor: Any = None, path: str | None = None
    ) -> SklearnCheckpoint:
        """A checkpoint of ``estimator`` in ``path`` (by default a new temporary
        directory, which the caller owns)."""
        import cloudpickle

        def write(file: str) -> None:
            with open(file, "wb") as f:
                cloudpickle.dump(estimator, f)

        return save_model(cls, write, cls.MODEL_FILENAME, preprocessor, path)

    from_model = from_estimator

    def get_estimator(self) -> Any:
        """The estimator saved in this checkpoint."""
        return SklearnTrainer.get_model(self)

    get_model = get_estimator
