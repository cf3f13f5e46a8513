"""What a function trainable calls: ``tune.report``, ``tune.get_checkpoint``, ``get_context``.

A function trial runs in a thread of the driver. Its session is installed for that thread
both here and as the training session, so ``lockstep.train.report`` works in it as well.
Inside a trainer's workers (a trainer trial) the calls go to the trainer's own session.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockstep import train
from lockstep._core import storage
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig
from lockstep._core.context import TrainContext


class TrialStopped(BaseException):
    """Raised in a trial's thread at its next report when the trial is to stop."""


class TrialPaused(BaseException):
    """Raised in a trial's thread at its next report when the trial is to pause."""


@dataclass(frozen=True, kw_only=True)
class TuneContext(TrainContext):
    """What a trial knows about itself: ``get_trial_id()``, ``get_trial_name()``, ...

    Example:
        >>> ctx = TuneContext(world_rank=0, world_size=1, local_rank=0, local_world_size=1,
        ...                   node_rank=0, experiment_name="exp", trial_id="a_00000",
        ...                   trial_name="objective_a_00000")
        >>> ctx.get_trial_id(), ctx.get_trial_name()
        ('a_00000', 'objective_a_00000')
    """

    trial_id: str = ""
    trial_name: str = ""
    trial_resources: dict[str, float] | None = None

    def get_trial_id(self) -> str:
        """The trial's id, unique in the experiment."""
        return self.trial_id

    def get_trial_name(self) -> str:
        """The trial's name."""
        return self.trial_name

    def get_trial_resources(self) -> dict[str, float]:
        """The CPUs and GPUs the trial was given."""
        return dict(self.trial_resources or {})


# Called with (result, checkpoint) in the trial's thread; returns the runner's decision.
ReportFn = Callable[[dict[str, Any], Checkpoint | None], Any]


class FunctionSession:
    """One function trial's link to the Tuner: reports are written, then decided on."""

    def __init__(
        self,
        *,
        run_dir: storage.StorageDir,
        context: TuneContext,
        start_iteration: int,
        checkpoint: Checkpoint | None,
        time_offset: float,
        on_report: ReportFn,
        checkpoint_config: CheckpointConfig | None = None,
    ) -> None:
        self.context = context
        self._checkpoint_config = checkpoint_config or CheckpointConfig()
        self._run_dir = run_dir
        self._iteration = start_iteration
        self._latest = checkpoint
        self._next_index = _next_checkpoint_index(run_dir)
        # Retained checkpoints and their metrics, oldest first (earlier runs' without).
        self._kept: list[tuple[str, dict[str, Any]]] = [(n, {}) for n in _checkpoint_names(run_dir)]
        self._started = time.monotonic() - time_offset
        self._on_report = on_report
        self.num_reports = 0

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
        clean = _clean(metrics)
        self._iteration += 1
        committed = self._commit(checkpoint, clean) if checkpoint is not None else None
        result = {
            **clean,
            "training_iteration": self._iteration,
            "trial_id": self.context.trial_id,
            "timestamp": time.time(),
            "time_total_s": time.monotonic() - self._started,
            "checkpoint_dir_name": os.path.basename(committed.path) if committed else None,
        }
        self._run_dir.append_text(storage.RESULTS_FILE, json.dumps(result, default=str) + "\n")
        self.num_reports += 1
        decision = self._on_report(result, committed)
        from lockstep.tune.schedulers._base import Exploit, TrialScheduler

        if decision == TrialScheduler.STOP:
            raise TrialStopped()
        if decision == TrialScheduler.PAUSE or isinstance(decision, Exploit):
            raise TrialPaused()

    def _commit(self, checkpoint: Checkpoint, metrics: dict[str, Any]) -> Checkpoint:
        if not isinstance(checkpoint, Checkpoint):
            raise ValueError(
                f"report(checkpoint=...) takes a Checkpoint, got {type(checkpoint).__name__}. "
                "HINT: checkpoint=Checkpoint.from_directory(dir)"
            )
        name = storage.checkpoint_dir_name(self._next_index)
        staged = f"{storage.STAGING_DIR}/{name}"
        with checkpoint.as_directory() as local_dir:
            self._run_dir.upload_dir(local_dir, staged)
        # One rename: a checkpoint directory is either whole or absent.
        self._run_dir.move(staged, name)
        self._next_index += 1
        self._latest = Checkpoint(self._run_dir.join(name), self._run_dir.fs)
        self._kept.append((name, metrics))
        self._retain()
        return self._latest

    def _retain(self) -> None:
        """Keep ``num_to_keep`` checkpoints, the best by score (or the newest), and the
        latest, which a restart resumes from."""
        config = self._checkpoint_config
        keep = config.num_to_keep
        if keep is None or len(self._kept) <= keep:
            return
        attribute = config.checkpoint_score_attribute
        ranked = list(self._kept)  # newest last
        if attribute is not None:
            sign = 1 if config.checkpoint_score_order == "max" else -1
            ranked.sort(key=lambda item: sign * float(item[1].get(attribute, -sign * math.inf)))
        best = {name for name, _ in ranked[-keep:]}
        latest = self._kept[-1][0]
        for name, _ in list(self._kept):
            if name not in best and name != latest:
                self._run_dir.remove(name)
                self._kept = [item for item in self._kept if item[0] != name]

    def get_checkpoint(self) -> Checkpoint | None:
        return self._latest

    def get_dataset_shard(self, name: str | None = None) -> Any:
        raise RuntimeError(
            "get_dataset_shard() has no datasets in a function trainable. HINT: pass data "
            "with tune.with_parameters(fn, data=...), or tune a trainer with datasets="
        )


