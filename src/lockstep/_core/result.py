"""Result: what a finished (or failed) run leaves behind, read back from its directory."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockstep._core import pyarrow_fs, storage
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.errors import RunNotFoundError, TrainingFailedError, WorkerFailure
from lockstep._core.mappings import flatten_dict
from lockstep._core.run_state import RunState
from lockstep._core.time_ledger import TimeLedger, read_ledger

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.fs


@dataclass
class Result:
    """The outcome of a run.

    Attributes:
        metrics: Rank 0's last reported metrics, with or without a checkpoint.
        checkpoint: The latest committed checkpoint, or None.
        best_checkpoints: ``(checkpoint, metrics)`` of the ``num_to_keep`` best retained
            checkpoints (all without ``num_to_keep``), ordered by score from worst to best
            (best last), or oldest first without a score. The latest checkpoint, kept on
            disk for a restart, is listed only when it is one of them (as in Ray).
        path: The run directory: a local path, or a path on :attr:`filesystem` without the
            URL scheme (``bucket/runs/exp`` of ``s3://bucket/runs/exp``), as in Ray.
        error: The failure, when the run failed.
        return_value: What rank 0's training function returned.
        time: Where the run's wall time went (:class:`~lockstep.train.TimeLedger`):
            starting, training, waiting for data and for slower ranks, checkpoint
            stalls, recovering from failures, replayed work, preemption drain and
            shutdown, per rank too, and the goodput; None for a run of an older version.

    Example:
        >>> import os, tempfile
        >>> from lockstep.testing import train_epochs
        >>> from lockstep.train import DataParallelTrainer, RunConfig
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     run = RunConfig(name="exp", storage_path=storage, verbose=0)
        ...     _ = DataParallelTrainer(train_epochs, train_loop_config={"epochs": 3},
        ...                             run_config=run).fit()
        ...     result = Result.from_path(os.path.join(storage, "exp"))
        ...     print(result.metrics["epoch"], os.path.basename(result.checkpoint.path))
        2 checkpoint_000002
    """

    metrics: dict[str, Any] | None
    checkpoint: Checkpoint | None
    path: str
    error: TrainingFailedError | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = None  # type: ignore[assignment]
    return_value: Any = None
    time: TimeLedger | None = None
    _run_dir: storage.StorageDir | None = field(default=None, repr=False, compare=False)
    _dataframe: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.best_checkpoints is None:  # optional, as in Ray
            self.best_checkpoints = []

    @property
    def filesystem(self) -> pyarrow.fs.FileSystem | None:
        """The ``pyarrow.fs.FileSystem`` of the run directory, as in Ray."""
        return pyarrow_fs.to_pyarrow(self._run_dir.fs) if self._run_dir is not None else None

    @property
    def metrics_dataframe(self) -> pd.DataFrame | None:
        """Every step's metrics (rank 0), one row per report, read from ``result.json``."""
        if self._dataframe is None and self._run_dir is not None:
            rows = read_results(self._run_dir)
            if rows:
                import pandas as pd

                self._dataframe = pd.DataFrame(rows)
        frame: pd.DataFrame | None = self._dataframe
        return frame

    def get_best_checkpoint(self, metric: str, mode: str) -> Checkpoint | None:
        """The retained checkpoint with the best ``metric`` (``mode`` "max" or "min");
        ``metric`` may name a nested value as ``"outer/inner"``.

        Raises:
            RuntimeError: The run kept no checkpoint, or none was reported with ``metric``
                (a misspelt name, say), as in Ray.
        """
        if not self.best_checkpoints:
            raise RuntimeError(
                "No checkpoint exists in the trial directory! HINT: report a checkpoint "
                "with train.report(metrics, checkpoint=...)"
            )
        if mode not in ("max", "min"):
            raise ValueError(f'mode must be "max" or "min", got {mode!r}')
        scored = [(c, _lookup(m, metric)) for c, m in self.best_checkpoints]
        scored = [(c, value) for c, value in scored if value is not None]
        if not scored:
            reported = sorted({k for _, m in self.best_checkpoints for k in flatten_dict(m)})
            raise RuntimeError(
                f"Invalid metric name {metric!r}! No checkpoint was reported with it. "
                f"HINT: choose one of the metrics reported with the checkpoints: {reported}"
            )
        pick = max if mode == "max" else min
        return pick(scored, key=lambda item: item[1])[0]

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], storage_filesystem: Any = None) -> Result:
        """Read the result of the run whose directory is ``path``.

        ``storage_filesystem`` is a ``pyarrow.fs.FileSystem`` (or an fsspec one) when
        ``path`` is a path on it, without a URI prefix, as Ray takes it.

        Raises:
            RunNotFoundError: ``path`` holds no lockstep run (a ``RuntimeError`` as in Ray,
                and a ``FileNotFoundError``).
        """
        run_dir = (
            storage.StorageDir.of(pyarrow_fs.to_fsspec(storage_filesystem), os.fspath(path))
            if storage_filesystem is not None
            else storage.StorageDir.from_uri(path)
        )
        if not run_dir.exists():
            raise RunNotFoundError(
                f"Experiment folder {run_dir.uri} doesn't exist! HINT: pass the run "
                "directory, i.e. storage_path/name (with storage_filesystem= for a path on "
                "a filesystem you give)"
            )
        if not run_dir.exists(storage.STATE_FILE):
            raise RunNotFoundError(
                f"{run_dir.uri!r} holds no lockstep run ({storage.STATE_FILE} is missing). "
                "HINT: pass the run directory, i.e. storage_path/name"
            )
        state = RunState.from_json(run_dir.read_bytes(storage.STATE_FILE))
        rows = read_results(run_dir)
        ledger = read_ledger(run_dir)
        return cls.from_state(
            run_dir,
            state,
            last_metrics=user_metrics(rows[-1]) if rows else None,
            num_to_keep=_num_to_keep(run_dir),
            time=ledger[0] if ledger is not None else None,
        )

    @classmethod
    def from_state(
        cls,
        run_dir: storage.StorageDir,
        state: RunState,
        *,
        last_metrics: dict[str, Any] | None,
        return_value: Any = None,
        num_to_keep: int | None = None,
        time: TimeLedger | None = None,
    ) -> Result:
        """Build a Result from a run's state snapshot and its last reported metrics."""

        def checkpoint(name: str) -> Checkpoint:
            return Checkpoint(run_dir.join(name), run_dir.fs)

        records = state.checkpoints
        if num_to_keep is not None and len(records) > num_to_keep:
            records = records[-num_to_keep:]  # best last: the latest kept only for restarts
        best = [(checkpoint(r.dir_name), dict(r.metrics)) for r in records]
        return cls(
            metrics=last_metrics,
            checkpoint=checkpoint(state.latest) if state.latest else None,
            best_checkpoints=best,
            path=run_dir.path,
            error=_error_from_state(state),
            return_value=return_value,
            time=time,
            _run_dir=run_dir,
        )


