"""The Trainer of early Ray Train (``Trainer(backend="torch", num_workers=4)``), kept working.

Older material writes ``trainer.start(); trainer.run(train_func); trainer.shutdown()``. Each
``run`` here is a DataParallelTrainer fit; the per-rank return values come back in rank order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lockstep._core.callback import RunContext, UserCallback
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import RunConfig, ScalingConfig
from lockstep._internal.backends.base import BackendConfig
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

    def start(self) -> None:
        """Get ready to run training functions."""
        self._started = True

    def run(
        self,
        train_func: Callable[..., Any],
        config: Mapping[str, Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        dataset: Any = None,
        checkpoint: Checkpoint | None = None,
    ) -> list[Any]:
        """Run ``train_func`` on every worker; return what each returned, in rank order.

        ``callbacks`` may be ``UserCallback``s or old-style callbacks with a
        ``handle_result(results)`` method; ``dataset`` is one dataset (``"train"``) or a
        dict of them.
        """
        if not self._started:
            raise RuntimeError("Trainer.run() before Trainer.start(). HINT: call start() first")
        from lockstep._core.config import FailureConfig

        run_config = RunConfig(
            storage_path=self._logdir,
            callbacks=[_adapt(c) for c in callbacks or ()],
            failure_config=FailureConfig(max_failures=self._max_retries),
        )
        trainer = DataParallelTrainer(
            train_func,
            train_loop_config=config,
            backend_config=self._backend,
            scaling_config=self._scaling,
            run_config=run_config,
            datasets=_datasets(dataset),
            resume_from_checkpoint=checkpoint,
        )
        controller = trainer._controller()
        controller.run()
        return controller.return_values()

    def shutdown(self) -> None:
        """Release the workers; a later run() needs start() again."""
        self._started = False


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


def _adapt(callback: Any) -> UserCallback:
    if isinstance(callback, UserCallback):
        return callback
    if callable(getattr(callback, "handle_result", None)):
        return _HandleResult(callback)
    raise ValueError(
        f"callbacks take UserCallback instances (or objects with handle_result), got "
        f"{callback!r}. HINT: subclass lockstep.train.UserCallback"
    )
