"""Failures to inject into a training function, to test that a run recovers from them."""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lockstep import train
from lockstep._core.storage import StorageDir

FaultKind = Literal["raise", "exit", "signal", "kill", "hang", "slow", "preempt"]
KINDS: tuple[str, ...] = ("raise", "exit", "signal", "kill", "hang", "slow", "preempt")
FAULTS_DIR = ".faults"


class InjectedFailure(RuntimeError):
    """The exception a ``Fault(kind="raise")`` raises."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    """A failure on one rank at one epoch (or step), injected at most ``times`` times per run.

    The training function calls :meth:`fire_if_due` with its epoch or step number (as
    :func:`train_epochs` does); the fault fires on its rank when that number is
    ``at_epoch``. The count is kept in the run directory (``.faults/``), so that the workers
    a restart brings up do not fail again once the budget is spent: each firing is a file
    there, with its time (see :func:`fired_faults`).

    Args:
        kind: What happens:

            - ``"raise"``: an :class:`InjectedFailure` is raised.
            - ``"exit"``: the process exits at once with ``exit_code`` (``os._exit``).
            - ``"signal"``: the process sends itself ``signum``.
            - ``"kill"``: SIGKILL from outside the training loop: a separate thread kills the
              worker ``seconds`` after the fault is due, while the loop goes on (in its
              ``report()``, a collective or a checkpoint write), as the kernel's OOM killer
              or an operator's ``kill -9`` would.
            - ``"hang"``: the rank sleeps forever (a deadlock); the run needs
              ``FailureConfig(hang_timeout_s=...)`` to notice it.
            - ``"slow"``: the rank sleeps ``seconds``, then goes on (a straggler).
            - ``"preempt"``: SIGTERM to the driver process, as a scheduler (SLURM,
              Kubernetes, a spot instance) sends it: the run stops and can be continued.
              Local processes only.
        rank: The rank that fails.
        at_epoch: The epoch (or step) at which it fails, before reporting it.
        times: How many attempts fail; -1 for every attempt.
        exit_code: The exit code for ``"exit"``.
        signum: The signal for ``"signal"``.
        seconds: For ``"slow"``, how long the rank sleeps; for ``"kill"``, how long after
            the fault is due the SIGKILL lands.
        driver_pid: For ``"preempt"``, the process to send SIGTERM to; by default the
            driver that started the worker.

    Example:
        >>> Fault(kind="exit", rank=1, at_epoch=2, exit_code=3).kind
        'exit'
        >>> fault = Fault.random(["raise", "kill"], num_workers=2, num_epochs=10, seed=7)
        >>> fault.kind, fault.rank, fault.at_epoch
        ('kill', 0, 6)
    """

    kind: FaultKind
    rank: int = 0
    at_epoch: int = 0
    times: int = 1
    exit_code: int = 1
    signum: int = signal.SIGKILL
    seconds: float = 0.0
    driver_pid: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"unknown fault kind {self.kind!r}. HINT: use one of {', '.join(KINDS)}"
            )
        for name, minimum in (("rank", 0), ("at_epoch", 0), ("times", -1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"Fault.{name} must be an integer >= {minimum}, got {value!r}. "
                    f"HINT: {name}={max(minimum, 0)}"
                )
        if self.seconds < 0 or (self.kind == "slow" and self.seconds == 0):
            raise ValueError(
                f"Fault(kind={self.kind!r}) got seconds={self.seconds!r}. HINT: give the "
                "seconds a slow rank sleeps (> 0), or a kill's delay (>= 0)"
            )

    @classmethod
    def random(
        cls,
        kinds: str | Sequence[str],
        *,
        num_workers: int,
        num_epochs: int,
        seed: int | random.Random,
        rank: int | None = None,
        **options: Any,
    ) -> Fault:
        """A fault of a kind drawn from ``kinds``, at an epoch drawn from
        ``range(num_epochs)``, on ``rank`` (drawn from ``range(num_workers)`` when None).

        The draws come from ``seed`` (an int, or a :class:`random.Random` to draw several
        faults from one sequence): the same seed gives the same fault. ``options`` are
        further fields (``times``, ``seconds``, ...).

        Example:
            >>> rng = random.Random(0)
            >>> faults = [Fault.random(["raise", "exit"], num_workers=2, num_epochs=8,
            ...                        seed=rng) for _ in range(3)]
            >>> [(f.kind, f.rank, f.at_epoch) for f in faults]
            [('exit', 1, 0), ('exit', 1, 6), ('exit', 1, 5)]
        """
        rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        kind = kinds if isinstance(kinds, str) else rng.choice(list(kinds))
        drawn_rank = rng.randrange(num_workers) if rank is None else rank
        return cls(kind=kind, rank=drawn_rank, at_epoch=rng.randrange(num_epochs), **options)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        """What the fault's count is kept under in ``.faults/``."""
        return f"{self.kind}-rank{self.rank}-epoch{self.at_epoch}"

    def fire_if_due(self, epoch: int) -> None:
        """Fail now if this worker and ``epoch`` are the ones this fault is for."""
        context = train.get_context()
        if context.get_world_rank() != self.rank or epoch != self.at_epoch:
            return
        run_dir = StorageDir.from_uri(context.get_trial_dir())
        if not self._claim(run_dir):
            return
        if self.kind == "kill":
            _kill_later(self.seconds, f"lockstep-fault-{self.name}")
            return
        _FIRE[self.kind](self)

    def _claim(self, run_dir: StorageDir) -> bool:
        """Record this firing, unless the budget is spent. The record is the claim: a
        worker stopped right after it (by a peer's failure) cannot lose a firing."""
        # The run directory may be remote (s3://...): go through its storage, never os.
        folder = run_dir.child(FAULTS_DIR)
        prefix = f"{self.name}-"
        fired = sum(n.startswith(prefix) and n.endswith(".json") for n in folder.listdir())
        if self.times != -1 and fired >= self.times:
            return False
        event = {
            "kind": self.kind,
            "rank": self.rank,
            "epoch": self.at_epoch,
            "pid": os.getpid(),
            # a kill's time is when it lands
            "time": time.time() + (self.seconds if self.kind == "kill" else 0.0),
        }
        folder.makedirs()
        folder.write_atomic(f"{prefix}{fired + 1}.json", json.dumps(event).encode())
        return True


