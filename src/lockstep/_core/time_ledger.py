"""Where a run's time went: the time ledger every run keeps, and what it says.

The driver splits the run's wall time into categories (see :class:`TimeLedger`) from what
it sees (attempts starting, failures, drains, the end) and from what every rank sends with
its reports (time in its own code, waiting for data, persisting a checkpoint); it keeps
the ledger in the run directory:

- ``time.json``: the whole ledger, written when an attempt starts or ends, when a
  checkpoint is committed, and at the end of the run;
- ``time.bin``: its figures (doubles, little-endian, the layout below), rewritten in
  place at most a tenth of a second after a step (in batches, off the workers' way), so
  that a killed driver loses at most that tenth of a second's share;
  the next driver of the run (``restore()``) continues from whichever of the two is newer.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lockstep._core.storage import StorageDir

TIME_FILE = "time.json"
TIME_HOT_FILE = "time.bin"

# The categories of the run's wall time, in the order they are shown; they add up to it.
CATEGORIES = (
    "starting",
    "training",
    "data_wait",
    "barrier_wait",
    "checkpoint_stall",
    "recovering",
    "replayed",
    "preemption_drain",
    "shutdown",
)
# The keys of ``lockstep runs show --json``'s "time", in seconds but goodput (a fraction).
KEYS = ("wall", *CATEGORIES, "goodput")
# The assumed mean time between failures of a run that saw none, for the checkpoint advice.
DEFAULT_ASSUMED_MTBF_S = 24 * 3600.0

# time.bin: a header, the run's figures, then each rank's.
HOT_VERSION = 1.0
HOT_HEADER = ("version", "seq", "num_ranks")
# the wall time and every category but training (what is left of the wall time)
COUNTED = ("wall", *(name for name in CATEGORIES if name != "training"))
HOT_RUN = (
    *COUNTED,
    "num_steps",
    "num_checkpoints",
    "num_failures",
    "high_water",  # the steps recorded so far, counting each once (see restarts)
    "checkpoint_iteration",  # the step of the latest committed checkpoint
)
HOT_RANK = ("data_wait", "barrier_wait", "checkpoint_stall", "replayed", "slowest_steps")
RUN_AT = {name: len(HOT_HEADER) + i for i, name in enumerate(HOT_RUN)}
RANKS_AT = len(HOT_HEADER) + len(HOT_RUN)  # where rank 0's figures begin
RANK_AT = {name: i for i, name in enumerate(HOT_RANK)}


@dataclass(frozen=True)
class RankTime:
    """One rank's share of the time, in seconds: what differs between ranks.

    Attributes:
        rank: The rank.
        data_wait: Waiting for its data (``lockstep.data`` iterators,
            ``prepare_data_loader`` loaders).
        barrier_wait: Waiting in ``report()`` for slower ranks to report the same step.
        checkpoint_stall: What its ``report()`` blocked for persisting and committing.
        replayed: Training time spent again on steps a restart redid.
        slowest_steps: The steps on which it was the last to report.

    Example:
        >>> ledger = TimeLedger(wall=10.0, per_rank=(RankTime(0, barrier_wait=2.0),))
        >>> ledger.rank_dict(ledger.per_rank[0])["training"]
        8.0
    """

    rank: int
    data_wait: float = 0.0
    barrier_wait: float = 0.0
    checkpoint_stall: float = 0.0
    replayed: float = 0.0
    slowest_steps: int = 0


@dataclass(frozen=True)
class CheckpointAdvice:
    """The checkpoint interval that loses the least expected time (Young-Daly).

    With checkpoints costing ``cost_s`` each and a failure every ``mtbf_s`` on average,
    checkpointing every ``t`` seconds loses ``cost_s / t`` of the time to checkpoints and
    ``t / (2 * mtbf_s)`` to work redone after failures; ``sqrt(2 * cost_s * mtbf_s)``
    loses the least.

    Attributes:
        interval_s: The run's mean time between checkpoints.
        best_interval_s: The interval that loses the least.
        cost_s: The measured cost of one checkpoint (its stall).
        mtbf_s: The mean time between failures used.
        assumed: Whether ``mtbf_s`` is assumed (no failure was seen), not measured.
        saving: The fraction of the time in steps the best interval would save.
        saving_s: That fraction of this run's time in steps, in seconds.

    Example:
        >>> ledger = TimeLedger(wall=3600.0, checkpoint_stall=360.0, num_checkpoints=360)
        >>> advice = ledger.checkpoint_advice()
        >>> round(advice.interval_s), round(advice.best_interval_s)
        (10, 416)
    """

    interval_s: float
    best_interval_s: float
    cost_s: float
    mtbf_s: float
    assumed: bool
    saving: float
    saving_s: float

    def describe(self) -> str:
        """One line for the end summary and ``lockstep runs show``."""
        failures = (
            f"a failure every {_duration(self.mtbf_s)} (assumed, none seen: "
            "FailureConfig(assumed_mtbf_s=...) sets it)"
            if self.assumed
            else f"a failure every {_duration(self.mtbf_s)} (seen)"
        )
        return (
            f"checkpoints every {_duration(self.interval_s)} cost {_duration(self.cost_s)} "
            f"each; with {failures}, every {_duration(self.best_interval_s)} would lose the "
            f"least time: {_duration(self.saving_s)} less in this run ({self.saving * 100:.1f}% "
            "of its time in steps)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "best_interval_s": self.best_interval_s,
            "cost_s": self.cost_s,
            "mtbf_s": self.mtbf_s,
            "mtbf_assumed": self.assumed,
            "saving": self.saving,
            "saving_s": self.saving_s,
            "text": self.describe(),
        }


@dataclass(frozen=True)
class TimeLedger:
    """Where a run's wall time went, in seconds: ``Result.time``.

    The categories add up to ``wall``, the time the run's drivers ran (``fit()`` to its
    return, every ``fit()`` of a restored run):

    - ``starting``: from ``fit()`` until every rank runs the training function;
    - ``training``: in the training function, less the categories below;
    - ``data_wait``: waiting for data inside ``lockstep.data`` iterators and
      ``prepare_data_loader`` loaders;
    - ``barrier_wait``: waiting in ``report()`` for slower ranks;
    - ``checkpoint_stall``: what ``report()`` blocked for persisting and committing a
      checkpoint;
    - ``recovering``: from a failure (or a resize) until every rank of the next attempt
      runs the training function again;
    - ``replayed``: training time spent again on steps a restart redid, from the restored
      checkpoint to where the failed attempt had got;
    - ``preemption_drain``: from a preemption notice until the workers stopped;
    - ``shutdown``: from the end (every rank returned, the run failed or was stopped)
      until ``fit()`` returns.

    The categories a rank spends on its own (data, barrier, checkpoint, replayed) are the
    mean over the ranks; ``per_rank`` has each rank's. ``goodput`` is the training time
    that was not replayed, over the wall time.

    Example:
        >>> ledger = TimeLedger(wall=100.0, starting=2.0, data_wait=8.0, shutdown=0.5)
        >>> ledger.training, round(ledger.goodput, 3)
        (89.5, 0.895)
        >>> sorted(ledger.as_dict())[:3]
        ['barrier_wait', 'checkpoint_stall', 'data_wait']
    """

    wall: float = 0.0
    starting: float = 0.0
    data_wait: float = 0.0
    barrier_wait: float = 0.0
    checkpoint_stall: float = 0.0
    recovering: float = 0.0
    replayed: float = 0.0
    preemption_drain: float = 0.0
    shutdown: float = 0.0
    per_rank: tuple[RankTime, ...] = ()
    num_steps: int = 0
    num_checkpoints: int = 0
    num_failures: int = 0
    data_sources: Mapping[str, float] = field(default_factory=dict)
    assumed_mtbf_s: float = DEFAULT_ASSUMED_MTBF_S

    @property
    def training(self) -> float:
        """The wall time not in any other category."""
        return max(0.0, self.wall - self._outside_training())

    @property
    def goodput(self) -> float:
        """Training time that was not replayed, over the wall time (0 to 1)."""
        return self.training / self.wall if self.wall > 0 else 0.0

    def _outside_training(self) -> float:
        return float(sum(getattr(self, name) for name in CATEGORIES if name != "training"))

    @property
    def in_steps(self) -> float:
        """The time the ranks spent between their first report and their last: the run's
        time less starting, recovering, preemption drain and shutdown."""
        return max(
            0.0,
            self.wall - self.starting - self.recovering - self.preemption_drain - self.shutdown,
        )

    def as_dict(self) -> dict[str, float]:
        """The ledger as ``lockstep runs show --json`` gives it under ``"time"``."""
        values = {name: getattr(self, name) for name in ("wall", *CATEGORIES)}
        return {**{k: round(v, 6) for k, v in values.items()}, "goodput": round(self.goodput, 6)}

    def rank_dict(self, rank: RankTime) -> dict[str, float]:
        """One rank's ledger with every key of :meth:`as_dict`: the run's categories
        (starting, recovering, ...) and the rank's own."""
        own = {name: getattr(rank, name) for name in RANK_CATEGORIES}
        shared = {n: getattr(self, n) for n in CATEGORIES if n not in own and n != "training"}
        training = max(0.0, self.wall - sum(own.values()) - sum(shared.values()))
        values = {"wall": self.wall, **shared, **own, "training": training}
        result: dict[str, float] = {"rank": rank.rank}
        result.update({k: round(values[k], 6) for k in ("wall", *CATEGORIES)})
        result["goodput"] = round(training / self.wall, 6) if self.wall > 0 else 0.0
        return result

    def per_rank_dicts(self) -> list[dict[str, float]]:
        """Every rank's :meth:`rank_dict`, in rank order."""
        return [self.rank_dict(r) for r in self.per_rank]

    def findings(self) -> list[str]:
        """One line for each thing worth knowing: a straggler, a run waiting for data."""
        return [line for line in (self._straggler(), self._data_wait()) if line]

    def _straggler(self) -> str | None:
        """A rank slowest on most steps while the others waited a noticeable share."""
        ranks = self.per_rank
        if len(ranks) < 2 or self.num_steps < MIN_STEPS or self.wall <= 0:
            return None
        slowest = max(ranks, key=lambda r: r.slowest_steps)
        share = slowest.slowest_steps / self.num_steps
        others = [r.barrier_wait for r in ranks if r.rank != slowest.rank]
        waited = sum(others) / len(others) / self.wall
        if share <= 0.5 or waited < STRAGGLER_WAIT_SHARE:
            return None
        return (
            f"rank {slowest.rank} was the slowest on {share * 100:.0f}% of steps; the others "
            f"waited {waited * 100:.0f}% of the run for it"
        )

    def _data_wait(self) -> str | None:
        """Waiting for data took more than a fifth of the time of a step."""
        steps = self.in_steps
        if steps <= 0 or self.data_wait <= DATA_WAIT_SHARE * steps:
            return None
        share = self.data_wait / steps
        source = max(self.data_sources.items(), key=lambda item: item[1], default=None)
        which = f" for {source[0]}" if source is not None and source[0] else ""
        return (
            f"waiting for data{which} took {share * 100:.0f}% of each step "
            f"({_duration(self.data_wait)} of the run)"
        )

    def checkpoint_advice(self) -> CheckpointAdvice | None:
        """The interval that loses the least expected time, when it differs from the
        run's by more than 2x; None otherwise, or without a checkpoint to measure."""
        if self.num_checkpoints < 1 or self.checkpoint_stall <= 0:
            return None
        cost = self.checkpoint_stall / self.num_checkpoints
        interval = self.in_steps / self.num_checkpoints
        assumed = self.num_failures == 0
        mtbf = self.assumed_mtbf_s if assumed else self.wall / self.num_failures
        best = math.sqrt(2 * cost * mtbf)
        if interval <= 0 or 0.5 <= interval / best <= 2:
            return None

        def lost(every: float) -> float:  # the share of time lost, checkpointing every `every`
            return cost / every + every / (2 * mtbf)

        saving = max(0.0, lost(interval) - lost(best))
        return CheckpointAdvice(
            interval_s=interval,
            best_interval_s=best,
            cost_s=cost,
            mtbf_s=mtbf,
            assumed=assumed,
            saving=saving,
            saving_s=saving * self.in_steps,
        )

    def summary(self) -> str:
        """One line: the goodput and the categories that took any time.

        Example:
            >>> TimeLedger(wall=10.0, starting=1.0, shutdown=0.2).summary()
            'goodput 88%: starting 1.0s, training 8.8s, shutdown 200ms'
        """
        values = self.as_dict()
        parts = [
            f"{name.replace('_', ' ')} {_duration(values[name])}"
            for name in CATEGORIES
            if values[name] >= 0.05 or name == "training"
        ]
        return f"goodput {self.goodput * 100:.0f}%: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """Everything, for ``time.json``."""
        return {
            "version": 1,
            "time": self.as_dict(),
            "time_per_rank": self.per_rank_dicts(),
            "per_rank": [_rank_record(r) for r in self.per_rank],
            "num_steps": self.num_steps,
            "num_checkpoints": self.num_checkpoints,
            "num_failures": self.num_failures,
            "data_sources": dict(self.data_sources),
            "assumed_mtbf_s": self.assumed_mtbf_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimeLedger:
        """Read back what :meth:`to_json` wrote."""
        time = data.get("time", {})
        return cls(
            **{name: float(time.get(name, 0.0)) for name in COUNTED},
            per_rank=tuple(RankTime(**r) for r in data.get("per_rank", [])),
            num_steps=int(data.get("num_steps", 0)),
            num_checkpoints=int(data.get("num_checkpoints", 0)),
            num_failures=int(data.get("num_failures", 0)),
            data_sources=dict(data.get("data_sources", {})),
            assumed_mtbf_s=float(data.get("assumed_mtbf_s", DEFAULT_ASSUMED_MTBF_S)),
        )

    @classmethod
    def from_hot(cls, values: Sequence[float], base: TimeLedger | None = None) -> TimeLedger:
        """The figures of ``time.bin`` (its doubles), with what only ``time.json`` holds
        (the data sources, the assumption) from ``base``."""
        base = base or cls()
        run = {name: values[RUN_AT[name]] for name in COUNTED}
        num_ranks = int(values[HOT_HEADER.index("num_ranks")])
        ranks = []
        for rank in range(num_ranks):
            at = RANKS_AT + rank * len(HOT_RANK)
            figures = {name: values[at + i] for i, name in enumerate(HOT_RANK)}
            figures["slowest_steps"] = int(figures["slowest_steps"])
            ranks.append(RankTime(rank, **figures))  # type: ignore[arg-type]
        return cls(
            **run,
            per_rank=tuple(ranks),
            num_steps=int(values[RUN_AT["num_steps"]]),
            num_checkpoints=int(values[RUN_AT["num_checkpoints"]]),
            num_failures=int(values[RUN_AT["num_failures"]]),
            data_sources=base.data_sources,
            assumed_mtbf_s=base.assumed_mtbf_s,
        )


RANK_CATEGORIES = ("data_wait", "barrier_wait", "checkpoint_stall", "replayed")
MIN_STEPS = 4  # fewer steps say nothing about who is slow
STRAGGLER_WAIT_SHARE = 0.05  # the others' wait, as a share of the run, worth a line
DATA_WAIT_SHARE = 0.2  # data waiting, as a share of a step, worth a line


def _rank_record(rank: RankTime) -> dict[str, Any]:
    return {
        "rank": rank.rank,
        "data_wait": rank.data_wait,
        "barrier_wait": rank.barrier_wait,
        "checkpoint_stall": rank.checkpoint_stall,
        "replayed": rank.replayed,
        "slowest_steps": rank.slowest_steps,
    }


def unpack_hot(data: bytes) -> list[float] | None:
    """The doubles of ``time.bin``; None for a file of another version or cut short."""
    count = len(data) // 8
    if count < RANKS_AT:
        return None
    values = list(struct.unpack(f"<{count}d", data[: count * 8]))
    if values[0] != HOT_VERSION or count < RANKS_AT + int(values[2]) * len(HOT_RANK):
        return None
    return values


def hot_seq(values: Sequence[float]) -> int:
    """The update count a ``time.bin`` was written at."""
    return int(values[1])


def read_ledger(run_dir: StorageDir) -> tuple[TimeLedger, int] | None:
    """The run's ledger and its update count, from ``time.json`` and ``time.bin``
    (whichever is newer); None when the run has neither."""
    base: TimeLedger | None = None
    seq = -1
    if run_dir.exists(TIME_FILE):
        try:
            data = json.loads(run_dir.read_text(TIME_FILE))
            base, seq = TimeLedger.from_json(data), int(data.get("seq", 0))
        except (ValueError, TypeError, KeyError):
            base = None
    if run_dir.exists(TIME_HOT_FILE):
        try:
            values = unpack_hot(run_dir.read_bytes(TIME_HOT_FILE))
        except OSError:
            values = None
        if values is not None and hot_seq(values) > seq:
            return TimeLedger.from_hot(values, base), hot_seq(values)
    return (base, seq) if base is not None else None


def format_duration(seconds: float) -> str:
    """``12.3s`` under a minute, ``4m05s`` under an hour, ``2h03m`` beyond.

    Example:
        >>> format_duration(3.21), format_duration(245), format_duration(7380)
        ('3.2s', '4m05s', '2h03m')
    """
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _duration(seconds: float) -> str:
    """:func:`format_duration`, or ``42ms`` under a second (a checkpoint's cost)."""
    return f"{seconds * 1000:.0f}ms" if seconds < 0.995 else format_duration(seconds)
