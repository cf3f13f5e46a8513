"""SklearnPredictor: a fitted scikit-learn estimator and its preprocessor, on batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._predictor import NamedFeaturesPredictor
from lockstep.train.sklearn._trainer import SklearnTrainer

if TYPE_CHECKING:
    import pandas as pd


class SklearnPredictor(NamedFeaturesPredictor):
    """Predicts with a fitted scikit-learn estimator, after the preprocessor saved with it.

    Args:
        estimator: The fitted estimator.
        preprocessor: Applied to every batch first.

    Example:
        >>> import pandas as pd
        >>> from sklearn.tree import DecisionTreeClassifier
        >>> frame = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "y": [0, 0, 1, 1]})
        >>> tree = DecisionTreeClassifier().fit(frame[["x"]], frame["y"])
        >>> SklearnPredictor(tree).predict(frame)["predictions"].tolist()  # "y" left out
        [0, 0, 1, 1]
    """

    def __init__(self, estimator: Any, preprocessor: Any = None) -> None:
        super().__init__(preprocessor)
        self.estimator = estimator

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> SklearnPredictor:
        """The estimator saved in ``checkpoint`` by SklearnTrainer, with its preprocessor.

        Example:
            >>> import shutil
            >>> from sklearn.dummy import DummyRegressor
            >>> from lockstep.train.sklearn import SklearnCheckpoint
            >>> fitted = DummyRegressor().fit([[0], [1]], [2, 4])
            >>> checkpoint = SklearnCheckpoint.from_estimator(fitted)  # a new directory
            >>> SklearnPredictor.from_checkpoint(checkpoint).estimator.predict([[9]])
            array([3.])
            >>> shutil.rmtree(checkpoint.path)
        """
        estimator = SklearnTrainer.get_model(checkpoint)
        return cls(estimator, preprocessor=checkpoint.get_preprocessor())

    def _feature_names(self, data: pd.DataFrame) -> list[str]:
        return list(getattr(self.estimator, "feature_names_in_", []))

    def _predict_features(
        self, features: pd.DataFrame, num_estimator_cpus: int | None = None, **predict_kwargs: Any
    ) -> Any:
        if num_estimator_cpus:  # as Ray: every n_jobs parameter of the estimator
            jobs = [k for k in self.estimator.get_params() if k.endswith("n_jobs")]
            self.estimator.set_params(**dict.fromkeys(jobs, num_estimator_cpus))
        return self.estimator.predict(features, **predict_kwargs)
