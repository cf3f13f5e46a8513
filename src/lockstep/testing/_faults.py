"""Failures to inject into a training function, to test that a run recovers from them."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lockstep import train
from lockstep._core.storage import StorageDir


class InjectedFailure(RuntimeError):
    """The exception a ``Fault(kind="raise")`` raises."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    """A failure on one rank at one epoch, injected at most ``times`` times per run.

    The count is kept in the run directory (``.faults/``), so that the workers a restart
    brings up do not fail again once the budget is spent.

    Args:
        kind: ``"raise"`` (an exception), ``"exit"`` (``os._exit``), ``"signal"`` (the
            process kills itself with ``signum``) or ``"hang"`` (sleeps forever).
        rank: The rank that fails.
        at_epoch: The epoch at which it fails, before reporting that epoch.
        times: How many attempts fail; -1 for every attempt.
        exit_code: The exit code for ``"exit"``.
        signum: The signal for ``"signal"``.

    Example:
        >>> Fault(kind="exit", rank=1, at_epoch=2, exit_code=3).kind
        'exit'
    """

    kind: Literal["raise", "exit", "signal", "hang"]
    rank: int = 0
    at_epoch: int = 0
    times: int = 1
    exit_code: int = 1
    signum: int = signal.SIGKILL

    def __post_init__(self) -> None:
        if self.kind not in ("raise", "exit", "signal", "hang"):
            raise ValueError(
                f"unknown fault kind {self.kind!r}. HINT: use raise, exit, signal or hang"
            )

    def fire_if_due(self, epoch: int) -> None:
        """Fail now if this worker and ``epoch`` are the ones this fault is for."""
        context = train.get_context()
        if context.get_world_rank() != self.rank or epoch != self.at_epoch:
            return
        if not self._claim(context.get_trial_dir()):
            return
        if self.kind == "raise":
            raise InjectedFailure(f"injected failure on rank {self.rank} at epoch {epoch}")
        if self.kind == "exit":
            os._exit(self.exit_code)
        if self.kind == "signal":
            os.kill(os.getpid(), self.signum)
        while True:  # "hang"
            time.sleep(3600)

    def _claim(self, run_dir: str) -> bool:
        if self.times == -1:
            return True
        # On the run's own storage (s3://... too), never a local path named after a URL.
        folder = StorageDir.from_uri(run_dir).child(".faults")
        folder.makedirs()
        name = f"{self.kind}-rank{self.rank}-epoch{self.at_epoch}"
        fired = int(folder.read_text(name)) if folder.exists(name) else 0
        if fired >= self.times:
            return False
        folder.write_atomic(name, str(fired + 1).encode())
        return True


def train_epochs(config: dict[str, Any]) -> int:
    """A training function with nothing to learn, for testing runs and recovery.

    For each epoch from where the latest checkpoint left off up to ``config["epochs"]``:
    fires ``config["faults"]`` (a list of :class:`Fault`) when due, sleeps
    ``config.get("sleep_s", 0)``, and reports ``{"epoch", "loss", "rank"}`` with a
    checkpoint holding ``epoch.txt`` (written by rank 0) every
    ``config.get("checkpoint_every", 1)`` epochs. Returns the number of epochs it ran.

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig
        >>> from lockstep.train import ScalingConfig
        >>> fault = Fault(kind="raise", rank=1, at_epoch=2)
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     result = DataParallelTrainer(
        ...         train_epochs, train_loop_config={"epochs": 4, "faults": [fault]},
        ...         scaling_config=ScalingConfig(num_workers=2),
        ...         run_config=RunConfig(storage_path=storage, verbose=0,
        ...                              failure_config=FailureConfig(max_failures=1))).fit()
        >>> result.metrics["epoch"], result.return_value  # the restart ran epochs 2 and 3
        (3, 2)
    """
    faults: Sequence[Fault] = config.get("faults", ())
    every = int(config.get("checkpoint_every", 1))
    rank = train.get_context().get_world_rank()
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as d:
            start = int(_read(os.path.join(d, "epoch.txt"))) + 1
    for epoch in range(start, config["epochs"]):
        for fault in faults:
            fault.fire_if_due(epoch)
        time.sleep(config.get("sleep_s", 0.0))
        metrics = {"epoch": epoch, "loss": 1.0 / (epoch + 1), "rank": rank}
        if (epoch + 1) % every:
            train.report(metrics)
            continue
        with tempfile.TemporaryDirectory(prefix="lockstep-test-") as d:
            if rank == 0:
                with open(os.path.join(d, "epoch.txt"), "w") as f:
                    f.write(str(epoch))
            train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
    return int(config["epochs"]) - start


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
