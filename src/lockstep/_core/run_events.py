"""The one protocol a run's listeners implement: events as values, answered by a directive.

The controller of every run (a Train run, a Tune trial) emits what happens to it as events:
:class:`RunStarted`, :class:`AttemptStarting`, :class:`WorkersStarted`,
:class:`StepRecorded`, :class:`AttemptFailed`, :class:`RunEnded`, ... Everything that
follows a run listens the same way: the progress display, users' ``UserCallback`` and
Tune ``Callback`` hooks (through the adapters in ``callback.py``), the Tuner's link to its
trial. A listener answers :class:`StepRecorded` with a :class:`Directive`: Tune's
schedulers stop or pause a trial that way, and the controller carries it out as a
transition of its own.
"""

from __future__ import annotations

import datetime
import enum
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lockstep._core.callback import RunContext
    from lockstep._core.checkpoint import Checkpoint
    from lockstep._core.errors import WorkerFailure
    from lockstep._core.result import Result


class Directive(enum.Enum):
    """What a listener wants done with the run after a step: go on, stop it (it ends as
    finished, as a Tune trial a scheduler stops), or pause it (it ends restorable, as a
    trial a scheduler pauses or exploits)."""

    CONTINUE = "continue"
    STOP = "stop"
    PAUSE = "pause"


@dataclass(frozen=True)
class RunEvent:
    """Something that happened to the run ``run``."""

    run: RunContext


@dataclass(frozen=True)
class RunStarted(RunEvent):
    """``fit()`` began; ``resumed_from`` names the checkpoint it continues from."""

    resumed_from: str | None
    iteration: int


@dataclass(frozen=True)
class AttemptStarting(RunEvent):
    """The workers of attempt ``run.attempt`` are about to start."""

    num_workers: int


@dataclass(frozen=True)
class WorkersStarted(RunEvent):
    """Every worker of the attempt was started."""


@dataclass(frozen=True)
class WorkerEnded(RunEvent):
    """Worker ``rank`` returned or failed."""

    rank: int


@dataclass(frozen=True)
class StepBegin(RunEvent):
    """The controller is about to take a step (Tune's ``on_step_begin``)."""


@dataclass(frozen=True)
class StepEnd(RunEvent):
    """The controller took a step (Tune's ``on_step_end``); the display refreshes."""


@dataclass(frozen=True)
class StepRecorded(RunEvent):
    """Every worker reported step ``iteration`` and its row is logged (its checkpoint, if
    any, committed).

    Attributes:
        iteration: The run's ``training_iteration`` of the step.
        worker_metrics: Every rank's metrics, in rank order; rank 0's are the run's.
        checkpoint: The committed checkpoint, or None.
        row: The logged row: the metrics with ``training_iteration``, ``timestamp``,
            ``time_total_s`` and ``checkpoint_dir_name``.
        clock: Where the row's times stand against the run's restore point, for the
            keys Tune adds (see :func:`tune_result`).
        ledger: The run's time ledger figures up to now, computed when asked (see
            :attr:`time`).
    """

    iteration: int
    worker_metrics: Sequence[Mapping[str, Any]]
    checkpoint: Checkpoint | None
    row: Mapping[str, Any]
    clock: ResultClock = field(repr=False)
    ledger: Callable[[], Mapping[str, float]] | None = field(default=None, repr=False)

    @property
    def metrics(self) -> Mapping[str, Any]:
        """Rank 0's metrics."""
        return self.worker_metrics[0]

    @property
    def time(self) -> Mapping[str, float] | None:
        """Where the run's time went so far (``TimeLedger.as_dict()``: seconds by
        category, and the goodput), or None."""
        return self.ledger() if self.ledger is not None else None


@dataclass(frozen=True)
class AttemptFailed(RunEvent):
    """The attempt's workers failed; ``restarting`` says whether the run goes on."""

    failures: Mapping[int, WorkerFailure]
    restarting: bool
    summary: str


@dataclass(frozen=True)
class Resizing(RunEvent):
    """An elastic run restarts at another size, its capacity having changed."""

    old: int
    new: int


@dataclass(frozen=True)
class Notice(RunEvent):
    """A line worth showing on its own (a preemption on its way)."""

    text: str


@dataclass(frozen=True)
class RunEnded(RunEvent):
    """The run ended: ``outcome`` is ``"finished"``, ``"failed"`` or ``"stopped"``
    (restorable); ``result`` is None only when the driver itself failed."""

    outcome: str
    result: Result | None
    error: BaseException | None
    stopped: str | None = None  # after a stop: where it stopped


