"""What the XGBoost and LightGBM trainers share: the classic form's arguments, a worker's
data, and the report callbacks' policy. Framework-free: the frameworks are imported by
their own subpackages.

A GBDT trainer has two forms. In the classic form the trainer owns the training loop: the
user gives ``label_column`` and ``params`` and each worker trains on its shards with the
framework's distributed mode. In the function form the user's function calls
``xgboost.train`` / ``lightgbm.train`` itself, with the report callback.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig, RunConfig, ScalingConfig
from lockstep._core.errors import UsageError, UsageKeyError
from lockstep.train._session import get_context, get_dataset_shard, report
from lockstep.train._trainer import DataParallelTrainer, FrameworkTrainerSpec, WorkerSetup

if TYPE_CHECKING:
    import pandas as pd

TRAIN = "train"
DEFAULT_NUM_BOOST_ROUND = 10  # as Ray's GBDT trainers


@dataclass(frozen=True, kw_only=True)
class ClassicArgs:
    """The classic form's arguments, checked; what the trainer's own loop trains with."""

    trainer: str
    label_column: str
    params: dict[str, Any]
    num_boost_round: int
    dmatrix_params: dict[str, dict[str, Any]]
    train_kwargs: dict[str, Any] = field(default_factory=dict)

    def check_datasets(self, datasets: Mapping[str, Any]) -> None:
        """Raise unless there is a ``"train"`` dataset and every dataset has the label."""
        if TRAIN not in datasets:
            raise UsageKeyError(  # a KeyError, as in Ray
                f"{self.trainer} trains on datasets['train'], but the datasets given are "
                f"{sorted(datasets) or 'none'}. HINT: pass datasets={{'train': ds}} (other "
                "datasets are evaluated every round under their names)"
            )
        for name in sorted(self.dmatrix_params):
            if name not in datasets:
                raise UsageKeyError(
                    f"dmatrix_params names dataset {name!r}, which is not among the datasets "
                    f"given: {sorted(datasets)}. HINT: key dmatrix_params by dataset name"
                )
        for name, dataset in datasets.items():
            columns = columns_of(dataset)
            if columns is not None and self.label_column not in columns:
                raise ValueError(
                    f"label_column {self.label_column!r} is not a column of "
                    f"datasets[{name!r}]; its columns are {columns}. HINT: pass the name of "
                    "the column to predict, e.g. label_column='target'"
                )

    def loop_config(
        self,
        datasets: Sequence[str],
        params: Mapping[str, Any],
        checkpoint_config: CheckpointConfig,
    ) -> dict[str, Any]:
        """The config the trainer's own training loop receives in every worker."""
        at_end = checkpoint_config.checkpoint_at_end
        return {
            "label_column": self.label_column,
            "params": dict(params),
            "num_boost_round": self.num_boost_round,
            "dmatrix_params": self.dmatrix_params,
            "train_kwargs": self.train_kwargs,
            "datasets": list(datasets),
            "checkpoint_frequency": checkpoint_config.checkpoint_frequency,
            "checkpoint_at_end": True if at_end is None else at_end,
        }


def classic_args(
    trainer: str,
    *,
    function_given: bool,
    train_loop_config: Mapping[str, Any] | None,
    label_column: str | None,
    label: str | None,
    params: Mapping[str, Any] | None,
    num_boost_round: int | None,
    dmatrix_params: Mapping[str, Any] | None,
    train_kwargs: Mapping[str, Any],
    datasets: Mapping[str, Any] | None,
) -> ClassicArgs | None:
    """The classic form's checked arguments, or None for the function form."""
    classic = {
        "label_column": label_column,
        "label": label,
        "params": params,
        "num_boost_round": num_boost_round,
        "dmatrix_params": dmatrix_params,
        **train_kwargs,
    }
    given = sorted(k for k, v in classic.items() if v is not None)
    if function_given:
        if given:
            raise ValueError(
                f"{trainer} got train_loop_per_worker and also {given}, which are for the "
                "form without a training function. HINT: either pass your function (it calls "
                "the framework's train itself), or label_column= and params= without one"
            )
        return None
    if train_loop_config is not None:
        raise ValueError(
            f"{trainer} got train_loop_config but no train_loop_per_worker. HINT: pass "
            "params= (and label_column=) to let the trainer train, or pass your function"
        )
    return ClassicArgs(
        trainer=trainer,
        label_column=_label(trainer, label_column, label, datasets),
        params=_params(trainer, params),
        num_boost_round=_rounds(trainer, num_boost_round),
        dmatrix_params=_dmatrix_params(trainer, dmatrix_params),
        train_kwargs=dict(train_kwargs),
    )


