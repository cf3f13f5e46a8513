"""The live trial table: a rich table on a terminal, plain lines otherwise, nothing at
``verbose=0``."""

from __future__ import annotations

import sys
import time
from typing import Any

from lockstep.tune._trial import TuneTrial

_COUNTED = ("RUNNING", "PENDING", "PAUSED", "TERMINATED", "ERROR")


class TrialTable:
    """Shows every trial: name, status, config, latest metric, iterations."""

    def __init__(self, *, name: str, path: str, metric: str | None, verbose: int) -> None:
        self._name = name
        self._path = path
        self._metric = metric
        self._verbose = verbose
        self._live: Any = None
        self._trials: list[TuneTrial] = []
        self._last_refresh = 0.0

    def start(self, trials: list[TuneTrial]) -> None:
        self._trials = trials
        if self._verbose == 0:
            return
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._table(),
                console=Console(stderr=True),
                refresh_per_second=4,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        else:
            print(f"Tune experiment {self._name!r}", file=sys.stderr, flush=True)

    def update(self, trial: TuneTrial) -> None:
        if self._verbose == 0:
            return
        if self._live is not None:
            now = time.monotonic()
            if now - self._last_refresh > 0.25:
                self._last_refresh = now
                self._live.update(self._table())
            return
        if trial.status != "RUNNING" or (self._verbose >= 2 and trial.last_result):
            print(self._line(trial), file=sys.stderr, flush=True)

    def stop(self, trials: list[TuneTrial], outcome: str = "done") -> None:
        if self._verbose == 0:
            return
        if self._live is not None:
            self._live.update(self._table())
            self._live.stop()
            self._live = None
        else:
            print(self._summary(trials, outcome), file=sys.stderr, flush=True)
        # as a Train run ends: where to find it
        print(f"[lockstep] run directory: {self._path}", file=sys.stderr, flush=True)

    def _line(self, trial: TuneTrial) -> str:
        metric = self._metric_text(trial)
        return (
            f"Trial {trial} {trial.status} iter={trial.iteration} {metric} "
            f"config={trial.experiment_tag}"
        ).rstrip()

    def _metric_text(self, trial: TuneTrial) -> str:
        result = trial.last_result
        if self._metric and self._metric in result:
            value = result[self._metric]
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            return f"{self._metric}={shown}"
        return ""

    def _summary(self, trials: list[TuneTrial], outcome: str) -> str:
        counts = {s: sum(t.status == s for t in trials) for s in _COUNTED}
        shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return f"Tune experiment {self._name!r} {outcome}: {len(trials)} trials ({shown})"

    def _table(self) -> Any:
        from rich.table import Table

        counts = {s: sum(t.status == s for t in self._trials) for s in _COUNTED}
        title = f"{self._name}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        table = Table(title=title)
        for column in ("trial", "status", "config", self._metric or "metric", "iter"):
            table.add_column(column)
        for trial in self._trials[-30:]:
            table.add_row(
                str(trial),
                trial.status,
                trial.experiment_tag,
                self._metric_text(trial).partition("=")[2],
                str(trial.iteration),
            )
        return table
