"""Errors a user sees, and the record of one worker's failure."""

from __future__ import annotations

import signal
from dataclasses import dataclass


class UsageError(ValueError):
    """Raised inside a worker for a misuse of the session API (a bad report, say).

    Retrying cannot fix a misuse, so the failure policy raises it at once instead of
    restarting the workers.
    """


class UsageKeyError(UsageError, KeyError):
    """A misuse that names something unknown (a dataset, say); a KeyError, as in Ray."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # not KeyError's quoted repr


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
        time: Wall-clock time (``time.time()``) at which the failure happened or was seen.
        retryable: False for failures a restart cannot fix (a misuse of the API).
        exception: The exception raised in the worker when it could be sent back, else None.
        full_traceback: The traceback with lockstep's own frames too, for the error file.
    """

    rank: int
    pid: int | None
    kind: str
    summary: str
    traceback: str = ""
    exit_code: int | None = None
    time: float
    retryable: bool = True
    exception: BaseException | None = None
    full_traceback: str = ""

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


class TrainingFailedError(RuntimeError):
    """Training failed after using up ``FailureConfig.max_failures`` restarts.

    The message starts with the root cause, the first failure by time, followed by the
    user's traceback.

    Attributes:
        root_cause: The first failure by time.
        worker_failures: Every failure of the last attempt, by rank.
    """

    def __init__(self, message: str, worker_failures: dict[int, WorkerFailure]) -> None:
        super().__init__(message)
        self.worker_failures = worker_failures
        self.root_cause = min(worker_failures.values(), key=lambda f: f.time)

    def __reduce__(self) -> tuple[type[TrainingFailedError], tuple[str, dict[int, WorkerFailure]]]:
        return (type(self), (str(self), self.worker_failures))

    @classmethod
    def from_failures(
        cls, failures: dict[int, WorkerFailure], *, attempts: int, error_file: str | None = None
    ) -> TrainingFailedError:
        """Build the error whose message leads with the first failure by time, then its
        user's traceback; ``error_file``, where the full text goes, is named last."""
        first = min(failures.values(), key=lambda f: f.time)
        lines = [f"Training failed: {first.summary}"]
        if attempts > 1:
            lines[0] += f" (after {attempts - 1} restart{'s' if attempts > 2 else ''})"
        if first.traceback:
            lines += ["", first.traceback.rstrip()]
        others = [f for r, f in sorted(failures.items()) if f is not first]
        if others:
            lines += ["", "Other workers:"] + [f"  {f.summary}" for f in others]
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
