"""XGBoostTrainer: xgboost trained data-parallel, every worker in one xgboost collective."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import xgboost

from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.backends.xgboost import XGBoostConfig
from lockstep.train._gbdt import (
    GBDTTrainer,
    GBDTTrainerSpec,
    parse_eval,
    set_default,
    shard_frame,
    split_label,
    worker_threads,
)
from lockstep.train._session import get_checkpoint
from lockstep.train.xgboost._callback import RayTrainReportCallback


@dataclass(frozen=True, kw_only=True)
class XGBoostTrainerSpec(GBDTTrainerSpec):
    """XGBoostTrainer's arguments: the GBDT trainers' and ``xgboost_config``."""

    xgboost_config: XGBoostConfig | None = None

    trainer: ClassVar[str] = "XGBoostTrainer"
    config_field: ClassVar[str] = "xgboost_config"
    config_type: ClassVar[type[BackendConfig]] = XGBoostConfig


class XGBoostTrainer(GBDTTrainer):
    """Trains an xgboost model on N workers, each on its own shard of the data.

    The workers join one xgboost collective, so ``xgboost.train`` in each of them trains
    one model over all the shards. Two forms:

    * Give ``label_column`` and ``params`` (the classic form): each worker builds a
      ``DMatrix`` from its shard of every dataset and trains ``num_boost_round`` rounds,
      evaluating every dataset each round under its name (``"train-logloss"``,
      ``"valid-error"``). ``CheckpointConfig(checkpoint_frequency=n)`` checkpoints every n
      rounds, and the last round is checkpointed unless ``checkpoint_at_end=False``. A run
      that resumes (a restart, ``resume_from_checkpoint``) continues boosting the
      checkpoint's booster up to ``num_boost_round`` rounds in all.
    * Give ``train_loop_per_worker``: it calls ``xgboost.train`` itself, with
      :class:`RayTrainReportCallback` to report and checkpoint.

    ``nthread`` defaults to the worker's CPUs (``resources_per_worker``), and with
    ``use_gpu`` the classic form trains with ``device="cuda"``.

    Args:
        train_loop_per_worker: Your training function (the function form).
        train_loop_config: Passed to the training function.
        xgboost_config: How the collective is set up.
        scaling_config: Workers and their resources; also the older dict form
            ``{"num_actors": 2, "cpus_per_actor": 2, "gpus_per_actor": 0}``.
        run_config: Name, storage, checkpoints, failure handling, callbacks.
        datasets: Datasets by name; ``"train"`` is trained on in the classic form.
        dataset_config: Which datasets are split across workers (all, by default).
        resume_from_checkpoint: Start from this checkpoint's booster.
        metadata: JSON data available as ``get_context().get_metadata()``.
        preprocessor: Fitted on ``"train"``, applied to every dataset, saved in every
            checkpoint (and applied again by :class:`XGBoostPredictor`).
        label_column: The column to predict (classic form).
        params: xgboost's parameters (classic form).
        num_boost_round: Rounds in all, counting those of a checkpoint resumed from
            (classic form; default 10).
        dmatrix_params: Per dataset name, extra arguments of its ``xgboost.DMatrix``.
        label: The older name of ``label_column``.
        **train_kwargs: Extra arguments of ``xgboost.train`` (classic form).

    Example:
        >>> import tempfile
        >>> import lockstep.data as ld
        >>> from lockstep.train import RunConfig, ScalingConfig
        >>> rows = [{"x": float(i), "y": int(i >= 10)} for i in range(20)]
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     trainer = XGBoostTrainer(
        ...         datasets={"train": ld.from_items(rows)}, label_column="y",
        ...         params={"objective": "binary:logistic", "eval_metric": "error"},
        ...         num_boost_round=5, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0))
        ...     result = trainer.fit()
        ...     rounds = XGBoostTrainer.get_model(result.checkpoint).num_boosted_rounds()
        >>> result.metrics, rounds
        ({'train-error': 0.0}, 5)
    """

    Spec = XGBoostTrainerSpec
    _report_callback = RayTrainReportCallback

    def _classic_loop(self) -> Callable[[dict[str, Any]], Any]:
        return _train_loop

    def _classic_params(self, params: dict[str, Any]) -> dict[str, Any]:
        set_default(params, ["nthread"], worker_threads(self.scaling_config))
        if self.scaling_config.use_gpu and params.get("tree_method") != "gpu_hist":
            set_default(params, ["device"], "cuda")
        return params


def _train_loop(config: dict[str, Any]) -> dict[str, int]:
    """The classic form's training loop, in every worker; returns its shards' row counts."""
    params = config["params"]
    data = _dmatrices(config, params.get("nthread"))
    checkpoint = get_checkpoint()
    booster = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    done = booster.num_boosted_rounds() if booster is not None else 0
    callback = RayTrainReportCallback(
        frequency=config["checkpoint_frequency"], checkpoint_at_end=config["checkpoint_at_end"]
    )
    callback._final_round = config["num_boost_round"]
    evals = [(matrix, name) for name, matrix in data.items()]
    left = config["num_boost_round"] - done
    if left <= 0 and booster is not None:
        _report_finished(callback, booster, params, evals)
    else:
        kwargs = {"verbose_eval": False, **config["train_kwargs"]}
        xgboost.train(
            params,
            data["train"],
            num_boost_round=left,
            evals=evals,
            xgb_model=booster,
            callbacks=[callback, *kwargs.pop("callbacks", [])],
            **kwargs,
        )
    return {name: matrix.num_row() for name, matrix in data.items()}


def _dmatrices(config: dict[str, Any], nthread: int | None) -> dict[str, xgboost.DMatrix]:
    """A DMatrix of this worker's shard of every dataset, "train" first.

    For the ``hist`` tree method (xgboost's default) a ``QuantileDMatrix``, as xgboost
    recommends: the features are binned once, as the matrix is built, instead of kept as
    floats and sketched when training starts; evaluation sets share the training bins.
    """
    names = sorted(config["datasets"], key=lambda name: name != "train")
    label_column = config["label_column"]
    binned = config["params"].get("tree_method", "hist") in ("hist", "gpu_hist")
    matrices: dict[str, xgboost.DMatrix] = {}
    for name in names:
        features, label = split_label(shard_frame(name, label_column), label_column)
        kwargs = {"nthread": nthread, **config["dmatrix_params"].get(name, {})}
        if not binned:
            matrices[name] = xgboost.DMatrix(features, label=label, **kwargs)
            continue
        if matrices:
            kwargs.setdefault("ref", matrices["train"])
        matrices[name] = xgboost.QuantileDMatrix(features, label=label, **kwargs)
    return matrices


def _report_finished(
    callback: RayTrainReportCallback, booster: Any, params: dict[str, Any], evals: list[Any]
) -> None:
    """The booster already has every round: report its metrics (and it) once."""
    # A saved booster keeps its trees, not its evaluation metrics: set the params again.
    booster.set_param(
        [
            (k, v)
            for k, values in params.items()
            for v in (values if isinstance(values, list) else [values])
        ]
    )
    metrics = callback._select(parse_eval(booster.eval_set(evals)))
    save = booster.save_model if callback._checkpoint_at_end else None
    callback._report(metrics, booster.num_boosted_rounds(), save)
