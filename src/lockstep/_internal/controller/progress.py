"""Progress on the terminal: a live line on a TTY, plain lines otherwise, nothing at verbose=0."""

from __future__ import annotations

import sys
import time
from typing import Any

from lockstep._core import flags


def _format_metrics(metrics: dict[str, Any], limit: int = 4) -> str:
    parts = []
    for key, value in list(metrics.items())[:limit]:
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


class Progress:
    """What the controller tells the user while a run goes on."""

    def __init__(self, *, name: str, run_uri: str, num_workers: int, verbose: int) -> None:
        self._name = name
        self._run_uri = run_uri
        self._num_workers = num_workers
        self._verbose = verbose
        self._started = time.monotonic()
        self._iteration = 0
        self._metrics: dict[str, Any] = {}
        self._alive = 0
        self._restarts = 0
        self._last_line = 0.0
        self._live: Any = None

    def start(self, resumed_from: str | None, iteration: int = 0) -> None:
        self._iteration = iteration
        if self._verbose == 0:
            return
        where = f" (continuing from {resumed_from})" if resumed_from else ""
        self._print(f"run {self._name!r} in {self._run_uri}{where}")
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._renderable(),
                console=Console(stderr=True),
                refresh_per_second=4,
                redirect_stdout=True,
                redirect_stderr=True,
            )
            self._live.start()

    def workers_started(self) -> None:
        self._alive = self._num_workers

    def worker_stopped(self) -> None:
        self._alive = max(0, self._alive - 1)

    def step(self, iteration: int, metrics: dict[str, Any], checkpoint: str | None) -> None:
        self._iteration, self._metrics = iteration, metrics
        if self._verbose == 0:
            return
        if self._verbose == 2:
            saved = f" -> {checkpoint}" if checkpoint else ""
            self._print(f"iter {iteration}: {_format_metrics(metrics, limit=12)}{saved}")
        self.refresh()

    def restarting(self, summary: str) -> None:
        self._restarts += 1
        self._alive = 0
        if self._verbose:
            self._print(f"restart {self._restarts}: {summary}")

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._renderable())
        elif self._verbose == 1:
            now = time.monotonic()
            if now - self._last_line >= flags.PROGRESS_INTERVAL_S.get():
                self._last_line = now
                self._print(self._status_line())

    def stop(self, outcome: str) -> None:
        if self._live is not None:
            self._live.update(self._renderable())
            self._live.stop()
            self._live = None
        if self._verbose:
            self._print(f"{outcome} after {time.monotonic() - self._started:.1f}s: {self._run_uri}")

    def _renderable(self) -> Any:
        from rich.text import Text

        return Text(self._status_line(), style="bold")

    def _status_line(self) -> str:
        elapsed = time.monotonic() - self._started
        return (
            f"{self._name} | iter {self._iteration} | {_format_metrics(self._metrics)} | "
            f"workers {self._alive}/{self._num_workers} | restarts {self._restarts} | "
            f"{elapsed:.1f}s"
        )

    def _print(self, line: str) -> None:
        if self._live is not None:
            self._live.console.print(f"[lockstep] {line}", markup=False, highlight=False)
        else:
            print(f"[lockstep] {line}", file=sys.stderr, flush=True)
