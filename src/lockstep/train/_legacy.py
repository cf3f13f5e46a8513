"""The Trainer of early Ray Train (``Trainer(backend="torch", num_workers=4)``), kept working.

Older material writes ``trainer.start(); trainer.run(train_func); trainer.shutdown()``. Each
``run`` here is a DataParallelTrainer fit; the per-rank return values come back in rank order.
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lockstep._core import flags
from lockstep._core.callback import Callback, RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig, RunConfig, ScalingConfig
from lockstep._core.result import Result
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.controller.controller import TrainController
from lockstep.train._trainer import DataParallelTrainer

_BACKENDS = ("torch", "tensorflow", "horovod")
logger = logging.getLogger(__name__)


class Trainer:
    """Runs training functions on a fixed set of workers, in the style of Ray Train 1.x.

    Args:
        backend: ``"torch"``, ``"tensorflow"``, ``"horovod"``, or a ``BackendConfig``.
        num_workers: Number of workers (at least one).
        use_gpu: Give each worker a GPU.
        resources_per_worker: Resources per worker, e.g. ``{"CPU": 2}``.
        logdir: The directory of this trainer's runs: each ``run()`` writes
            ``logdir/run_001``, ``run_002``, ... By default a new ``train_<date>`` directory
            under ``~/lockstep_results`` (``LOCKSTEP_STORAGE_PATH``).

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
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(
                f"Trainer needs at least one worker, got num_workers={num_workers!r}. "
                "HINT: num_workers=1 or more"
            )
        self._scaling = ScalingConfig(
            num_workers=num_workers, use_gpu=use_gpu, resources_per_worker=resources_per_worker
        )
        self._logdir = _logdir(logdir)
        self._max_retries = max_retries
        self._started = False
        self._hook: Callable[[], Any] | None = None
        self._strategy: CheckpointConfig | None = None
        self._runs = 0
        self._latest: TrainController | None = None
        self._owned: list[str] = []  # checkpoints made from dicts, removed at shutdown()

    def start(self, initialization_hook: Callable[[], Any] | None = None) -> None:
        """Get ready to run training functions.

        Args:
            initialization_hook: Called in every worker before each training function
                (to set environment variables, say). It is tried on every worker here
                first: if it fails, ``start()`` raises a RuntimeError.
        """
        self._hook = initialization_hook
        self._started = True
        if initialization_hook is not None:
            try:
                self.run(_nothing)
            except Exception as exc:
                self._started = False
                raise RuntimeError(
                    f"the initialization_hook failed in the workers: {exc}. HINT: make the "
                    "hook work on its own first, e.g. call it in this process"
                ) from exc

    @property
    def logdir(self) -> Path:
        """The directory of this trainer's runs (``logdir/run_001``, ...)."""
        return self._logdir

    @property
    def latest_run_dir(self) -> Path | None:
        """The directory of the last run, or None before the first."""
        return self._logdir / _run_name(self._runs) if self._runs else None

    @property
    def latest_checkpoint_dir(self) -> Path | None:
        """Where the last run's checkpoints are: its run directory (Ray 1.x had a
        ``checkpoints`` directory in it)."""
        return self.latest_run_dir

    @property
    def best_checkpoint_path(self) -> Path | None:
        """The directory of the last run's best checkpoint (by its ``checkpoint_strategy``,
        else the latest), or None."""
        best = self._best()
        return None if best is None else Path(best.path)

    @property
    def best_checkpoint(self) -> dict[str, Any] | None:
        """The last run's best checkpoint, as the dict ``save_checkpoint`` saved, or None."""
        best = self._best()
        return None if best is None else best.to_dict()

    @staticmethod
    def load_checkpoint_from_path(checkpoint_file_path: str | os.PathLike[str]) -> dict[str, Any]:
        """The dict a checkpoint directory (``best_checkpoint_path``, say) holds."""
        return Checkpoint(os.fspath(checkpoint_file_path)).to_dict()

    def _best(self) -> Checkpoint | None:
        run_dir = self.latest_run_dir
        if run_dir is None or self._latest is None or self._latest.latest_checkpoint() is None:
            return None
        result = Result.from_path(run_dir)
        config = self._strategy
        if config is None or config.checkpoint_score_attribute is None:
            return result.checkpoint
        return result.best_checkpoints[-1][0]  # ordered by score, best last

    def run(
        self,
        train_func: Callable[..., Any],
        config: Mapping[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        dataset: Any = None,
        checkpoint: Checkpoint | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        checkpoint_strategy: CheckpointConfig | None = None,
    ) -> list[Any]:
        """Run ``train_func`` on every worker; return what each returned, in rank order.

        ``callbacks`` may be the loggers of ``lockstep.train.callbacks`` (any
        ``Callback``, ``TrainingCallback`` included), ``UserCallback``s, or old-style
        callbacks with a ``handle_result(results)`` method; ``dataset`` is one dataset
        (``"train"``) or a dict of them. ``checkpoint_strategy`` (a ``CheckpointConfig``)
        chooses the checkpoints kept; its ``checkpoint_score_attribute`` is a key of the
        state ``save_checkpoint(**state)`` saves, as in Ray 1.x.
        """
        adapted = [_adapt(c) for c in callbacks or ()]
        controller = self._fit(
            train_func, config, adapted, dataset, checkpoint, checkpoint_strategy
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
        controller = self._fit(train_func, config, [collector], dataset, checkpoint, None)
        return TrainingIterator(controller, collector)

    def _fit(
        self,
        train_func: Callable[..., Any],
        config: Mapping[str, Any] | None,
        callbacks: list[UserCallback | Callback],
        dataset: Any,
        checkpoint: Checkpoint | Mapping[str, Any] | str | os.PathLike[str] | None,
        strategy: CheckpointConfig | None,
    ) -> TrainController:
        if not self._started:
            raise RuntimeError("Trainer.run() before Trainer.start(). HINT: call start() first")
        from lockstep._core.config import FailureConfig

        if self._hook is not None:
            train_func = _after_hook(train_func, self._hook)
        self._runs = _next_run_number(self._logdir, self._runs)
        self._strategy = strategy
        run_config = RunConfig(
            name=_run_name(self._runs),
            storage_path=str(self._logdir),
            callbacks=callbacks,
            failure_config=FailureConfig(max_failures=self._max_retries),
            checkpoint_config=strategy or CheckpointConfig(),
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
        self, checkpoint: Checkpoint | Mapping[str, Any] | str | os.PathLike[str] | None
    ) -> Checkpoint | None:
        """Ray 1.x took a checkpoint as a dict, or as a path."""
        if checkpoint is None or isinstance(checkpoint, Checkpoint):
            return checkpoint
        if isinstance(checkpoint, Mapping):
            made = Checkpoint.from_dict(checkpoint)
            self._owned.append(made.path)
            return made
        return Checkpoint(os.fspath(checkpoint))


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

    def get_final_results(self, force: bool = False) -> list[Any] | None:
        """Every worker's return value, in rank order; with ``force``, runs to the end
        first, dropping unread reports. Before the end without ``force``, None (with a
        message saying why), as in Ray 1.x."""
        if force:
            for _ in self:
                pass
        if not self._finished:
            logger.info(
                "lockstep: the run has not finished, so there are no final results yet. "
                "HINT: iterate to the end first, or call get_final_results(force=True)"
            )
            return None
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
    if not isinstance(backend, str):
        raise TypeError(
            f"backend must be a name or a BackendConfig, got {type(backend).__name__} "
            f"{backend!r}. HINT: use one of {', '.join(_BACKENDS)}, or pass a BackendConfig"
        )
    if backend == "horovod":
        from lockstep._internal.backends.horovod import HorovodConfig

        return HorovodConfig()
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


def _logdir(logdir: str | os.PathLike[str] | None) -> Path:
    """The directory of the trainer's runs, as Ray 1.x chose it: the given one, or a new
    ``train_<date>`` under the default storage path."""
    if logdir is None:
        stamp = datetime.datetime.now().strftime("train_%Y-%m-%d_%H-%M-%S_%f")
        logdir = os.path.join(flags.DEFAULT_STORAGE_PATH.get(), stamp)
    return Path(logdir).expanduser().resolve()


def _run_name(number: int) -> str:
    return f"run_{number:03d}"


def _next_run_number(logdir: Path, last: int) -> int:
    """The number of the next run: after this trainer's last and every ``run_NNN`` already
    in ``logdir`` (a new run never continues an older one)."""
    taken = [int(p.name[4:]) for p in logdir.glob("run_[0-9][0-9][0-9]*") if p.name[4:].isdigit()]
    return max([last, *taken]) + 1


def _nothing() -> None:
    """The function ``start(initialization_hook=...)`` tries the hook with."""


def _after_hook(fn: Callable[..., Any], hook: Callable[[], Any]) -> Callable[..., Any]:
    """``fn`` called after ``hook``, taking the config when ``fn`` does."""
    import inspect

    if inspect.signature(fn).parameters:

        def with_config(config: Any) -> Any:
            hook()
            return fn(config)

        return with_config

    def without_config() -> Any:
        hook()
        return fn()

    return without_config


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
        if any(metrics):  # a step of save_checkpoint() alone is no result, as in Ray 1.x
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
