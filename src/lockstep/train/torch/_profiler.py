"""Ray Train 1.x's ``TorchWorkerProfiler``: torch.profiler traces sent back with a report."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch.profiler

from lockstep.train._session import get_context

PYTORCH_PROFILER_KEY = "_train_torch_profiler"
WORKER_TRACE_DIR_NAME = "pytorch_profiler_worker_traces"


class TorchWorkerProfiler:
    """Collects a worker's ``torch.profiler`` traces so that ``train.report`` carries them
    to ``TorchTensorboardProfilerCallback``, which writes them where TensorBoard's profiler
    plugin reads them.

    Pass ``on_trace_ready=profiler.trace_handler`` to ``torch.profiler.profile``, and report
    ``**profiler.get_and_clear_profile_traces()`` with the metrics.

    Args:
        trace_dir: Where this worker writes its traces first; a directory under the
            system's temporary directory by default.

    Example:
        >>> import os, tempfile, torch
        >>> from torch.profiler import profile, schedule
        >>> from lockstep import train
        >>> from lockstep.train import RunConfig
        >>> from lockstep.train.callbacks import TorchTensorboardProfilerCallback
        >>> from lockstep.train.torch import TorchTrainer, TorchWorkerProfiler
        >>> def train_func():
        ...     with tempfile.TemporaryDirectory() as traces:
        ...         twp = TorchWorkerProfiler(trace_dir=traces)
        ...         once = schedule(wait=0, warmup=0, active=1, repeat=1)
        ...         with profile(schedule=once, on_trace_ready=twp.trace_handler) as p:
        ...             torch.ones(8).sum()
        ...             p.step()
        ...         train.report({"epoch": 0, **twp.get_and_clear_profile_traces()})
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     callback = TorchTensorboardProfilerCallback()
        ...     run = RunConfig(name="run", storage_path=storage, callbacks=[callback], verbose=0)
        ...     _ = TorchTrainer(train_func, run_config=run).fit()
        ...     os.listdir(os.path.join(storage, "run", "pytorch_profiler"))
        ['worker_0_epoch_1.pt.trace.json']
    """

    def __init__(self, trace_dir: str | None = None) -> None:
        default = Path(tempfile.gettempdir(), WORKER_TRACE_DIR_NAME)
        self.trace_dir = Path(trace_dir) if trace_dir is not None else default
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        self.profiler_trace_filenames: list[str] = []

    def trace_handler(self, p: torch.profiler.profile) -> None:
        """The ``on_trace_ready`` of ``torch.profiler.profile``: writes a Chrome trace."""
        rank = get_context().get_world_rank()
        name = f"worker_{rank}_epoch_{p.step_num}.pt.trace.json"
        p.export_chrome_trace(str(self.trace_dir / name))
        self.profiler_trace_filenames.append(name)

    def get_and_clear_profile_traces(self) -> dict[str, Any]:
        """The traces written since the last call, as ``{key: [(file name, contents)]}``,
        to pass to ``train.report``; their files are removed."""
        traces = []
        for name in self.profiler_trace_filenames:
            path = self.trace_dir / name
            traces.append((name, path.read_text()))
            path.unlink()
        self.profiler_trace_filenames = []
        return {PYTORCH_PROFILER_KEY: traces}