def _raise(fault: Fault) -> None:
    raise InjectedFailure(f"injected failure on rank {fault.rank} at epoch {fault.at_epoch}")


def _exit(fault: Fault) -> None:
    os._exit(fault.exit_code)


def _signal(fault: Fault) -> None:
    os.kill(os.getpid(), fault.signum)


def _hang(fault: Fault) -> None:
    while True:
        time.sleep(3600)


def _slow(fault: Fault) -> None:
    time.sleep(fault.seconds)


def _preempt(fault: Fault) -> None:
    driver = fault.driver_pid or _driver_pid()
    if driver == os.getpid():
        raise RuntimeError(
            "Fault(kind='preempt') would stop the process it runs in. HINT: run the "
            "workers as processes (num_workers >= 1, ScalingConfig(executor='process'))"
        )
    os.kill(driver, signal.SIGTERM)


_FIRE = {
    "raise": _raise,
    "exit": _exit,
    "signal": _signal,
    "hang": _hang,
    "slow": _slow,
    "preempt": _preempt,
}


def _kill_later(seconds: float, name: str) -> None:
    """SIGKILL this worker from another thread after ``seconds``: the kill lands wherever
    the training loop is by then, not at a point of its choosing."""
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGKILL))
    timer.name = name
    timer.daemon = True
    timer.start()


def _driver_pid() -> int:
    """The driver that started this worker: the parent, or the parent's parent when the
    parent is lockstep's fork server (a fork of the driver: the same command line)."""
    parent = os.getppid()
    try:
        grandparent = _parent_of(parent)
        if _cmdline(parent) == _cmdline(grandparent):
            return grandparent
    except OSError:
        pass
    return parent


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        # the command name (2nd field) may hold spaces and parentheses: split after it
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def fired_faults(run_dir: str) -> list[dict[str, Any]]:
    """Every fault that fired in the run at ``run_dir``, in the order they fired: dicts of
    ``kind``, ``rank``, ``epoch``, ``pid`` and ``time`` (UNIX seconds).

    Example:
        >>> import tempfile
        >>> from lockstep.train import DataParallelTrainer, FailureConfig, RunConfig
        >>> fault = Fault(kind="exit", rank=0, at_epoch=1)
        >>> with tempfile.TemporaryDirectory() as storage:
        ...     result = DataParallelTrainer(
        ...         train_epochs, train_loop_config={"epochs": 3, "faults": [fault]},
        ...         run_config=RunConfig(storage_path=storage, verbose=0,
        ...                              failure_config=FailureConfig(max_failures=1))).fit()
        ...     [(f["kind"], f["rank"], f["epoch"]) for f in fired_faults(result.path)]
        [('exit', 0, 1)]
    """
    folder = StorageDir.from_uri(run_dir).child(FAULTS_DIR)
    events = [json.loads(folder.read_text(n)) for n in folder.listdir() if n.endswith(".json")]
    return sorted(events, key=lambda e: float(e["time"]))


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
