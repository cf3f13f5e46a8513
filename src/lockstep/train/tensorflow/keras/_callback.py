"""Keras callbacks that report metrics and checkpoints from ``model.fit``."""

from __future__ import annotations

import abc
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from lockstep._core.checkpoint import Checkpoint
from lockstep.train._session import report
from lockstep.train.tensorflow._checkpoint import TensorflowCheckpoint

# The Keras callback base of this process's tf.keras (Keras 2's tf_keras when
# TF_USE_LEGACY_KERAS=1, which lockstep.train.tensorflow sets when tf_keras is installed).
KerasCallback = tf.keras.callbacks.Callback

# Keras's hooks, without the "on_" in front: the values checkpoint_on and report_metrics_on
# accept.
HOOKS = (
    "epoch_begin",
    "epoch_end",
    "train_batch_begin",
    "train_batch_end",
    "test_batch_begin",
    "test_batch_end",
    "predict_batch_begin",
    "predict_batch_end",
    "train_begin",
    "train_end",
    "test_begin",
    "test_end",
    "predict_begin",
    "predict_end",
)


def _hooks(value: str | list[str], name: str) -> list[str]:
    hooks = [value] if isinstance(value, str) else list(value)
    unknown = [h for h in hooks if h not in HOOKS]
    if unknown:
        raise ValueError(
            f"{name}={value!r}: {unknown} are not Keras hooks. HINT: use names among "
            f"{', '.join(HOOKS)} (the Keras on_* hook without 'on_')"
        )
    return hooks


class RayReportCallback(KerasCallback, abc.ABC):  # type: ignore[misc,valid-type]
    """The base of Keras callbacks that report on chosen hooks, as Ray's is.

    Subclasses say what reporting means with :meth:`_save_and_report_checkpoint` and
    :meth:`_report_metrics`.

    Args:
        checkpoint_on: The hook(s) at which to report a checkpoint of the model (with the
            metrics), e.g. ``"epoch_end"`` or ``["train_batch_end", "epoch_end"]``.
        report_metrics_on: The hook(s) at which to report metrics.
        metrics: Which of Keras's logs to report: a name, a list of names, or a dict of
            reported name to Keras name; None reports all.
    """

    CHECKPOINT_NAME = TensorflowCheckpoint.MODEL_FILENAME

    def __init__(
        self,
        checkpoint_on: str | list[str] = "epoch_end",
        report_metrics_on: str | list[str] = "epoch_end",
        metrics: str | list[str] | dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._checkpoint_on = _hooks(checkpoint_on, "checkpoint_on")
        self._report_metrics_on = _hooks(report_metrics_on, "report_metrics_on")
        if metrics is not None and not isinstance(metrics, str | list | dict):
            raise ValueError(
                f"metrics must be a name, a list of names or a dict, got {metrics!r}. "
                'HINT: metrics=["loss"] or metrics={"train_loss": "loss"}'
            )
        self._metrics = metrics

    def _handle(self, logs: Mapping[str, Any] | None, when: str) -> None:
        if when not in self._checkpoint_on and when not in self._report_metrics_on:
            return
        metrics = self._get_reported_metrics(dict(logs or {}))
        if when in self._checkpoint_on:
            # Every worker saves: under Keras 2 the save runs collective operations, so a
            # save on rank 0 alone would wait forever for the others.
            checkpoint = TensorflowCheckpoint.from_model(self.model)
            try:
                self._save_and_report_checkpoint(metrics, checkpoint)
            finally:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        else:
            self._report_metrics(metrics)

    def _get_reported_metrics(self, logs: dict[str, Any]) -> dict[str, Any]:
        if self._metrics is None:
            chosen = logs
        elif isinstance(self._metrics, str):
            chosen = {self._metrics: logs[self._metrics]}
        elif isinstance(self._metrics, list):
            chosen = {name: logs[name] for name in self._metrics}
        else:
            chosen = {key: logs[name] for key, name in self._metrics.items()}
        return {key: _plain(value) for key, value in chosen.items()}

    @abc.abstractmethod
    def _save_and_report_checkpoint(self, metrics: dict[str, Any], checkpoint: Checkpoint) -> None:
        """Report ``metrics`` with ``checkpoint``."""

    @abc.abstractmethod
    def _report_metrics(self, metrics: dict[str, Any]) -> None:
        """Report ``metrics`` alone."""


def _reporting_hook(when: str) -> Callable[..., None]:
    """Keras's ``on_<when>`` hook, reporting as the callback was told to for ``when``."""
    if when.startswith("epoch_") or "_batch_" in when:  # these get the epoch or batch first

        def hook(self: RayReportCallback, index: int, logs: Any = None) -> None:
            self._handle(logs, when)

    else:

        def hook(self: RayReportCallback, logs: Any = None) -> None:  # type: ignore[misc]
            self._handle(logs, when)

    hook.__name__ = hook.__qualname__ = f"on_{when}"
    return hook


for _when in HOOKS:
    setattr(RayReportCallback, f"on_{_when}", _reporting_hook(_when))


class ReportCheckpointCallback(RayReportCallback):
    """Reports Keras's metrics, and a checkpoint of the model, from ``model.fit``.

    By default, at the end of every epoch every worker saves the model (as
    ``model.keras``, readable with :meth:`TensorflowCheckpoint.get_model`) and reports
    Keras's logs with it. Arguments are those of :class:`RayReportCallback`.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from lockstep.train import RunConfig
        >>> from lockstep.train.tensorflow import TensorflowTrainer
        >>> def train_func():
        ...     model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
        ...     model.compile(optimizer="sgd", loss="mse")
        ...     x = np.arange(8.0).reshape(-1, 1)
        ...     model.fit(x, 2 * x, epochs=2, verbose=0,
        ...               callbacks=[ReportCheckpointCallback(metrics="loss")])
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     result = TensorflowTrainer(
        ...         train_func, run_config=RunConfig(storage_path=storage, verbose=0)).fit()
        ...     model = TensorflowCheckpoint(result.checkpoint.path).get_model()
        >>> list(result.metrics), model.count_params()
        (['loss'], 2)
    """

    def _save_and_report_checkpoint(self, metrics: dict[str, Any], checkpoint: Checkpoint) -> None:
        report(metrics, checkpoint=checkpoint)

    def _report_metrics(self, metrics: dict[str, Any]) -> None:
        report(metrics)


def _plain(value: Any) -> Any:
    """Keras logs hold numpy scalars or tensors; metrics are plain numbers."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        return value.item()
    return value
