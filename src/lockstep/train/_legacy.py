"""The Trainer of early Ray Train (``Trainer(backend="torch", num_workers=4)``), kept working.

Older material writes ``trainer.start(); trainer.run(train_func); trainer.shutdown()``. Each
``run`` here is a DataParallelTrainer fit; the per-rank return values come back in rank order.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockstep._core.callback import Callback, RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import RunConfig, ScalingConfig
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.controller.controller import TrainController
from lockstep.train._trainer import DataParallelTrainer

_BACKENDS = ("torch", "tensorflow")


class Trainer:
    """Runs training functions on a fixed set of workers, in the style of Ray Train 1.x.

    Args:
        backend: ``"torch"``, ``"tensorflow"``, or a ``BackendConfig``.
        num_workers: Number of workers.
        use_gpu: Give each worker a GPU.
        resources_per_worker: Resources per worker, e.g. ``{"CPU": 2}``.
        logdir: Where runs are written (``RunConfig.storage_path``).

    Example:
        >>> import tempfile
        >>> from lockstep import train
        >>> with tempfile.TemporaryDirectory() as logdir:
        ...     trainer = Trainer(backend="torch", num_workers=2, logdir=logdir)
        ...     trainer.start()
        ...     ranks = trainer.run(lambda: train.get_context().get_world_rank())
        ...     trainer.shutdown()
        >>> ranks
        [0, 1]
    """

    def __init__(
        self,
        backend: str | BackendConfig,
        num_workers: int = 1,
        use_gpu: bool = False,
        resources_per_worker: Mapping[str, float] | None = None,
        logdir: str | None = None,
        max_retries: int = 0,
    ) -> None:
        self._backend = _backend_config(backend)
        self._scaling = ScalingConfig(
            num_workers=num_workers, use_gpu=use_gpu, resources_per_worker=resources_per_worker
        )
        self._logdir = logdir
        self._max_retries = max_retries
        self._started = False
        self._latest: TrainController | None = None
        self._owned: list[str] = []  # checkpoints made from dicts, removed at shutdown()

    def start(self) -> None:
        """Get ready to run training functions."""
        self._started = True

    def run(
        self,
        train_func: Callable[..., Any],
        config: Mapping[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        dataset: Any = None,
        checkpoint: Checkpoint | Mapping[str, Any] | str | None = None,
    ) -> list[Any]:
        """Run ``train_func`` on every worker; return what each returned, in rank order.

        ``callbacks`` may be the loggers of ``lockstep.train.callbacks`` (any
        ``Callback``, ``TrainingCallback`` included), ``UserCallback``s, or old-style
        callbacks with a ``handle_result(results)`` method; ``dataset`` is one dataset
        (``"train"``) or a dict of them.
        """
        controller = self._fit(
            train_func, config, [_adapt(c) for c in callbacks or ()], dataset, checkpoint
        )
        controller.run()
        return controller.return_values()

    def run_iterator(
        self,
        train_func: Callable[..., Any],
        config: Mapping[str, Any] | None = None,
        dataset: Any = None,
        checkpoint: Checkpoint | Mapping[str, Any] | str | None = None,
    ) -> TrainingIterator:
        """Run ``train_func`` step by step: iterating yields each report, as a list of
        every worker's metrics; ``get_final_results()`` then gives the return values.

        Example:
            >>> import tempfile
            >>> from lockstep import train
            >>> def train_func():
            ...     for i in range(2):
            ...         train.report(step=i)
            ...     return train.world_rank()
            >>> with tempfile.TemporaryDirectory() as logdir:
            ...     trainer = Trainer(backend="torch", num_workers=2, logdir=logdir)
            ...     trainer.start()
            ...     iterator = trainer.run_iterator(train_func)
            ...     steps = [[m["step"] for m in results] for results in iterator]
            ...     trainer.shutdown()
            >>> steps, iterator.get_final_results()
            ([[0, 0], [1, 1]], [0, 1])
        """
        collector = _Collect()
        controller = self._fit(train_func, config, [collector], dataset, checkpoint)
        return TrainingIterator(controller, collector)

    def _fit(
        self,
        train_func: Callable[..., Any],
        config: Mapping[str, Any] | None,
        callbacks: list[UserCallback | Callback],
        dataset: Any,
        checkpoint: Checkpoint | Mapping[str, Any] | str | None,
    ) -> TrainController:
        if not self._started:
            raise RuntimeError("Trainer.run() before Trainer.start(). HINT: call start() first")
        from lockstep._core.config import FailureConfig

        run_config = RunConfig(
            storage_path=self._logdir,
            callbacks=callbacks,
            failure_config=FailureConfig(max_failures=self._max_retries),
        )
        trainer = DataParallelTrainer(
            train_func,
            train_loop_config=config,
            backend_config=self._backend,
            scaling_config=self._scaling,
            run_config=run_config,
            datasets=_datasets(dataset),
            resume_from_checkpoint=self._as_checkpoint(checkpoint),
        )
        controller = trainer._controller()
        self._latest = controller
        return controller

    @property
    def latest_checkpoint(self) -> dict[str, Any] | None:
        """The latest checkpoint of the last run, as the dict ``save_checkpoint`` saved
        (Ray 1.x), or None."""
        controller = self._latest
        checkpoint = controller.latest_checkpoint() if controller is not None else None
        return None if checkpoint is None else checkpoint.to_dict()

    def shutdown(self) -> None:
        """Release the workers; a later run() needs start() again."""
        self._started = False
        for path in self._owned:
            shutil.rmtree(path, ignore_errors=True)
        self._owned = []

    def _as_checkpoint(
        self, checkpoint: Checkpoint | Mapping[str, Any] | str | None
    ) -> Checkpoint | None:
        """Ray 1.x took a checkpoint as a dict, or as a path."""
        if checkpoint is None or isinstance(checkpoint, Checkpoint):
            return checkpoint
        if isinstance(checkpoint, Mapping):
            made = Checkpoint.from_dict(checkpoint)
            self._owned.append(made.path)
            return made
        return Checkpoint(checkpoint)


class TrainingIterator:
    """The reports of a ``Trainer.run_iterator`` run, one list of worker metrics per step.

    The run advances as the iterator is read; an error in the workers is raised from
    ``next()``.
    """

    def __init__(self, controller: TrainController, collector: _Collect) -> None:
        self._controller = controller
        self._collector = collector
        self._steps = controller.iter_run()
        self._finished = False

    def __iter__(self) -> TrainingIterator:
        return self

    def __next__(self) -> list[dict[str, Any]]:
        while not self._collector.pending:
            if self._finished:
                raise StopIteration
            try:
                next(self._steps)
            except StopIteration:
                self._finished = True
        return self._collector.pending.pop(0)

    def is_finished(self) -> bool:
        """Whether the run ended and every report was read."""
        return self._finished and not self._collector.pending

    def get_final_results(self, force: bool = False) -> list[Any]:
        """Every worker's return value, in rank order; with ``force``, runs to the end
        first, dropping unread reports."""
        if force:
            for _ in self:
                pass
        if not self._finished:
            raise RuntimeError(
                "the run has not finished. HINT: iterate to the end first, or pass force=True"
            )
        return self._controller.return_values()


class _Collect(UserCallback):
    """Keeps each step's metrics (every rank's) until the iterator hands them out."""

    def __init__(self) -> None:
        self.pending: list[list[dict[str, Any]]] = []

    def after_report(
        self, run_context: RunContext, metrics: list[dict[str, Any]], checkpoint: Any
    ) -> None:
        self.pending.append(metrics)


def _backend_config(backend: str | BackendConfig) -> BackendConfig:
    if isinstance(backend, BackendConfig):
        return backend
    if backend == "torch":
        from lockstep._internal.backends.torch import TorchConfig

        return TorchConfig(backend="gloo")
    if backend == "tensorflow":
        from lockstep._internal.backends.tensorflow import TensorflowConfig

        return TensorflowConfig()
    raise ValueError(
        f"unknown backend {backend!r}. HINT: use one of {', '.join(_BACKENDS)}, or pass a "
        "BackendConfig"
    )


def _datasets(dataset: Any) -> dict[str, Any] | None:
    if dataset is None:
        return None
    if isinstance(dataset, Mapping):
        return dict(dataset)
    return {"train": dataset}


class _HandleResult(UserCallback):
    """An old-style callback: ``handle_result(results)`` gets every worker's metrics."""

    def __init__(self, callback: Any) -> None:
        self._callback = callback

    def after_report(
        self, run_context: RunContext, metrics: list[dict[str, Any]], checkpoint: Any
    ) -> None:
        self._callback.handle_result(metrics)


def _adapt(callback: Any) -> UserCallback | Callback:
    if isinstance(callback, UserCallback | Callback):
        return callback
    if callable(getattr(callback, "handle_result", None)):
        return _HandleResult(callback)
    raise ValueError(
        f"callbacks take Callback or UserCallback instances (or objects with handle_result), "
        f"got {callback!r}. HINT: subclass lockstep.train.callbacks.TrainingCallback"
    )