def _checkpoint_names(run_dir: storage.StorageDir) -> list[str]:
    if not run_dir.exists():
        return []
    return sorted(n for n in run_dir.listdir() if n.startswith(storage.CHECKPOINT_PREFIX))


def _next_checkpoint_index(run_dir: storage.StorageDir) -> int:
    names = _checkpoint_names(run_dir)
    return max((int(n[len(storage.CHECKPOINT_PREFIX) :]) for n in names), default=-1) + 1


def _clean(metrics: Any) -> dict[str, Any]:
    if not isinstance(metrics, dict):
        raise ValueError(
            f"report() takes a dict of metrics, got {type(metrics).__name__}. "
            'HINT: tune.report({"loss": loss})'
        )
    clean: dict[str, Any] = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and callable(value.item):
            value = value.item()  # numpy and torch scalars
        clean[str(key)] = value
    return clean


_local = threading.local()


def install(session: FunctionSession | None) -> None:
    """Make ``session`` this thread's, for tune's and train's session functions."""
    from lockstep._internal.execution.worker import session as train_session

    _local.session = session
    train_session.install(session, process_wide=False)  # type: ignore[arg-type]


def current() -> FunctionSession | None:
    return getattr(_local, "session", None)


def report(
    metrics: dict[str, Any] | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    **kwargs: Any,
) -> None:
    """Report a trial's metrics (and optionally a checkpoint) to the Tuner.

    Inside a trainer's training function it is ``lockstep.train.report``. The older form
    ``tune.report(loss=0.1)`` is accepted too.

    Example:
        >>> import tempfile
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"score": config["x"] ** 2})
        >>> with tempfile.TemporaryDirectory() as d:
        ...     results = tune.Tuner(objective, param_space={"x": tune.grid_search([1, 2])},
        ...         run_config=tune.RunConfig(storage_path=d, verbose=0)).fit()
        >>> sorted(r.metrics["score"] for r in results)
        [1, 4]
    """
    merged = {**(metrics or {}), **kwargs}
    session = current()
    if session is None:
        train.report(merged, checkpoint=checkpoint)
        return
    session.report(merged, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint the trial resumes from (its own latest, or a PBT donor's), or None.

    Example:
        >>> from lockstep import tune
        >>> def objective(config):
        ...     start = 0 if tune.get_checkpoint() is None else 1
        ...     tune.report({"start": start})
    """
    session = current()
    if session is None:
        return train.get_checkpoint()
    return session.get_checkpoint()


def get_context() -> TrainContext:
    """The trial's context: ``get_trial_id()``, ``get_trial_name()``, ``get_trial_dir()``.

    Example:
        >>> from lockstep import tune
        >>> def objective(config):
        ...     tune.report({"id": tune.get_context().get_trial_id()})
    """
    session = current()
    if session is None:
        return train.get_context()
    return session.context