def _label(
    trainer: str, label_column: str | None, label: str | None, datasets: Mapping[str, Any] | None
) -> str:
    if label_column is not None and label is not None and label != label_column:
        raise ValueError(
            f"{trainer} got label_column={label_column!r} and label={label!r}. "
            "HINT: label is the older name of label_column; pass only label_column"
        )
    name = label_column if label_column is not None else label
    if name is None:
        columns = columns_of((datasets or {}).get(TRAIN))
        listed = f" (the columns of datasets['train'] are {columns})" if columns else ""
        raise ValueError(
            f"{trainer} needs label_column, the column to predict{listed}. "
            f"HINT: {trainer}(label_column='target', params={{...}}, datasets={{'train': ds}})"
        )
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"label_column must be a column name, got {name!r}. HINT: label_column='target'"
        )
    return name


def _params(trainer: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValueError(
            f"{trainer}(params=...) must be a dict of the framework's parameters, got "
            f"{type(params).__name__}. HINT: params={{'objective': 'binary:logistic'}}"
        )
    return dict(params)


def _rounds(trainer: str, num_boost_round: int | None) -> int:
    if num_boost_round is None:
        return DEFAULT_NUM_BOOST_ROUND
    if isinstance(num_boost_round, bool) or not isinstance(num_boost_round, int):
        raise ValueError(
            f"{trainer}(num_boost_round=...) must be an integer, got {num_boost_round!r}. "
            "HINT: num_boost_round=50"
        )
    if num_boost_round < 1:
        raise ValueError(f"num_boost_round must be >= 1, got {num_boost_round}")
    return num_boost_round


def _dmatrix_params(trainer: str, value: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise ValueError(
            f"{trainer}(dmatrix_params=...) takes a dict of dataset name to a dict of "
            f"arguments, got {value!r}. HINT: dmatrix_params={{'train': {{'weight': ...}}}}"
        )
    return {str(name): dict(kwargs) for name, kwargs in value.items()}


def columns_of(dataset: Any) -> list[str] | None:
    """The column names of a dataset from its schema, or None when it has none to read."""
    if dataset is None:
        return None
    columns = getattr(dataset, "columns", None)
    if callable(columns):
        return list(columns())
    schema = getattr(dataset, "schema", None)
    names = getattr(schema() if callable(schema) else None, "names", None)
    return list(names) if names is not None else None


def set_default(params: dict[str, Any], names: Sequence[str], value: Any) -> None:
    """Set ``params[names[0]] = value`` unless the user set it under one of ``names``."""
    if not any(n in params for n in names):
        params[names[0]] = value


def worker_threads(scaling: ScalingConfig) -> int:
    """The threads a worker's framework uses by default: the CPUs it was given."""
    return max(1, int(scaling.num_cpus_per_worker))


@dataclass(frozen=True, kw_only=True)
class GBDTTrainerSpec(FrameworkTrainerSpec):
    """The XGBoost and LightGBM trainers' arguments: DataParallelTrainer's (the function
    is optional), the classic form's, and the framework's config (in the subclass)."""

    label_column: str | None = None
    params: Mapping[str, Any] | None = None
    num_boost_round: int | None = None
    dmatrix_params: Mapping[str, Mapping[str, Any]] | None = None
    label: str | None = None
    train_kwargs: Mapping[str, Any] = field(default_factory=dict)

    extra: ClassVar[str | None] = "train_kwargs"
    function_required: ClassVar[bool] = False
    trainer: ClassVar[str] = "GBDTTrainer"

    def __post_init__(self) -> None:
        # the older dict form, {"max_actor_restarts": n}, which the material passes
        object.__setattr__(self, "run_config", RunConfig.coerce(self.run_config))
        super().__post_init__()
        classic = self.classic()
        if classic is not None and self.datasets:
            classic.check_datasets(self.datasets)

    def classic(self) -> ClassicArgs | None:
        """The classic form's checked arguments, or None for the function form."""
        return classic_args(
            self.trainer,
            function_given=self.train_loop_per_worker is not None,
            train_loop_config=self.train_loop_config,
            label_column=self.label_column,
            label=self.label,
            params=self.params,
            num_boost_round=self.num_boost_round,
            dmatrix_params=self.dmatrix_params,
            train_kwargs=self.train_kwargs,
            datasets=self.datasets,
        )

    def backend(self, scaling: ScalingConfig) -> Any:
        # the framework's threads in each worker: its CPUs, unless set
        return super().backend(scaling).with_default_threads(scaling.num_cpus_per_worker)


class GBDTTrainer(DataParallelTrainer):
    """The XGBoost and LightGBM trainers' shared part: the classic form's own loop.

    A subclass gives :meth:`_classic_loop` (the training loop that the classic form runs in
    every worker, a module-level function), :meth:`_classic_params` (the framework's
    defaults) and ``_report_callback`` (its report callback class, which reads boosters).
    """

    _honours_checkpoint_frequency = True  # its own boosting loop checkpoints every n rounds
    _report_callback: ClassVar[type[GBDTReportCallback]]

    @classmethod
    def get_model(cls, checkpoint: Checkpoint) -> Any:
        """The booster saved in ``checkpoint`` (by either form's report callback).

        Example:
            >>> import shutil, numpy as np, lightgbm
            >>> from lockstep.train.lightgbm import LightGBMCheckpoint, LightGBMTrainer
            >>> data = lightgbm.Dataset(np.arange(20.0).reshape(10, 2), label=np.arange(10.0))
            >>> booster = lightgbm.train({"verbose": -1, "min_data_in_leaf": 2}, data, 3)
            >>> checkpoint = LightGBMCheckpoint.from_model(booster)  # a new directory
            >>> LightGBMTrainer.get_model(checkpoint).current_iteration()
            3
            >>> shutil.rmtree(checkpoint.path)
        """
        return cls._report_callback.get_model(checkpoint)

    def _classic_loop(self) -> Callable[[dict[str, Any]], Any]:
        raise NotImplementedError

    def _classic_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return params

    def _worker_setup(self) -> WorkerSetup:
        spec = self._spec
        assert isinstance(spec, GBDTTrainerSpec)
        backend = spec.backend(self.scaling_config)
        classic = spec.classic()
        if classic is None:
            assert spec.train_loop_per_worker is not None
            return WorkerSetup(spec.train_loop_per_worker, spec.train_loop_config, backend)
        # The datasets may have been given only now, to fit(): check them, and give the loop
        # their names and the final run config.
        classic.check_datasets(self.datasets)
        config = classic.loop_config(
            sorted(self.datasets),
            self._classic_params(dict(classic.params)),
            self.run_config.checkpoint_config,
        )
        return WorkerSetup(self._classic_loop(), config, backend)


# -- in the workers -----------------------------------------------------------------------


def shard_frame(name: str, label_column: str | None) -> pd.DataFrame:
    """This worker's part of dataset ``name``, read whole into a DataFrame."""
    import pandas as pd

    shard = get_dataset_shard(name)
    frames = list(shard.iter_batches(batch_size=None, batch_format="pandas"))
    rank = get_context().get_world_rank()
    if not frames or not sum(len(f) for f in frames):
        raise UsageError(
            f"datasets[{name!r}] gave rank {rank} no rows to train on. HINT: use fewer "
            "workers, or more rows than workers"
        )
    frame: pd.DataFrame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    if label_column is not None and label_column not in frame.columns:
        raise UsageError(
            f"label_column {label_column!r} is not a column of datasets[{name!r}] as rank "
            f"{rank} reads it (after the preprocessor); its columns are {list(frame.columns)}. "
            "HINT: keep the label column in the preprocessor's output"
        )
    return frame


def split_label(frame: pd.DataFrame, label_column: str) -> tuple[pd.DataFrame, pd.Series]:
    """The features and the label of ``frame``."""
    return frame.drop(columns=[label_column]), frame[label_column]


def parse_eval(text: str) -> dict[str, float]:
    """Metrics from an evaluation line such as ``"[9]\\ttrain-logloss:0.1\\tvalid-error:0"``."""
    metrics: dict[str, float] = {}
    for part in text.split("\t")[1:]:
        key, _, value = part.rpartition(":")
        if key:
            metrics[key] = float(value)
    return metrics


class GBDTReportCallback:
    """The XGBoost and LightGBM report callbacks' shared part: their arguments, which metrics
    to report, when to checkpoint, how to report, and :meth:`get_model`.

    Every rank reports every round (the same metrics); only rank 0 attaches the model. A
    subclass names its booster file (``CHECKPOINT_NAME``) and reads one
    (:meth:`_load_booster`).
    """

    CHECKPOINT_NAME: ClassVar[str]

    def __init__(
        self,
        metrics: str | list[str] | dict[str, str] | None = None,
        filename: str | None = None,
        frequency: int = 0,
        checkpoint_at_end: bool = True,
        results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        filename = self.CHECKPOINT_NAME if filename is None else filename
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 0:
            raise ValueError(
                f"frequency must be a number of rounds >= 0, got {frequency!r}. "
                "HINT: frequency=10 checkpoints every 10 rounds, 0 only at the end"
            )
        if not isinstance(filename, str) or not filename or os.sep in filename:
            raise ValueError(f"filename must be a file name, got {filename!r}")
        if results_postprocessing_fn is not None and not callable(results_postprocessing_fn):
            raise ValueError("results_postprocessing_fn must be a function of the metrics dict")
        self._metrics = _metric_names(metrics)
        self._filename = filename
        self._frequency = frequency
        self._checkpoint_at_end = bool(checkpoint_at_end)
        self._postprocess = results_postprocessing_fn
        self._last_metrics: dict[str, Any] = {}
        self._checkpointed_rounds = -1

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str | None = None) -> Any:
        """The booster saved in ``checkpoint`` as ``filename`` (default ``CHECKPOINT_NAME``).

        Example:
            >>> import tempfile, numpy as np, xgboost
            >>> from lockstep.train.xgboost import RayTrainReportCallback, XGBoostCheckpoint
            >>> booster = xgboost.train({}, xgboost.DMatrix(np.eye(3), label=[0, 1, 2]), 2)
            >>> with tempfile.TemporaryDirectory() as d:
            ...     checkpoint = XGBoostCheckpoint.from_model(booster, path=d)
            ...     RayTrainReportCallback.get_model(checkpoint).num_boosted_rounds()
            2
        """
        name = cls.CHECKPOINT_NAME if filename is None else filename
        return load_model_file(checkpoint, name, cls._load_booster, "booster")

    @classmethod
    def _load_booster(cls, path: str) -> Any:
        raise NotImplementedError

    def _select(self, flat: Mapping[str, Any]) -> dict[str, Any]:
        """The metrics to report from the flattened evaluation results."""
        if self._metrics is None:
            chosen = dict(flat)
        else:
            chosen = {out: flat[key] for out, key in self._metrics.items() if key in flat}
        if self._postprocess is not None:
            chosen = dict(self._postprocess(chosen))
        self._last_metrics = chosen
        return chosen

    def _due(self, rounds: int) -> bool:
        """Whether the model after ``rounds`` rounds is checkpointed by frequency."""
        return self._frequency > 0 and rounds % self._frequency == 0

    def _report(
        self, metrics: dict[str, Any], rounds: int, save: Callable[[str], None] | None
    ) -> None:
        """Report ``metrics``; with ``save``, rank 0 also attaches the model it writes."""
        if save is None or get_context().get_world_rank() != 0:
            report(metrics)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                save(os.path.join(tmp, self._filename))
                report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        if save is not None:
            self._checkpointed_rounds = rounds


def _metric_names(metrics: str | list[str] | dict[str, str] | None) -> dict[str, str] | None:
    """Reported name to evaluation-result name, or None for every metric."""
    if metrics is None:
        return None
    if isinstance(metrics, str):
        return {metrics: metrics}
    if isinstance(metrics, Mapping):
        return {str(k): str(v) for k, v in metrics.items()}
    if isinstance(metrics, list | tuple) and all(isinstance(m, str) for m in metrics):
        return {m: m for m in metrics}
    raise ValueError(
        f"metrics must be a metric name, a list of them or a dict of reported name to metric "
        f"name, got {metrics!r}. HINT: metrics=['valid-logloss']"
    )


def load_model_file(
    checkpoint: Checkpoint,
    filename: str,
    loader: Callable[[str], Any],
    what: str,
    older_name: str | None = None,
) -> Any:
    """``loader(path)`` of ``filename`` in ``checkpoint`` (or of ``older_name``, the name an
    older release saved it under), or a ValueError if it is absent."""
    if not isinstance(checkpoint, Checkpoint):
        raise ValueError(
            f"get_model takes a Checkpoint, got {type(checkpoint).__name__}. "
            "HINT: get_model(result.checkpoint)"
        )
    with checkpoint.as_directory() as directory:
        path = os.path.join(directory, filename)
        if older_name is not None and not os.path.exists(path):
            path = os.path.join(directory, older_name)
        if not os.path.exists(path):
            present = sorted(os.listdir(directory))
            raise ValueError(
                f"{checkpoint!r} holds no {what} file {filename!r} (it holds {present}). "
                "HINT: pass the filename the report callback saved the model under"
            )
        return loader(path)
