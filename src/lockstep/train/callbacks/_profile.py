"""Ray Train 1.x's ``TorchTensorboardProfilerCallback``: the workers' profiler traces on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lockstep.train.callbacks._legacy import TrainingCallback

PYTORCH_PROFILER_KEY = "_train_torch_profiler"  # what TorchWorkerProfiler reports
DRIVER_TRACE_DIR_NAME = "pytorch_profiler"


class TorchTensorboardProfilerCallback(TrainingCallback):
    """Writes the traces that ``TorchWorkerProfiler`` reported into ``logdir`` (by default
    ``pytorch_profiler`` in the run directory), one ``.pt.trace.json`` a worker and step,
    which TensorBoard's PyTorch profiler plugin opens (``tensorboard --logdir ...``).

    Args:
        logdir: The directory for the traces.
        workers_to_log: A worker's rank or a list of ranks; every worker's by default.

    Example:
        >>> import tempfile, os
        >>> callback = TorchTensorboardProfilerCallback(workers_to_log=1)
        >>> with tempfile.TemporaryDirectory() as run_dir:
        ...     callback.start_training(run_dir, config={})
        ...     callback.handle_result([
        ...         {"_train_torch_profiler": [("worker_0_epoch_0.pt.trace.json", "{}")]},
        ...         {"_train_torch_profiler": [("worker_1_epoch_0.pt.trace.json", "{}")]},
        ...     ])
        ...     os.listdir(os.path.join(run_dir, "pytorch_profiler"))
        ['worker_1_epoch_0.pt.trace.json']
    """

    RESERVED_KEYS = [PYTORCH_PROFILER_KEY]

    def __init__(
        self, logdir: str | None = None, workers_to_log: int | list[int] | None = None
    ) -> None:
        super().__init__()
        self._logdir = Path(logdir) if logdir is not None else None
        self._workers = [workers_to_log] if isinstance(workers_to_log, int) else workers_to_log

    def start_training(self, logdir: str, config: dict[str, Any], **info: Any) -> None:
        if self._logdir is None:
            self._logdir = Path(logdir, DRIVER_TRACE_DIR_NAME)
        self._logdir.mkdir(parents=True, exist_ok=True)

    def handle_result(self, results: list[dict[str, Any]], **info: Any) -> None:
        assert self._logdir is not None, "start_training was not called"
        for rank, result in enumerate(results):
            if self._workers is not None and rank not in self._workers:
                continue
            for name, contents in result.get(PYTORCH_PROFILER_KEY) or []:
                (self._logdir / name).write_text(contents)