def _lookup(metrics: dict[str, Any], name: str) -> Any:
    """``metrics[name]``, or the nested value ``name`` names as ``"outer/inner"``."""
    if name in metrics:
        return metrics[name]
    return flatten_dict(metrics).get(name)


def _num_to_keep(run_dir: storage.StorageDir) -> int | None:
    """``CheckpointConfig.num_to_keep`` of the run, from its params.json."""
    if not run_dir.exists(storage.PARAMS_FILE):
        return None
    try:
        params = json.loads(run_dir.read_text(storage.PARAMS_FILE))
        value = params["run_config"]["checkpoint_config"]["num_to_keep"]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None


def read_results(run_dir: storage.StorageDir) -> list[dict[str, Any]]:
    """The lines of ``result.json``, oldest first; empty when there are none."""
    if not run_dir.exists(storage.RESULTS_FILE):
        return []
    return parse_result_lines(run_dir.read_text(storage.RESULTS_FILE))


def parse_result_lines(text: str) -> list[dict[str, Any]]:
    """The rows of JSON-lines text; a line cut short by a crash mid-write is skipped."""
    return list(iter_result_lines(text.splitlines()))


def iter_result_lines(lines: Iterable[str | bytes]) -> Iterator[dict[str, Any]]:
    """:func:`parse_result_lines` a line at a time (a file read as it goes)."""
    for line in lines:
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def user_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """A ``result.json`` line without the keys lockstep added to it."""
    return {k: v for k, v in row.items() if k not in storage.RESULT_AUTO_KEYS}


def _error_from_state(state: RunState) -> TrainingFailedError | None:
    if state.error is None:
        return None
    failures = {
        int(rank): WorkerFailure(**record) for rank, record in state.error["failures"].items()
    }
    return TrainingFailedError(state.error["message"], failures)
