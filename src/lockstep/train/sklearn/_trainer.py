"""SklearnTrainer: a scikit-learn estimator fitted in one worker, scored and checkpointed."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import cloudpickle
import numpy as np

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import ScalingConfig
from lockstep._core.errors import UsageKeyError
from lockstep.train._gbdt import TRAIN, columns_of, load_model_file, shard_frame, worker_threads
from lockstep.train._session import report
from lockstep.train._trainer import DataParallelTrainer, TrainerSpec, WorkerSetup

MODEL_FILE = "model.pkl"
CV = "cv"  # the key of the cross-validation results in the metrics
AIR_MODEL_FILE = "model"  # Ray AIR's SklearnCheckpoint (Ray 2.0 to 2.6) named it so
_SCORING_TYPES = (str, list, tuple, dict)


@dataclass(frozen=True, kw_only=True)
class SklearnTrainerSpec(TrainerSpec):
    """SklearnTrainer's arguments: the estimator's, and DataParallelTrainer's that apply
    to one worker fitting it (no training function, backend or checkpoint to resume)."""

    estimator: Any
    label_column: str | None = None
    params: Mapping[str, Any] | None = None
    scoring: Any = None
    cv: Any = None
    return_train_score_cv: bool = False
    parallelize_cv: bool | None = None
    set_estimator_cpus: bool = True
    fit_params: Mapping[str, Any] = field(default_factory=dict)

    not_taken: ClassVar[tuple[str, ...]] = (
        "train_loop_per_worker",
        "train_loop_config",
        "backend_config",
        "resume_from_checkpoint",
    )
    extra: ClassVar[str | None] = "fit_params"
    function_required: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.loop_config()
        scaling = _one_worker(ScalingConfig.coerce(self.scaling_config))
        _check_parallel_cv(self.parallelize_cv, scaling)
        if self.datasets:
            _check_datasets(self.datasets, self.label_column)

    def loop_config(self) -> dict[str, Any]:
        """The checked arguments, as the training loop receives them."""
        return {
            "estimator": _check_estimator(self.estimator),
            "label_column": _check_label(self.label_column),
            "params": _check_params(self.params),
            "scoring": _check_scoring(self.scoring),
            "cv": _check_cv(self.cv),
            "return_train_score_cv": bool(self.return_train_score_cv),
            "parallelize_cv": self.parallelize_cv,
            "set_estimator_cpus": bool(self.set_estimator_cpus),
            "fit_params": dict(self.fit_params),
        }


class SklearnTrainer(DataParallelTrainer):
    """Fits a scikit-learn estimator on the ``"train"`` dataset, in one worker.

    scikit-learn is not distributed, so the trainer runs one worker (``num_workers=0``
    fits in this process), which reads the whole ``"train"`` dataset. It reports, nested
    as Ray does, ``fit_time``, each dataset's scores under its name
    (``metrics["valid"] == {"score_time": ..., "test_score": ...}``, ``"test_<scorer>"``
    for several scorers; ``"train"`` is scored too), and with ``cv`` scikit-learn's
    cross-validation results on ``"train"`` under ``"cv"`` (``metrics["cv"]["test_score"]``
    is a list with one score per fold, ``"test_score_mean"`` and ``"_std"`` aggregate it),
    with the fitted estimator as ``model.pkl`` in the checkpoint.

    Args:
        estimator: An unfitted scikit-learn estimator (it is cloned, never changed).
        datasets: Datasets by name; ``"train"`` is fitted on, every one is scored.
        label_column: The column to predict; None for unsupervised estimators.
        params: Estimator parameters to set (``set_params``) before fitting.
        scoring: As scikit-learn takes it: a scorer name, a list of them, a dict of name
            to scorer, a callable, or None for the estimator's ``score``.
        cv: Cross-validate on ``"train"``: a number of folds or a splitter.
        return_train_score_cv: Also report the cross-validation train scores.
        parallelize_cv: Run the folds in parallel over the worker's CPUs (``joblib``)
            instead of giving them to the estimator's ``n_jobs``. None decides by
            whether the estimator has an ``n_jobs`` parameter.
        set_estimator_cpus: Set the estimator's ``n_jobs`` parameters (left at None) to
            the worker's CPUs.
        scaling_config: Resources of the worker (``resources_per_worker={"CPU": 4}``).
        run_config: Name, storage, failure handling, callbacks.
        dataset_config: Which datasets are split (irrelevant with one worker).
        preprocessor: Fitted on ``"train"``, applied to every dataset, saved in the
            checkpoint (and applied again by ``SklearnPredictor``).
        metadata: JSON data available as ``get_context().get_metadata()``.
        **fit_params: Extra arguments of ``estimator.fit``.

    Example:
        >>> import tempfile
        >>> import lockstep.data as ld
        >>> from sklearn.linear_model import LogisticRegression
        >>> from lockstep.train import RunConfig
        >>> rows = [{"x": float(i), "y": int(i >= 10)} for i in range(20)]
        >>> rows = rows[::2] + rows[1::2]  # each of the 2 folds has both classes
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     result = SklearnTrainer(
        ...         estimator=LogisticRegression(), datasets={"train": ld.from_items(rows)},
        ...         label_column="y", scoring="accuracy", cv=2,
        ...         run_config=RunConfig(storage_path=storage, verbose=0)).fit()
        ...     model = SklearnTrainer.get_model(result.checkpoint)
        >>> result.metrics["train"]["test_score"], result.metrics["cv"]["test_score_mean"]
        (1.0, 1.0)
        >>> type(model).__name__
        'LogisticRegression'
    """

    Spec = SklearnTrainerSpec

    def __init__(self, **arguments: Any) -> None:
        super().__init__(**arguments)

    @classmethod
    def get_model(cls, checkpoint: Checkpoint) -> Any:
        """The fitted estimator saved in ``checkpoint``.

        Example:
            >>> import tempfile
            >>> from sklearn.dummy import DummyClassifier
            >>> from lockstep.train.sklearn import SklearnCheckpoint
            >>> estimator = DummyClassifier().fit([[0]], [1])
            >>> with tempfile.TemporaryDirectory() as d:
            ...     checkpoint = SklearnCheckpoint.from_estimator(estimator, path=d)
            ...     SklearnTrainer.get_model(checkpoint).predict([[5]]).tolist()
            [1]
        """

        def load(path: str) -> Any:
            with open(path, "rb") as f:
                return cloudpickle.load(f)

        return load_model_file(checkpoint, MODEL_FILE, load, "estimator", AIR_MODEL_FILE)

    def _worker_setup(self) -> WorkerSetup:
        spec = self._spec
        assert isinstance(spec, SklearnTrainerSpec)
        # The datasets may have been given only now, to fit(): check them, and tell the
        # loop their names and the worker's CPUs.
        _check_datasets(self.datasets, spec.label_column)
        config = {
            **spec.loop_config(),
            "datasets": sorted(self.datasets),
            "num_cpus": worker_threads(self.scaling_config),
        }
        return WorkerSetup(_train_loop, config, None)


def _train_loop(config: dict[str, Any]) -> None:
    """Fit, score, cross-validate and checkpoint, in the one worker."""
    from threadpoolctl import threadpool_limits

    # scikit-learn sizes its OpenMP and BLAS pools from the runtime's defaults, which a
    # worker forked from the driver inherited from it: a fork must not use the driver's
    # OpenMP pool, and a worker uses the CPUs it was given, not the machine's.
    with threadpool_limits(limits=config["num_cpus"]):
        _fit_score_report(config)


def _fit_score_report(config: dict[str, Any]) -> None:
    data = {name: _features(name, config["label_column"]) for name in config["datasets"]}
    estimator = _prepared(config)
    x_train, y_train = data[TRAIN]
    start = time.perf_counter()
    estimator.fit(x_train, y_train, **config["fit_params"])
    metrics: dict[str, Any] = {"fit_time": time.perf_counter() - start}
    for name, (x, y) in data.items():
        metrics[name] = _scores(estimator, config["scoring"], x, y)
    if config["cv"] is not None:
        metrics[CV] = _cross_validate(config, x_train, y_train)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, MODEL_FILE), "wb") as f:
            cloudpickle.dump(estimator, f)
        report(metrics, checkpoint=Checkpoint.from_directory(tmp))


def _features(name: str, label_column: str | None) -> tuple[Any, Any]:
    frame = shard_frame(name, label_column)
    if label_column is None:
        return frame, None
    return frame.drop(columns=[label_column]), frame[label_column]


def _prepared(config: dict[str, Any]) -> Any:
    """A fresh copy of the estimator with the params and CPUs set."""
    from sklearn.base import clone

    estimator = clone(config["estimator"]).set_params(**config["params"])
    if config["set_estimator_cpus"] and not _cv_in_parallel(config, estimator):
        params = estimator.get_params()
        cpus = config["num_cpus"]
        estimator.set_params(
            **{k: cpus for k, v in params.items() if k.endswith("n_jobs") and v is None}
        )
    return estimator


def _cv_in_parallel(config: dict[str, Any], estimator: Any) -> bool:
    if config["cv"] is None or config["num_cpus"] <= 1:
        return False
    if config["parallelize_cv"] is not None:
        return bool(config["parallelize_cv"])
    return not any(k.endswith("n_jobs") for k in estimator.get_params())


def _scores(estimator: Any, scoring: Any, x: Any, y: Any) -> dict[str, float]:
    """One dataset's scores as Ray nests them: ``{"score_time": s, "test_<scorer>": v}``
    (``"test_score"`` for the estimator's own score or one named scorer)."""
    from sklearn.metrics import check_scoring

    start = time.perf_counter()
    scores = check_scoring(estimator, scoring=scoring)(estimator, x, y)
    scored: dict[str, float] = {"score_time": time.perf_counter() - start}
    if not isinstance(scores, dict):
        scores = {"score": scores}
    scored.update({f"test_{name}": float(value) for name, value in scores.items()})
    return scored


def _cross_validate(config: dict[str, Any], x: Any, y: Any) -> dict[str, Any]:
    """scikit-learn's ``cross_validate`` results (a list per key, one value per fold) and
    each key's ``_mean`` and ``_std``, as Ray reports them under ``"cv"``."""
    from sklearn.model_selection import cross_validate

    estimator = _prepared(config)
    parallel = _cv_in_parallel(config, estimator)
    results = cross_validate(
        estimator,
        x,
        y,
        cv=config["cv"],
        scoring=config["scoring"],
        n_jobs=config["num_cpus"] if parallel else None,
        return_train_score=config["return_train_score_cv"],
        params=config["fit_params"] or None,
    )
    metrics: dict[str, Any] = {}
    for key, values in results.items():
        metrics[key] = [float(v) for v in values]
        metrics[f"{key}_mean"] = float(np.nanmean(values))
        metrics[f"{key}_std"] = float(np.nanstd(values))
    return metrics


# -- checks, at construction --------------------------------------------------------------


def _check_estimator(estimator: Any) -> Any:
    if isinstance(estimator, type) or not callable(getattr(estimator, "fit", None)):
        raise ValueError(
            f"estimator must be a scikit-learn estimator instance, got {estimator!r}. "
            "HINT: SklearnTrainer(estimator=RandomForestClassifier(), ...)"
        )
    return estimator


def _check_label(label_column: str | None) -> str | None:
    if label_column is not None and (not isinstance(label_column, str) or not label_column):
        raise ValueError(
            f"label_column must be a column name or None, got {label_column!r}. "
            "HINT: label_column='target'"
        )
    return label_column


def _check_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(
            f"params must be a dict of estimator parameters, got {type(params).__name__}. "
            "HINT: params={'max_depth': 4}"
        )
    return dict(params or {})


def _check_scoring(scoring: Any) -> Any:
    if scoring is None or callable(scoring) or isinstance(scoring, _SCORING_TYPES):
        return list(scoring) if isinstance(scoring, tuple) else scoring
    raise ValueError(
        f"scoring must be a scorer name, a list or dict of them, or a callable, got "
        f"{scoring!r}. HINT: scoring='accuracy' or scoring=['accuracy', 'f1']"
    )


def _check_cv(cv: Any) -> Any:
    if isinstance(cv, bool) or (isinstance(cv, int) and cv < 2):
        raise ValueError(f"cv must be a number of folds >= 2 or a splitter, got {cv!r}")
    return cv


def _one_worker(scaling: ScalingConfig) -> ScalingConfig:
    if scaling.max_workers > 1:
        raise ValueError(
            f"SklearnTrainer fits in one worker (scikit-learn is not distributed), so "
            f"num_workers={scaling.num_workers!r}: its workers are not allowed to be updated "
            "past one. HINT: num_workers=1, and give the worker more CPUs with "
            "resources_per_worker={'CPU': n}"
        )
    return scaling


def _check_parallel_cv(parallelize_cv: bool | None, scaling: ScalingConfig) -> None:
    gpus = scaling.num_gpus_per_worker + float((scaling.trainer_resources or {}).get("GPU", 0))
    if parallelize_cv and gpus:
        raise ValueError(
            "parallelize_cv=True runs the folds side by side on CPUs, but the trainer was "
            "given GPUs. HINT: parallelize_cv=False (the estimator uses the GPU), or no GPUs"
        )


def _check_datasets(datasets: Mapping[str, Any], label_column: str | None) -> None:
    if TRAIN not in datasets:
        raise UsageKeyError(  # a KeyError, as in Ray
            f"SklearnTrainer fits on datasets['train'], but the datasets given are "
            f"{sorted(datasets) or 'none'}. HINT: pass datasets={{'train': ds, ...}}"
        )
    if CV in datasets:
        raise UsageKeyError(
            f"a dataset may not be called {CV!r}: the cross-validation results are reported "
            f"under that key. HINT: rename datasets[{CV!r}]"
        )
    if label_column is None:
        return
    for name, dataset in datasets.items():
        columns = columns_of(dataset)
        if columns is not None and label_column not in columns:
            raise ValueError(
                f"label_column {label_column!r} is not a column of datasets[{name!r}]; its "
                f"columns are {columns}. HINT: pass the name of the column to predict"
            )
