"""Progress on the terminal: a live line on a TTY, plain lines otherwise, nothing at verbose=0.

Verbose levels follow Ray's: 0 silent; 1 the start, a status line and the summary; 2 also one
line per report with the chosen metrics; 3 one line per report with every metric.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from lockstep._core import flags
from lockstep._core.time_ledger import TimeLedger, format_duration

MAX_METRICS = 3  # a status line is read at a glance: a few numbers, not a table
LIVE_INTERVAL_S = 0.1  # the live line changes at most this often (rich redraws 4 times a second)


@dataclass(frozen=True)
class RunSummary:
    """What the last lines say about a run that ended."""

    outcome: str  # "finished", "failed", "stopped" (on request), "interrupted" (an exception)
    best_checkpoint: str | None = None
    best_metrics: dict[str, Any] | None = None
    stopped: str | None = None  # where a stopped run is, e.g. "stopped by Ctrl-C at ..."
    time: TimeLedger | None = None  # where the run's time went


def choose_metrics(
    metrics: dict[str, Any], chosen: Sequence[str] | None, score_attribute: str | None
) -> list[str]:
    """The names shown on the status line: the user's choice, or else the checkpoint score
    attribute and the losses, then other numbers, at most :data:`MAX_METRICS`.

    Example:
        >>> choose_metrics({"epoch": 1, "acc": 0.9, "val_loss": 0.2, "loss": 0.3}, None, "acc")
        ['acc', 'val_loss', 'loss']
    """
    if chosen is not None:
        return [name for name in chosen if name in metrics]
    numbers = [k for k, v in metrics.items() if _is_number(v)]
    first = [score_attribute] if score_attribute in numbers else []
    losses = [k for k in numbers if "loss" in k.lower() and k not in first]
    rest = [k for k in numbers if k not in first and k not in losses]
    return (first + losses + rest)[:MAX_METRICS]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_metrics(metrics: dict[str, Any], names: Sequence[str]) -> str:
    """``name=value`` pairs, floats to 4 significant digits.

    Example:
        >>> format_metrics({"loss": 0.123456, "epoch": 3}, ["loss", "epoch"])
        'loss=0.1235 epoch=3'
    """
    parts = []
    for key in names:
        value = metrics[key]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


def fit_width(line: str, width: int) -> str:
    """``line`` cut to ``width`` characters, ending in an ellipsis when cut.

    Example:
        >>> fit_width("epoch 3 | loss=0.25", 12)
        'epoch 3 | l…'
    """
    if len(line) <= width:
        return line
    return line[: max(0, width - 1)] + "…"


def time_lines(ledger: TimeLedger | None) -> list[str]:
    """The end summary's lines on where the time went: the ledger, what stands out in it
    (a straggler, waiting for data), and a better checkpoint interval when there is one.

    Example:
        >>> time_lines(TimeLedger(wall=10.0, starting=1.0))
        ['time: goodput 90%: starting 1.0s, training 9.0s']
    """
    if ledger is None or ledger.wall <= 0:
        return []
    lines = [f"time: {ledger.summary()}", *ledger.findings()]
    advice = ledger.checkpoint_advice()
    if advice is not None:
        lines.append(advice.describe())
    return lines


class Progress:
    """What the controller tells the user while a run goes on.

    Args:
        name: The run's name.
        run_uri: The run directory.
        num_workers: Workers per attempt.
        verbose: 0 to 3, as in Ray.
        metrics: The metrics to show; None chooses (see :func:`choose_metrics`).
        score_attribute: The checkpoint score attribute, shown first when metrics is None.
        total: The number of reports the run will make, for ``iter k/total`` and an ETA.
        resume_hint: How to continue the run after a stop, e.g. ``TorchTrainer.restore(...)``.
        stream: Where lines go; standard error by default.
    """

    def __init__(
        self,
        *,
        name: str,
        run_uri: str,
        num_workers: int,
        verbose: int,
        metrics: Sequence[str] | None = None,
        score_attribute: str | None = None,
        total: int | None = None,
        resume_hint: str = "run the same script again",
        stream: TextIO | None = None,
    ) -> None:
        self._resume_hint = resume_hint
        self._name = name
        self._run_uri = run_uri
        self._num_workers = num_workers
        self._verbose = verbose
        self._chosen = metrics
        self._score_attribute = score_attribute
        self._total = total
        self._stream = stream
        self._started = time.monotonic()
        self._starting_at = self._started
        self._first_ready: float | None = None
        # The ETA comes from the time between reports within an attempt: an attempt's first
        # report also holds its start-up (imports, data loading, the backend's rendezvous).
        self._last_report_at: float | None = None
        self._steady_s = 0.0
        self._steady_reports = 0
        self._iteration = 0
        self._reports = 0
        self._metrics: dict[str, Any] = {}
        self._alive = 0
        self._attempt = 0
        self._restarts = 0
        self._last_line: float | None = None
        self._line_interval = flags.PROGRESS_INTERVAL_S.get()
        self._last_live = float("-inf")
        self._ended: str | None = None
        self._starting = True
        self._live: Any = None
        # The run's goodput so far (its time ledger's), shown on the status line.
        self.goodput: Callable[[], float | None] | None = None

    @property
    def shows_steps(self) -> bool:
        """Whether steps show (a status line, a line per report); not at ``verbose=0``."""
        return self._verbose > 0

    @property
    def _out(self) -> TextIO:
        return self._stream or sys.stderr

    def start(self, resumed_from: str | None, iteration: int = 0) -> None:
        self._iteration = iteration
        if self._verbose == 0:
            return
        where = f" (continuing from {resumed_from})" if resumed_from else ""
        self._print(f"run {self._name!r} in {self._run_uri}{where}")
        if self._out.isatty():
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._renderable(),
                console=Console(file=self._out),
                refresh_per_second=4,
                redirect_stdout=True,
                redirect_stderr=True,
                transient=False,
            )
            self._live.start()

    def starting(self, attempt: int) -> None:
        """The workers of attempt ``attempt`` (0 first) are about to start."""
        self._attempt = attempt
        self._starting = True
        self._starting_at = time.monotonic()
        self._last_report_at = None
        plural = "s" if self._num_workers != 1 else ""
        self._print_event(f"starting {self._num_workers} worker{plural} ...")

    def workers_started(self) -> None:
        now = time.monotonic()
        self._alive = self._num_workers
        self._starting = False
        if self._first_ready is None:
            self._first_ready = now
        plural = "s" if self._num_workers != 1 else ""
        took = now - self._starting_at
        self._print_event(f"{self._num_workers} worker{plural} ready in {took:.1f} s")

    def worker_stopped(self) -> None:
        self._alive = max(0, self._alive - 1)

    def step(self, iteration: int, metrics: dict[str, Any], checkpoint: str | None) -> None:
        self._iteration, self._metrics = iteration, metrics
        self._reports += 1
        now = time.monotonic()
        if self._last_report_at is not None:
            self._steady_s += now - self._last_report_at
            self._steady_reports += 1
        self._last_report_at = now
        if self._verbose == 0:
            return
        if self._verbose >= 2:
            names = list(metrics) if self._verbose == 3 else self._metric_names()
            saved = f" -> {checkpoint}" if checkpoint else ""
            self._print(f"iter {iteration}: {format_metrics(metrics, names)}{saved}")
        self.refresh()

    def resized(self, num_workers: int) -> None:
        """An elastic run's attempts now have ``num_workers`` workers."""
        self._num_workers = num_workers

    def resizing(self, old: int, new: int) -> None:
        """An elastic run restarts from ``old`` to ``new`` workers (capacity changed)."""
        self._alive = 0
        self._print_event(f"resizing from {old} to {new} workers: the capacity changed")

    def restarting(self, summary: str) -> None:
        self._restarts += 1
        self._alive = 0
        self._print_event(f"restart {self._restarts}: {summary}")

    def notice(self, line: str) -> None:
        """An event worth a line of its own (a preemption on its way)."""
        self._print_event(line)

    def refresh(self) -> None:
        """Bring the status line up to date, at most as often as it can be read: the
        controller calls this after every poll and every report (thousands a second in a
        fast loop)."""
        if self._live is not None:
            now = time.monotonic()
            if now - self._last_live >= LIVE_INTERVAL_S:
                self._last_live = now
                self._live.update(self._renderable())
        elif self._verbose == 1:
            now = time.monotonic()
            last = self._last_line
            if last is None or now - last >= self._line_interval:
                self._last_line = now
                self._print(self._status_line())

    def stop(self, summary: RunSummary) -> None:
        self._ended = summary.outcome
        if self._live is not None:
            self._live.update(self._renderable())
            self._live.stop()
            self._live = None
        if self._verbose:
            for line in self.summary_lines(summary):
                self._print(line)

    def summary_lines(self, summary: RunSummary) -> list[str]:
        """The last lines: how it ended, how long, what it kept, where it is; after a stop,
        one line: where it stopped and how to continue."""
        if summary.stopped is not None:
            return [f"{summary.stopped}; to continue: {self._resume_hint}"]
        restarts = f"{self._restarts} restart{'s' if self._restarts != 1 else ''}"
        reports = f"{self._reports} report{'s' if self._reports != 1 else ''}"
        lines = [
            f"{summary.outcome} in {format_duration(self.elapsed())} (the whole fit(): "
            f"starting the workers, training, stopping them): {reports}, {restarts}",
        ]
        if summary.best_checkpoint is not None:
            names = choose_metrics(summary.best_metrics or {}, self._chosen, self._score_attribute)
            shown = format_metrics(summary.best_metrics or {}, names[:1])
            lines.append(
                f"best checkpoint: {summary.best_checkpoint}" + (f" ({shown})" if shown else "")
            )
        lines += time_lines(summary.time)
        lines.append(f"run directory: {self._run_uri}")
        lines.append(f"see it with: lockstep runs show {self._run_uri}")
        return lines

    def elapsed(self) -> float:
        """Seconds since the run began (the trainer's ``fit()``)."""
        return time.monotonic() - self._started

    def _metric_names(self) -> list[str]:
        return choose_metrics(self._metrics, self._chosen, self._score_attribute)

    def _renderable(self) -> Any:
        from rich.text import Text

        return Text(self._status_line(), style="bold", no_wrap=True, overflow="ellipsis")

    def _status_line(self) -> str:
        """One line: where the run is, how long it has taken and will take, its metrics,
        how fast it goes, and who is alive; the most wanted first, as a narrow terminal
        cuts the end."""
        timing = f"{format_duration(self.elapsed())} elapsed"
        eta = self._eta()
        if eta is not None:
            timing += f", ETA {format_duration(eta)}"
        parts = [self._name, self._iteration_part(), timing]
        shown = format_metrics(self._metrics, self._metric_names())
        if shown:
            parts.append(shown)
        parts.append(f"{self._rate():.2f} reports/s")
        goodput = self.goodput() if self.goodput is not None else None
        if goodput is not None:
            parts.append(f"goodput {goodput * 100:.0f}%")
        parts.append(f"attempt {self._attempt + 1} (restarts {self._restarts})")
        if self._ended is not None:
            parts.append(self._ended)
        elif self._starting:
            parts.append(f"starting {self._num_workers} workers")
        else:
            parts.append(f"workers {self._alive}/{self._num_workers}")
        return " | ".join(parts)

    def _iteration_part(self) -> str:
        if self._total is not None:
            return f"iter {self._iteration}/{self._total}"
        return f"iter {self._iteration}"

    def _rate(self) -> float:
        """Reports per second: between reports once there are two in an attempt, else
        since the workers were first ready."""
        if self._steady_reports:
            return self._steady_reports / max(1e-9, self._steady_s)
        if self._first_ready is None or self._reports == 0:
            return 0.0
        return self._reports / max(1e-9, time.monotonic() - self._first_ready)

    def _eta(self) -> float | None:
        """The time the reports still to come take at the pace of the reports after an
        attempt's first; None until there is such a report (the first one's time holds the
        start-up, and would make the estimate many times too long)."""
        if self._total is None or self._ended is not None:
            return None
        remaining = max(0, self._total - self._iteration)
        if remaining == 0:
            return 0.0
        if not self._steady_reports:
            return None
        return remaining * self._steady_s / self._steady_reports

    def _print_event(self, line: str) -> None:
        if self._verbose:
            self._print(line)

    def _print(self, line: str) -> None:
        text = f"[lockstep] {line}"
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False, overflow="fold")
        else:
            if self._out.isatty():
                text = fit_width(text, shutil.get_terminal_size().columns)
            print(text, file=self._out, flush=True)