class RunListener(Protocol):
    """Anything that follows a run: one method, called with every event it listens to."""

    def on_event(self, event: RunEvent) -> Directive | None: ...


class Listeners:
    """Every listener of one run, called in order; an exception in one ends the run, as
    an exception in a callback does in Ray.

    Each listener may say which event types it takes (``events``, a tuple of classes);
    one that does not takes them all. :meth:`wants` lets the controller skip building an
    event nobody takes (a step's, thousands a second).
    """

    def __init__(self, listeners: Sequence[RunListener]) -> None:
        self._listeners = list(listeners)
        self._by_type: dict[type[RunEvent], list[RunListener]] = {}

    def wants(self, kind: type[RunEvent]) -> bool:
        return bool(self._takers(kind))

    def decide_on(self, kind: type[RunEvent]) -> bool:
        """Whether a listener of ``kind`` may answer other than CONTINUE (one that only
        shows what happened says ``decides = False``): only then must the event come
        before what it could stop."""
        return any(getattr(listener, "decides", True) for listener in self._takers(kind))

    def emit(self, event: RunEvent) -> Directive:
        """Call every listener of ``event``; the strongest directive wins (stop over
        pause over continue)."""
        decided = Directive.CONTINUE
        for listener in self._takers(type(event)):
            answer = listener.on_event(event)
            if answer is Directive.STOP or (
                answer is Directive.PAUSE and decided is not Directive.STOP
            ):
                decided = answer
        return decided

    def _takers(self, kind: type[RunEvent]) -> list[RunListener]:
        takers = self._by_type.get(kind)
        if takers is None:
            takers = [
                listener
                for listener in self._listeners
                if issubclass(kind, getattr(listener, "events", (RunEvent,)))
            ]
            self._by_type[kind] = takers
        return takers


@dataclass(frozen=True)
class ResultClock:
    """Where a run's row stands for Tune's time keys: the time of the step before it and
    the iteration and time the run (re)started at."""

    previous_time_total_s: float
    restored_iteration: int
    restored_time_total_s: float


def tune_result(
    row: Mapping[str, Any],
    clock: ResultClock,
    *,
    trial_id: str,
    config: Mapping[str, Any],
    time: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The result dict Tune's callbacks, schedulers and searchers see for a logged row:
    the row plus the keys Ray Tune adds to every report, and, given the run's time
    ledger ``time``, its figures as metrics of their own: ``goodput`` and
    ``time_<category>_s`` (``time_training_s``, ``time_data_wait_s``, ...), unless the
    row has a metric of that name. Built here alone, for Train runs and Tune trials alike.

    Example:
        >>> clock = ResultClock(previous_time_total_s=1.5, restored_iteration=0,
        ...                     restored_time_total_s=0.0)
        >>> row = {"loss": 0.1, "training_iteration": 2, "timestamp": 1700000000.0,
        ...        "time_total_s": 2.0, "checkpoint_dir_name": None}
        >>> result = tune_result(row, clock, trial_id="t1", config={"lr": 0.1})
        >>> result["time_this_iter_s"], result["iterations_since_restore"], result["config"]
        (0.5, 2, {'lr': 0.1})
    """
    total = float(row.get("time_total_s", 0.0))
    iteration = int(row.get("training_iteration", 0))
    result = dict(row)
    result.update(
        {
            "done": False,
            "trial_id": trial_id,
            "date": datetime.datetime.fromtimestamp(float(row.get("timestamp", 0.0))).strftime(
                "%Y-%m-%d_%H-%M-%S"
            ),
            "time_this_iter_s": total - clock.previous_time_total_s,
            "time_since_restore": total - clock.restored_time_total_s,
            "iterations_since_restore": iteration - clock.restored_iteration,
            "pid": os.getpid(),
            "hostname": _HOST.name,
            "node_ip": _HOST.ip,
            "config": dict(config),
        }
    )
    if time is not None:
        for key, value in time.items():
            result.setdefault(key if key == "goodput" else f"time_{key}_s", value)
    return result


class _Host:
    """This machine's name and address, looked up once (a lookup may take a while)."""

    @property
    def name(self) -> str:
        return socket.gethostname()

    @property
    def ip(self) -> str:
        if not hasattr(self, "_ip"):
            try:
                self._ip = socket.gethostbyname(socket.gethostname())
            except OSError:
                self._ip = "127.0.0.1"
        return self._ip


_HOST = _Host()
