"""Errors a user sees, and the record of one worker's failure."""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from time import time as _now

# What a worker raises when a peer is gone or stuck: the symptom of a failure elsewhere
# (gloo's and NCCL's words, Python's socket errors, a collective that timed out).
_CONSEQUENCE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|ConnectionResetError|"
    r"BrokenPipeError|ConnectionAbortedError|DistBackendError|"
    r"NCCL communicator was aborted|Watchdog caught collective operation timeout|"
    r"[Tt]imed out (?:waiting|after)|[Cc]ollective operation time(?:d )?out|"
    r"Socket Timeout|ProcessGroupGloo.*(?:[Cc]losed|[Tt]imeout)",
)


class UsageError(ValueError):
    """Raised inside a worker for a misuse of the session API (a bad report, say).

    Retrying cannot fix a misuse, so the failure policy raises it at once instead of
    restarting the workers.
    """


class UsageKeyError(UsageError, KeyError):
    """A misuse that names something unknown (a dataset, say); a KeyError, as in Ray."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # not KeyError's quoted repr


class NotPicklableError(ValueError, TypeError):
    """Something sent to the workers cannot be pickled; a TypeError, as Ray raises it for a
    training function that cannot be serialized, and a ValueError."""


class RunNotFoundError(FileNotFoundError, RuntimeError):
    """A path holds no run; a RuntimeError, as Ray raises it, and a FileNotFoundError."""


@dataclass(frozen=True, kw_only=True)
class WorkerFailure:
    """What is known about one worker's failure: who, how, when, and the user's traceback.

    Attributes:
        rank: World rank of the worker.
        pid: Process id of the worker, or None when it never started.
        kind: ``"exception"``, ``"exit"`` (the process ended on its own) or ``"signal"``.
        summary: One line, e.g. ``"rank 1 (pid 4242) was killed by SIGKILL"``.
        traceback: The user's traceback for an exception; empty otherwise.
        exit_code: The process exit code, when the process ended.
        time: Wall-clock time (``time.time()``) at which the failure happened or was seen;
            now, by default.
        retryable: False for failures a restart cannot fix (a misuse of the API).
        exception: The exception raised in the worker when it could be sent back, else None.
        full_traceback: The traceback with lockstep's own frames too, for the error file.
        output: The worker's last lines of output (stdout and stderr), oldest first.
    """

    rank: int
    pid: int | None
    kind: str
    summary: str
    traceback: str = ""
    exit_code: int | None = None
    time: float = field(default_factory=_now)
    retryable: bool = True
    exception: BaseException | None = None
    full_traceback: str = ""
    output: tuple[str, ...] = ()

    @property
    def is_consequence(self) -> bool:
        """Whether this failure looks like the effect of another worker's failure: an
        exception about a closed connection or a timed-out collective."""
        if self.kind != "exception":
            return False
        last_line = self.traceback.rstrip().rsplit("\n", 1)[-1]
        return bool(_CONSEQUENCE.search(self.summary) or _CONSEQUENCE.search(last_line))

    @staticmethod
    def describe_exit(rank: int, pid: int | None, returncode: int) -> tuple[str, str]:
        """Return ``(kind, summary)`` for a process that ended with ``returncode``."""
        who = f"rank {rank} (pid {pid})"
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            return "signal", f"{who} was killed by {name}"
        return "exit", (
            f"{who} exited with code {returncode} before its training function returned"
        )


def last_output_header(failure: WorkerFailure) -> str:
    """``"Last 20 lines of output of rank 1 (pid 4242):"``."""
    n = len(failure.output)
    lines = f"{n} lines" if n != 1 else "line"
    return f"Last {lines} of output of rank {failure.rank} (pid {failure.pid}):"


def root_cause(failures: Mapping[int, WorkerFailure]) -> WorkerFailure:
    """The failure that happened first, the one that caused the others.

    torch.distributed.elastic's rule, made robust to the order in which the driver hears
    of failures: a worker's death (its time is when the process watcher saw it) or an
    exception (its time is when it was raised) comes before the peers' errors it causes,
    a closed connection or a timed-out collective, whatever their timestamps.

    Example:
        >>> died = WorkerFailure(rank=1, pid=8, kind="signal", time=2.0,
        ...                      summary="rank 1 (pid 8) was killed by SIGKILL")
        >>> peer = WorkerFailure(rank=0, pid=7, kind="exception", time=1.0,
        ...                      summary="rank 0 (pid 7) raised RuntimeError: "
        ...                              "Connection closed by peer [127.0.0.1]:4242")
        >>> root_cause({0: peer, 1: died}).pid
        8
    """
    causes = [f for f in failures.values() if not f.is_consequence] or list(failures.values())
    return min(causes, key=lambda f: f.time)


def awaiting_root_cause(failures: Mapping[int, WorkerFailure], num_running: int) -> bool:
    """Whether every failure seen so far is a consequence, and of the ``num_running``
    workers that have not returned one is left whose failure may be the cause."""
    consequences = all(f.is_consequence for f in failures.values())
    return bool(failures) and consequences and len(failures) < num_running


class TrainingFailedError(RuntimeError):
    """Training failed after using up ``FailureConfig.max_failures`` restarts.

    The message starts with the root cause (see :func:`root_cause`), followed by the
    user's traceback, then the consequences on other workers.

    Attributes:
        root_cause: The failure that happened first and caused the others.
        worker_failures: Every failure of the last attempt, by rank.
    """

    def __init__(self, message: str, worker_failures: dict[int, WorkerFailure]) -> None:
        super().__init__(message)
        self.worker_failures = worker_failures
        self.root_cause = root_cause(worker_failures)

    def __reduce__(self) -> tuple[type[TrainingFailedError], tuple[str, dict[int, WorkerFailure]]]:
        return (type(self), (str(self), self.worker_failures))

    @classmethod
    def from_failures(
        cls, failures: dict[int, WorkerFailure], *, attempts: int, error_file: str | None = None
    ) -> TrainingFailedError:
        """Build the error whose message leads with the root cause (see :func:`root_cause`),
        then its user's traceback, then the consequences on other workers; ``error_file``,
        where the full text goes, is named last."""
        first = root_cause(failures)
        lines = [f"Training failed: {first.summary}"]
        if attempts > 1:
            lines[0] += f" (after {attempts - 1} restart{'s' if attempts > 2 else ''})"
        if first.traceback:
            lines += ["", first.traceback.rstrip()]
        if first.output:
            lines += ["", last_output_header(first)] + [f"  {line}" for line in first.output]
        others = [f for r, f in sorted(failures.items()) if f is not first]
        consequences = [f for f in others if f.is_consequence]
        if consequences:
            lines += ["", "Consequences on other workers:"]
            lines += [f"  {f.summary}" for f in consequences]
        if unrelated := [f for f in others if not f.is_consequence]:
            lines += ["", "Other workers:"] + [f"  {f.summary}" for f in unrelated]
        if error_file is not None:
            lines += ["", f"The full error, every worker's traceback included: {error_file}"]
        if cls is TrainingFailedError:  # Ray's subclasses: who failed, workers or controller
            started = any(f.kind != "start" for f in failures.values())
            cls = WorkerGroupError if started else ControllerError
        error = cls("\n".join(lines), failures)
        # As Ray chains it: the worker's own exception, rebuilt here, is the cause.
        error.__cause__ = first.exception
        return error


class WorkerGroupError(TrainingFailedError):
    """The workers failed: an exception in the training function, a death, a misuse.

    ``fit()`` raises it once ``FailureConfig.max_failures`` restarts are used up;
    ``__cause__`` is the exception the failing worker raised, when it could be sent back.

    Example:
        >>> issubclass(WorkerGroupError, TrainingFailedError)
        True
    """


class ControllerError(TrainingFailedError):
    """The run failed outside the training function: the workers could not be started.

    Example:
        >>> issubclass(ControllerError, TrainingFailedError)
        True
    """


class TrainingInterrupted(SystemExit, KeyboardInterrupt):
    """The run was stopped on request (Ctrl-C) after its workers were stopped.

    The committed checkpoints stay and the run can be continued. Left uncaught, it ends
    the program quietly with exit code 130, as a shell does after Ctrl-C; it is also a
    KeyboardInterrupt, so ``except KeyboardInterrupt`` catches it.

    Attributes:
        reason: What asked for the stop, e.g. ``"Ctrl-C"``.
        path: The run directory.
        training_iteration: The steps recorded before the stop.
        latest_checkpoint: The latest committed checkpoint's directory name, or None.
    """

    EXIT_CODE = 130

    def __init__(
        self, *, reason: str, path: str, training_iteration: int, latest_checkpoint: str | None
    ) -> None:
        super().__init__(self.EXIT_CODE)
        self.reason = reason
        self.path = path
        self.training_iteration = training_iteration
        self.latest_checkpoint = latest_checkpoint

    def __str__(self) -> str:
        kept = f", latest checkpoint {self.latest_checkpoint}" if self.latest_checkpoint else ""
        return (
            f"stopped by {self.reason} at iteration {self.training_iteration}{kept}; "
            f"run in {self.path}"
        )
