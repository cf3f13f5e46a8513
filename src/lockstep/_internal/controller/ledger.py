"""The run's time ledger, kept by the driver (see ``lockstep._core.time_ledger``).

Two sources feed it. The controller says which phase the run is in (starting, running,
recovering, draining a preemption, shutting down); the time of every phase but running
goes to its category. While the run is running, each report carries its rank's timings
(:attr:`Report.timings`: its own time, the data waits in it, persisting a checkpoint),
and the report handler says when each step completed and how long its commit took: from
these come each rank's data wait, barrier wait, checkpoint stall and replayed work, and
their mean over the ranks. Training is what is left.

Every figure is a slot of one array of doubles (``time.bin``'s layout), so that after a
step the whole ledger is one ``pwrite``. The work per report is a few additions for its
rank (a rank's barrier wait for step k is folded in at its report of step k+1, when
step k is certainly complete: no scan of the ranks per step).
"""

from __future__ import annotations

import array
import time
from collections.abc import Callable, Mapping
from typing import Any

from lockstep._core import time_ledger as tl
from lockstep._internal.execution.messages import Report
from lockstep._internal.execution.worker.phases import Phase

RUNNING = "running"
STARTING = "starting"
RECOVERING = "recovering"
DRAINING = "preemption_drain"
SHUTDOWN = "shutdown"
_RUN = tl.RUN_AT
_RANK = tl.RANKS_AT  # where rank 0's figures begin
_WIDTH = len(tl.HOT_RANK)


