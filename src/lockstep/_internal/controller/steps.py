"""Groups the workers' reports into steps: step k is complete once every rank reported k."""

from __future__ import annotations

from dataclasses import dataclass

from lockstep._internal.execution.messages import Report


class ReportCountMismatch(Exception):
    """Workers called ``report()`` a different number of times."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


@dataclass(frozen=True)
class Step:
    """One step: every worker's report, in rank order."""

    index: int
    reports: tuple[Report, ...]

    @property
    def metrics(self) -> dict[str, object]:
        """Rank 0's metrics, the ones a run records."""
        return self.reports[0].metrics

    @property
    def checkpointed(self) -> bool:
        return any(r.checkpointed for r in self.reports)

    @property
    def uploads_async(self) -> bool:
        """Every rank that attached files reported them with CheckpointUploadMode.ASYNC."""
        return all(r.upload == "async" for r in self.reports if r.checkpointed)

    @property
    def dir_name(self) -> str | None:
        """The ``checkpoint_dir_name`` given, rank 0's first (as Ray broadcasts it)."""
        return next((r.dir_name for r in self.reports if r.dir_name), None)

    @property
    def staged(self) -> str | None:
        """Where the workers staged this step's checkpoint, as they said; None without one."""
        return next((r.staged for r in self.reports if r.staged is not None), None)


class StepAggregator:
    """Collects reports from ``world_size`` workers into steps.

    ``report()`` is a barrier: a worker's report waits here (and the worker in its call)
    until every worker reached the same step. A worker that finishes while another has
    reported more often is an error, raised as soon as it is certain, so that nobody waits
    forever; it names every rank's report count.
    """

    def __init__(self, world_size: int) -> None:
        self._world_size = world_size
        self._pending: dict[int, dict[int, Report]] = {}
        self._next = 0
        self._reported: dict[int, int] = dict.fromkeys(range(world_size), 0)
        self._finished: dict[int, int] = {}
        # Kept as reports come, so that checking a report costs no look at every rank:
        # the rank that reported most (the lowest such rank), and the rank that returned
        # after the fewest reports (the first such rank).
        self._most = (0, 0)  # (count, rank)
        self._fewest: tuple[int, int] | None = None  # (count, rank)

    def add(self, report: Report) -> list[Step]:
        """Record ``report``; return the steps it completes, in order."""
        assert report.step == self._reported[report.rank], "reports arrive in order per worker"
        count = self._reported[report.rank] = report.step + 1
        most, most_rank = self._most
        if count > most or (count == most and report.rank < most_rank):
            self._most = (count, report.rank)
        self._check(report.rank)
        self._pending.setdefault(report.step, {})[report.rank] = report
        done = []
        while len(self._pending.get(self._next, ())) == self._world_size:
            reports = self._pending.pop(self._next)
            done.append(Step(self._next, tuple(reports[r] for r in range(self._world_size))))
            self._next += 1
        return done

    def finish(self, rank: int, num_reports: int) -> None:
        """Rank ``rank``'s function returned after ``num_reports`` reports."""
        self._finished[rank] = num_reports
        if self._fewest is None or num_reports < self._fewest[0]:
            self._fewest = (num_reports, rank)
        self._check(rank)

    @property
    def num_steps(self) -> int:
        """Steps every rank has reported."""
        return self._next

    def all_finished(self) -> bool:
        return len(self._finished) == self._world_size

    def pending_reports(self) -> list[Report]:
        """Reports of steps that not every rank has reached."""
        return [r for reports in self._pending.values() for r in reports.values()]

    def waiting(self) -> list[int]:
        """The ranks waiting in ``report()`` for others to report the same step."""
        return sorted(r for r, n in self._reported.items() if n > self._next)

    def counts(self) -> dict[int, int]:
        """How many reports each rank has made, by rank."""
        return dict(self._reported)

    @property
    def next_step(self) -> int:
        """The index of the first step not yet complete."""
        return self._next

    def describe_counts(self) -> str:
        """Every rank's report count, e.g. ``"reports: rank 0: 3, rank 1: 2 (returned)"``."""
        parts = []
        for rank, count in sorted(self._reported.items()):
            returned = " (returned)" if rank in self._finished else ""
            parts.append(f"rank {rank}: {count}{returned}")
        return "reports: " + ", ".join(parts)

    def _check(self, rank: int) -> None:
        if self._fewest is None:
            return
        fewest, fewest_rank = self._fewest
        most, most_rank = self._most
        if most > fewest:
            raise ReportCountMismatch(
                f"workers called report() a different number of times: rank {fewest_rank} "
                f"returned after {fewest} report{'s' if fewest != 1 else ''} while rank "
                f"{most_rank} waits in its report number {most} ({self.describe_counts()}). "
                "HINT: call train.report() on every worker at the same points, attaching a "
                "checkpoint only where you need one",
                rank=fewest_rank,
            )
