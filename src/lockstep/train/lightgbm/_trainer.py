"""LightGBMTrainer: LightGBM trained data-parallel over its own socket network."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import lightgbm

from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.backends.lightgbm import LightGBMConfig
from lockstep.train._collective import barrier
from lockstep.train._gbdt import (
    GBDTTrainer,
    GBDTTrainerSpec,
    set_default,
    shard_frame,
    split_label,
    worker_threads,
)
from lockstep.train._session import get_checkpoint, get_context
from lockstep.train.lightgbm._callback import RayTrainReportCallback
from lockstep.train.lightgbm._network import get_network_params

_THREAD_PARAMS = ["num_threads", "num_thread", "nthread", "nthreads", "n_jobs"]
_LEARNER_PARAMS = ["tree_learner", "tree", "tree_type", "tree_learner_type"]
_VERBOSITY_PARAMS = ["verbose", "verbosity"]
# Between the highest rank starting to join LightGBM's network and rank 0 (see
# _listeners_first); well under LightGBM's 200 ms wait after a refused connection.
_JOIN_STAGGER_S = 0.02


@dataclass(frozen=True, kw_only=True)
class LightGBMTrainerSpec(GBDTTrainerSpec):
    """LightGBMTrainer's arguments: the GBDT trainers' and ``lightgbm_config``."""

    lightgbm_config: LightGBMConfig | None = None

    trainer: ClassVar[str] = "LightGBMTrainer"
    config_field: ClassVar[str] = "lightgbm_config"
    config_type: ClassVar[type[BackendConfig]] = LightGBMConfig


class LightGBMTrainer(GBDTTrainer):
    """Trains a LightGBM model on N workers, each on its own shard of the data.

    The workers connect to each other with LightGBM's own sockets (each listens on a port
    of its host; the backend gives every worker the list, see :func:`get_network_params`).
    Two forms:

    * Give ``label_column`` and ``params`` (the classic form): each worker builds a
      ``lightgbm.Dataset`` from its shard of every dataset and trains ``num_boost_round``
      rounds with ``tree_learner="data"`` (unless ``params`` names another learner) and
      ``pre_partition=True``, evaluating every dataset each round under its name
      (``"train-binary_logloss"``). Checkpoints and resuming as in
      :class:`~lockstep.train.xgboost.XGBoostTrainer`.
    * Give ``train_loop_per_worker``: it calls ``lightgbm.train`` itself with
      ``**get_network_params()`` and :class:`RayTrainReportCallback`.

    ``num_threads`` defaults to the worker's CPUs (``resources_per_worker``). In LightGBM's
    data-parallel mode each feature's bins are found on one worker's rows, so shuffle data
    whose row order follows a feature before splitting it (``random_shuffle()``).

    Args:
        train_loop_per_worker: Your training function (the function form).
        train_loop_config: Passed to the training function.
        lightgbm_config: The backend's config (it has no fields).
        scaling_config: Workers and their resources; also the older dict form
            ``{"num_actors": 2, "cpus_per_actor": 2}``.
        run_config, datasets, dataset_config, resume_from_checkpoint, metadata,
            preprocessor, label_column, num_boost_round, label: As
            :class:`~lockstep.train.xgboost.XGBoostTrainer` takes them.
        params: LightGBM's parameters (classic form).
        dmatrix_params: Per dataset name, extra arguments of its ``lightgbm.Dataset``.
        **train_kwargs: Extra arguments of ``lightgbm.train`` (classic form).

    Example:
        >>> import tempfile
        >>> import lockstep.data as ld
        >>> from lockstep.train import RunConfig, ScalingConfig
        >>> rows = [{"x": float(i), "y": int(i >= 20)} for i in range(40)]
        >>> rows = rows[::2] + rows[1::2]  # each worker sees the whole range of x
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     trainer = LightGBMTrainer(
        ...         datasets={"train": ld.from_items(rows)}, label_column="y",
        ...         params={"objective": "binary", "metric": "binary_error",
        ...                 "min_data_in_leaf": 2, "min_data_in_bin": 1, "verbose": -1},
        ...         num_boost_round=5, scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0))
        ...     result = trainer.fit()
        ...     rounds = LightGBMTrainer.get_model(result.checkpoint).current_iteration()
        >>> result.metrics, rounds
        ({'train-binary_error': 0.0}, 5)
    """

    Spec = LightGBMTrainerSpec
    _report_callback = RayTrainReportCallback

    def _classic_loop(self) -> Callable[[dict[str, Any]], Any]:
        return _train_loop

    def _classic_params(self, params: dict[str, Any]) -> dict[str, Any]:
        set_default(params, _THREAD_PARAMS, worker_threads(self.scaling_config))
        set_default(params, _VERBOSITY_PARAMS, 0)  # warnings, not LightGBM's info lines
        if self.scaling_config.max_workers > 1:
            set_default(params, _LEARNER_PARAMS, "data")
            params["pre_partition"] = True  # each worker holds its own shard
        return params


def _train_loop(config: dict[str, Any]) -> dict[str, int]:
    """The classic form's training loop, in every worker; returns its shards' row counts."""
    params = config["params"]
    data, rows = _datasets(config)
    checkpoint = get_checkpoint()
    booster = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    done = booster.current_iteration() if booster is not None else 0
    callback = RayTrainReportCallback(
        frequency=config["checkpoint_frequency"], checkpoint_at_end=config["checkpoint_at_end"]
    )
    left = config["num_boost_round"] - done
    if left <= 0 and booster is not None:
        _report_finished(callback, booster)
        return rows
    kwargs = dict(config["train_kwargs"])
    lightgbm.train(
        _join_network(params),
        data["train"],
        num_boost_round=left,
        valid_sets=list(data.values()),
        valid_names=list(data),
        init_model=booster,
        callbacks=[callback, *kwargs.pop("callbacks", [])],
        **kwargs,
    )
    return rows


def _join_network(params: dict[str, Any]) -> dict[str, Any]:
    """Join LightGBM's network now; ``params`` for lightgbm.train, without ``machines``.

    lightgbm.train would join it itself, but before it has read the verbosity from the
    parameters, and its listening thread prints whatever the verbosity: joining here lets
    a quiet run (``verbose`` < 1) be quiet. The backend leaves the network at shutdown.
    """
    network = get_network_params()
    if not network:
        return params
    from lightgbm.basic import _LIB  # type: ignore[attr-defined]

    quiet = next((params[k] for k in _VERBOSITY_PARAMS if k in params), 1) < 1
    _listeners_first()
    with _native_stdout_silenced(quiet):
        code = _LIB.LGBM_NetworkInit(
            network["machines"].encode(),
            ctypes.c_int(network["local_listen_port"]),
            ctypes.c_int(int(params.get("time_out", 120))),
            ctypes.c_int(network["num_machines"]),
        )
    if code != 0:
        raise lightgbm.basic.LightGBMError(_LIB.LGBM_GetLastError().decode())
    return {**params, "num_machines": network["num_machines"]}


def _listeners_first() -> None:
    """Start joining in an order where each rank finds the ranks it connects to listening.

    LightGBM's rank r connects to every higher rank, and when one is not listening yet it
    waits 200 ms before trying again. After a barrier, higher ranks start first.
    """
    context = get_context()
    size, rank = context.get_world_size(), context.get_world_rank()
    barrier()
    time.sleep(_JOIN_STAGGER_S * (size - 1 - rank) / max(1, size - 1))


@contextlib.contextmanager
def _native_stdout_silenced(silenced: bool) -> Iterator[None]:
    """Native code's prints to this process's stdout go nowhere while inside."""
    if not silenced:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # what C buffered goes to /dev/null, not later to 1
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _datasets(config: dict[str, Any]) -> tuple[dict[str, lightgbm.Dataset], dict[str, int]]:
    """A lightgbm.Dataset of this worker's shard of every dataset, "train" first; and the
    rows of each (lightgbm.train frees the datasets)."""
    names = sorted(config["datasets"], key=lambda name: name != "train")
    label_column = config["label_column"]
    datasets: dict[str, lightgbm.Dataset] = {}
    rows = {}
    for name in names:
        features, label = split_label(shard_frame(name, label_column), label_column)
        kwargs = dict(config["dmatrix_params"].get(name, {}))
        if datasets:  # evaluation sets share the training set's bins
            kwargs.setdefault("reference", datasets["train"])
        datasets[name] = lightgbm.Dataset(features, label=label, **kwargs)
        rows[name] = len(features)
    return datasets, rows


def _report_finished(callback: RayTrainReportCallback, booster: Any) -> None:
    """The booster already has every round: report it once more, as the run's result."""
    save = None
    if callback._checkpoint_at_end:
        save = lambda path: booster.save_model(path, num_iteration=-1)  # noqa: E731
    callback._report({}, booster.current_iteration(), save)