class Ledger:
    """Where the run's time goes, continued from an earlier driver's ``previous``.

    Args:
        previous: The ledger's figures (``time.bin``'s doubles) and data sources when the
            run is continued, else None.
        assumed_mtbf_s: The mean time between failures the checkpoint advice assumes
            when none was seen.
        started_at: When ``fit()`` began (``clock()``'s time); now by default.
        clock: Seconds, monotonic (tests give their own).
    """

    def __init__(
        self,
        previous: tuple[list[float], dict[str, float]] | None = None,
        *,
        assumed_mtbf_s: float = tl.DEFAULT_ASSUMED_MTBF_S,
        started_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.assumed_mtbf_s = assumed_mtbf_s
        values, sources = previous if previous is not None else (None, {})
        self.values = array.array("d", values or _empty(0))
        self.values[0] = tl.HOT_VERSION
        self.sources = dict(sources)
        self._phase = STARTING
        self._frozen = False
        # up to when the phases' times are counted: from fit(), when it says when that was
        self._mark = clock() if started_at is None else started_at
        self._running_since = self._mark
        self._start_attempt(0, replay=0, position=0)

    # -- the phases, as the controller says them --------------------------------------

    @property
    def phase(self) -> str:
        return self._phase

    def enter(self, phase: str, now: float | None = None, *, since: float | None = None) -> None:
        """The run is in ``phase`` from now on, or from ``since`` (earlier: when a failure
        happened, which the driver hears of a moment later)."""
        if since is None:
            self._switch(phase, self._advance(now))
            return
        since = self._advance(max(since, self._mark))
        self._switch(phase, since)
        self._advance(now)

    def _switch(self, phase: str, at: float) -> None:
        if phase == RUNNING and self._phase != RUNNING:
            self._running_since = at
            self._stamp_early_arrivals(at)
        elif phase != RUNNING and self._phase == RUNNING:
            self._fold_all()
        self._phase = phase

    def attempt_starting(self, num_workers: int, *, from_checkpoint: bool) -> None:
        """An attempt of ``num_workers`` begins, from the run's latest checkpoint (or from
        nothing): the steps up to where the run had got are done again."""
        values = self.values
        high = int(values[_RUN["high_water"]])
        position = int(values[_RUN["checkpoint_iteration"]]) if from_checkpoint else 0
        self._grow(num_workers)
        self._start_attempt(num_workers, replay=max(0, high - position), position=position)

    def failed(self) -> None:
        """The attempt failed (counted for the failure rate)."""
        self.values[_RUN["num_failures"]] += 1

    def _start_attempt(self, num_workers: int, *, replay: int, position: int) -> None:
        self._num_workers = num_workers
        self._replay = replay  # the first `replay` steps of this attempt are done again
        self._position = position  # the run's progress at the attempt's step 0
        self._arrival: list[float | None] = [None] * num_workers  # its last report's
        self._last_report: list[float | None] = [None] * num_workers
        self._reported: list[int] = [-1] * num_workers  # the step not yet folded in
        self._step_arrivals = 0.0
        self._step_early = 0  # reports of the step that came before the run was running
        self._done = (-1, 0.0, 0.0, False)  # last step: index, completed, commit_s, counted

    # -- what the workers and the report handler say ---------------------------------

    def on_report(self, report: Report, now: float) -> None:
        """A rank's report arrived: its timings, and when (for the barrier)."""
        rank, values = report.rank, self.values
        self._fold(rank)
        self._reported[rank] = report.step
        self._last_report[rank] = now
        if self._phase != RUNNING:
            self._arrival[rank] = None  # stamped when the run is running
            self._step_early += 1
            return
        self._arrival[rank] = now
        self._step_arrivals += now
        timings = report.timings
        if timings is None:
            return
        user_s, data_s, persist_s, source = timings
        share = 1.0 / self._num_workers
        at = _RANK + rank * _WIDTH
        if data_s:
            values[at + tl.RANK_AT["data_wait"]] += data_s
            values[_RUN["data_wait"]] += data_s * share
            self.sources[source] = self.sources.get(source, 0.0) + data_s * share
        if persist_s:
            values[at + tl.RANK_AT["checkpoint_stall"]] += persist_s
            values[_RUN["checkpoint_stall"]] += persist_s * share
        if report.step < self._replay:
            redone = max(0.0, user_s - data_s)
            values[at + tl.RANK_AT["replayed"]] += redone
            values[_RUN["replayed"]] += redone * share

    def on_step(self, index: int, last_rank: int, now: float, commit_s: float = 0.0) -> None:
        """Step ``index`` of the attempt completed at ``now`` with ``last_rank``'s report
        (the slowest); every rank waited ``commit_s`` more for its checkpoint's commit."""
        values = self.values
        counted = self._phase == RUNNING and self._step_early == 0
        if counted:
            values[_RUN["barrier_wait"]] += now - self._step_arrivals / self._num_workers
            values[_RUN["checkpoint_stall"]] += commit_s
            values[_RANK + last_rank * _WIDTH + tl.RANK_AT["slowest_steps"]] += 1
        self._done = (index, now, commit_s, counted)
        self._step_arrivals, self._step_early = 0.0, 0
        values[_RUN["num_steps"]] += 1
        reached = self._position + index + 1
        if reached > values[_RUN["high_water"]]:
            values[_RUN["high_water"]] = reached

    def checkpoint_committed(self, index: int) -> None:
        """The checkpoint of the attempt's step ``index`` is committed: a restart continues
        from there."""
        self.values[_RUN["checkpoint_iteration"]] = self._position + index + 1
        self.values[_RUN["num_checkpoints"]] += 1

    def rank_returned(self, rank: int) -> None:
        """Rank ``rank``'s function returned: its last step's wait is complete."""
        if rank < len(self._reported):
            self._fold(rank)

    def ranks_at_end(self, pages: Mapping[int, Phase | None], now: float | None = None) -> None:
        """The attempt ends while its ranks are where their phase ``pages`` say (those
        that can be read): what they were waiting for since their last report counts
        (data, a checkpoint being persisted), and so does the wait of a rank in
        ``report()`` for a step the others never reached."""
        if self._phase != RUNNING:
            return
        now = self._advance(now if now is None else max(now, self._mark))
        share = 1.0 / max(1, self._num_workers)
        for rank in range(self._num_workers):
            self._fold(rank)
            page = pages.get(rank)
            arrival = self._arrival[rank]
            waits = {
                "data_wait": page.data_s if page is not None else 0.0,
                "checkpoint_stall": 0.0,
                "barrier_wait": now - arrival if self._reported[rank] >= 0 and arrival else 0.0,
            }
            if page is not None and page.phase in ("data_wait", "checkpoint"):
                key = "data_wait" if page.phase == "data_wait" else "checkpoint_stall"
                waits[key] += max(0.0, now - page.since)
            self._reported[rank] = -1
            for key, seconds in waits.items():
                self.values[_RANK + rank * _WIDTH + tl.RANK_AT[key]] += seconds
                self.values[_RUN[key]] += seconds * share

    def _fold(self, rank: int) -> None:
        """Add the barrier wait and commit of the rank's last complete step to its own."""
        index, completed, commit_s, counted = self._done
        if self._reported[rank] != index:
            return
        self._reported[rank] = -1
        arrival = self._arrival[rank]
        if counted and arrival is not None:
            at = _RANK + rank * _WIDTH
            self.values[at + tl.RANK_AT["barrier_wait"]] += completed - arrival
            self.values[at + tl.RANK_AT["checkpoint_stall"]] += commit_s

    def _fold_all(self) -> None:
        for rank in range(self._num_workers):
            self._fold(rank)

    def _stamp_early_arrivals(self, now: float) -> None:
        """Reports that came before every rank ran (while starting): their wait counts
        from now on, the time before is the starting's."""
        for rank, arrival in enumerate(self._arrival):
            if arrival is None and self._reported[rank] >= 0:
                self._arrival[rank] = now
                self._step_arrivals += now
                self._step_early -= 1

    # -- the figures -----------------------------------------------------------------

    def _advance(self, now: float | None = None) -> float:
        """Count the time since the last mark: to the wall, and to the phase's category."""
        now = self._clock() if now is None else now
        if self._frozen:
            return now
        elapsed = now - self._mark
        self._mark = now
        values = self.values
        values[_RUN["wall"]] += elapsed
        if self._phase != RUNNING:
            values[_RUN[self._phase]] += elapsed
        return now

    def view(self) -> tl.TimeLedger:
        """The ledger up to now, changing nothing (for another thread: ``lockstep
        status`` asks from the driver's status thread)."""
        values = list(self.values)
        elapsed = 0.0 if self._frozen else max(0.0, self._clock() - self._mark)
        values[_RUN["wall"]] += elapsed
        if self._phase != RUNNING:
            values[_RUN[self._phase]] += elapsed
        return self._ledger_of(values)

    def _ledger_of(self, values: list[float]) -> tl.TimeLedger:
        """The ledger of ``values`` (see :meth:`_folded`)."""
        base = tl.TimeLedger(data_sources=dict(self.sources), assumed_mtbf_s=self.assumed_mtbf_s)
        return tl.TimeLedger.from_hot(self._folded(values), base)

    def _folded(self, values: list[float]) -> list[float]:
        """``values`` (a copy of the figures) with the waits of the last step that the
        ranks have not folded in yet (they do at their next report)."""
        index, completed, commit_s, counted = self._done
        if counted:
            for rank, reported in enumerate(self._reported):
                arrival = self._arrival[rank]
                if reported == index and arrival is not None:
                    at = _RANK + rank * _WIDTH
                    values[at + tl.RANK_AT["barrier_wait"]] += completed - arrival
                    values[at + tl.RANK_AT["checkpoint_stall"]] += commit_s
        return values

    def last_report(self, rank: int) -> float | None:
        """When rank ``rank`` of the attempt last reported (``clock()``), if it did."""
        reports = self._last_report
        return reports[rank] if rank < len(reports) else None

    def current(self) -> array.array[float]:
        """The figures up to now (``time.bin``'s doubles), counted one more time."""
        self._advance()
        self.values[1] += 1
        return self.values

    def snapshot(self) -> tl.TimeLedger:
        """The ledger up to now."""
        return self._ledger_of(list(self.current()))

    def figures(self) -> dict[str, float]:
        """The run's figures up to now (not each rank's), for Tune results and logger
        callbacks: after every step, so without a look at every rank."""
        self._advance()
        values = self.values
        run: dict[str, Any] = {name: values[_RUN[name]] for name in tl.COUNTED}
        return tl.TimeLedger(**run).as_dict()

    def goodput(self) -> float | None:
        """The goodput up to now (for the progress line, a few times a second), or None
        before any step (nothing to say yet)."""
        values = self.values
        if values[_RUN["num_steps"]] < 1:
            return None
        self._advance()
        wall = values[_RUN["wall"]]
        lost = sum(values[_RUN[name]] for name in tl.CATEGORIES if name != "training")
        return max(0.0, wall - lost) / wall if wall > 0 else 0.0

    def freeze(self) -> None:
        """The run is over: the figures stop here (the Result and the files agree)."""
        self._advance()
        self._frozen = True

    def to_json(self) -> dict[str, Any]:
        """Everything, for ``time.json``."""
        figures = self._folded(list(self.current()))
        ledger = tl.TimeLedger.from_hot(
            figures,
            tl.TimeLedger(data_sources=dict(self.sources), assumed_mtbf_s=self.assumed_mtbf_s),
        )
        return {**ledger.to_json(), "seq": int(figures[1]), "figures": figures}

    def _grow(self, num_workers: int) -> None:
        have = int(self.values[2])
        if num_workers > have:
            self.values.extend([0.0] * ((num_workers - have) * _WIDTH))
            self.values[2] = num_workers


def _empty(num_ranks: int) -> list[float]:
    values = [0.0] * (_RANK + num_ranks * _WIDTH)
    values[0], values[2] = tl.HOT_VERSION, num_ranks
    return values
