"""The hang watchdog: when no rank has made progress for ``hang_timeout_s``, name the rank
that is stuck and where, from every rank's Python stack.

Progress is a report or a heartbeat from any rank. The stacks come from each worker's
faulthandler (see ``worker.main``), in its text format::

    main thread 0x00007f0e5c3c7740
    Thread 0x00007f0e4b7fe640 (most recent call first):
      File "/usr/lib/python3.11/threading.py", line 324 in wait
      ...

    Current thread 0x00007f0e5c3c7740 (most recent call first):
      File "/home/me/train.py", line 31 in stuck_here

The culprit is the rank that is not waiting for the others (in ``report()`` or a
collective); when every rank waits, or several do not, the one that reported least.
"""

from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lockstep._core.errors import WorkerFailure
from lockstep._internal.controller.steps import StepAggregator


@dataclass(frozen=True)
class Frame:
    """One line of a stack: where, and in which function."""

    filename: str
    lineno: int
    function: str

    def describe(self) -> str:
        """``stuck_here() at train.py:31``."""
        return f"{self.function}() at {os.path.basename(self.filename)}:{self.lineno}"


@dataclass(frozen=True)
class Hang:
    """The decision: no rank made progress for ``idle_s`` seconds."""

    idle_s: float


class HangPolicy:
    """Decides HANG when the last progress is longer ago than the timeout.

    Progress is a report or a heartbeat from any rank. Armed once every rank has started
    its training function: a backend's setup (imports, the process group's rendezvous)
    has timeouts of its own and is no step.

    Example:
        >>> policy = HangPolicy(60.0)
        >>> policy.reset(num_workers=1, now=0.0)
        >>> policy.decide(now=100.0)  # rank 0 is still setting up
        >>> policy.rank_started(0, now=100.0)
        >>> policy.decide(now=130.0), policy.decide(now=161.0)
        (None, Hang(idle_s=61.0))
        >>> HangPolicy(None).decide(now=1e12)
    """

    def __init__(
        self, timeout_s: float | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._last = clock()
        self._num_workers = 0
        self._started: set[int] = set()

    def reset(self, num_workers: int, now: float | None = None) -> None:
        """A new attempt of ``num_workers`` ranks, none started yet."""
        self._num_workers, self._started = num_workers, set()
        self.progress(now)

    def rank_started(self, rank: int, now: float | None = None) -> None:
        self._started.add(rank)
        self.progress(now)

    def progress(self, now: float | None = None) -> None:
        self._last = self._clock() if now is None else now

    def decide(self, now: float | None = None) -> Hang | None:
        if self.timeout_s is None or len(self._started) < self._num_workers:
            return None
        idle = (self._clock() if now is None else now) - self._last
        return Hang(idle) if idle > self.timeout_s else None


_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_MAIN = re.compile(r"^main thread (0x[0-9a-f]+)")


def parse_stacks(text: str) -> tuple[str | None, dict[str, list[Frame]]]:
    """``(main thread id, {thread id: frames, innermost first})`` from a worker's dump.

    Example:
        >>> main, threads = parse_stacks(
        ...     "main thread 0x00000000000000aa\\n"
        ...     "Current thread 0x00000000000000aa (most recent call first):\\n"
        ...     '  File "/src/train.py", line 31 in stuck_here\\n'
        ...     '  File "/src/train.py", line 40 in train_func\\n')
        >>> main, threads[main][0].describe()
        ('0x00000000000000aa', 'stuck_here() at train.py:31')
    """
    main: str | None = None
    threads: dict[str, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        if (found := _MAIN.match(line)) is not None:
            main = found.group(1)
        elif (found := _THREAD.match(line)) is not None:
            current = threads.setdefault(found.group(1), [])
        elif current is not None and (found := _FRAME.match(line)) is not None:
            current.append(Frame(found.group(1), int(found.group(2)), found.group(3)))
    return main, threads


def main_frames(text: str) -> list[Frame]:
    """The frames of the thread that runs the training function, innermost first."""
    main, threads = parse_stacks(text)
    if main is not None and main in threads:
        return threads[main]
    return next(iter(threads.values()), [])


_PACKAGE = os.path.dirname(sys.modules["lockstep"].__file__ or "") + os.sep
_TESTING = _PACKAGE + "testing" + os.sep  # lockstep.testing's faults count as the user's code
_STDLIB = tuple(
    {os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")} | {"<frozen "}
)
# Installed packages: this interpreter's, and those a virtualenv sees from the system's
# Python (--system-site-packages), which lie inside that Python's standard library.
_LIBRARIES = tuple(
    {os.path.join(sysconfig.get_paths()[k], "") for k in ("purelib", "platlib")}
    | {os.path.join(path, "") for path in site.getsitepackages()}
)
_SITE_DIRS = re.compile(r"[/\\](?:site|dist)-packages[/\\]")


def _is_library(filename: str) -> bool:
    return filename.startswith(_LIBRARIES) or _SITE_DIRS.search(filename) is not None


# Where a rank waits for the others: lockstep's report() and collectives, and the
# frameworks' collectives (a GBDT library's C++ training step holds its all-reduce).
_COLLECTIVES = re.compile(
    r"[/\\](?:torch[/\\]distributed|xgboost|lightgbm|horovod|"
    r"tensorflow[/\\]python[/\\](?:distribute|ops[/\\]collective))[/\\]"
)


def _is_ours(filename: str) -> bool:
    return filename.startswith(_PACKAGE) and not filename.startswith(_TESTING)


def _is_stdlib(filename: str) -> bool:
    # site-packages lies inside the standard library's directory
    return filename.startswith(_STDLIB) and not _is_library(filename)


def innermost_user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the user's own code: not lockstep's, the standard library's
    or an installed package's; failing that, not lockstep's or the standard library's."""
    outside = [f for f in frames if not _is_ours(f.filename)]
    not_stdlib = [f for f in outside if not _is_stdlib(f.filename)]
    users = [f for f in not_stdlib if not _is_library(f.filename)]
    for candidates in (users, not_stdlib, outside, frames):
        if candidates:
            return candidates[0]
    return None


def waiting_in(frames: list[Frame]) -> str | None:
    """``"report()"`` or ``"a collective"`` where the rank waits for the others, else None.

    Read from the frames inside the innermost user frame: lockstep's ``report()`` or
    collective, or a framework's collective module anywhere among the library frames
    there (TensorFlow's runs its all-reduce several calls below its distribute module).
    """
    for frame in frames:
        name = frame.filename
        if _is_stdlib(name):
            continue
        if _is_ours(name):
            if frame.function in ("report", "_exchange"):
                return "report()"
            if frame.function == "_collective":
                return "a collective"
            continue
        if _COLLECTIVES.search(name):
            return "a collective"
        if not _is_library(name):
            return None  # the user's own code: not waiting for anyone
    return None


@dataclass(frozen=True)
class RankState:
    """What the driver knows of one rank when the run hangs."""

    pid: int | None
    num_reports: int
    stacks: str  # faulthandler's text; empty when the rank did not answer
    in_report: bool = False  # reported a step the others have not reached


def hang_failure(
    ranks: Mapping[int, RankState], *, idle_s: float, waiting_step: int
) -> WorkerFailure:
    """The failure that names the stuck rank, where it is, and where the others wait.

    Example:
        >>> dump = ('main thread 0x01\\nCurrent thread 0x01 (most recent call first):\\n'
        ...         '  File "/src/train.py", line {} in {}\\n')
        >>> ranks = {0: RankState(7, 3, dump.format(1, "train_func"), in_report=True),
        ...          1: RankState(8, 2, dump.format(31, "stuck_here"))}
        >>> summary = hang_failure(ranks, idle_s=60.0, waiting_step=3).summary
        >>> for part in summary.split("; "):
        ...     print(part)
        rank 1 (pid 8) made no progress for 60 s, in stuck_here() at train.py:31
        rank 0 waiting in report() for step 3
    """
    waits = {
        rank: "report()" if s.in_report else waiting_in(main_frames(s.stacks))
        for rank, s in ranks.items()
    }
    culprit = _culprit(ranks, waits)
    state = ranks[culprit]
    frames = main_frames(state.stacks)
    where = innermost_user_frame(frames)
    summary = f"rank {culprit} (pid {state.pid}) made no progress for {_seconds(idle_s)} s"
    summary += f", in {where.describe()}" if where else " (its stack could not be read)"
    for place in ("report()", "a collective"):
        others = [r for r, w in sorted(waits.items()) if w == place and r != culprit]
        if others:
            which = f"rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}"
            step = f" for step {waiting_step}" if place == "report()" else ""
            summary += f"; {which} waiting in {place}{step}"
    return WorkerFailure(
        rank=culprit,
        pid=state.pid,
        kind="hang",
        summary=summary,
        traceback=format_frames([f for f in frames if not _is_ours(f.filename)]),
        full_traceback=state.stacks,
    )


def _culprit(ranks: Mapping[int, RankState], waits: Mapping[int, str | None]) -> int:
    working = [r for r, s in ranks.items() if s.stacks and waits[r] is None]
    candidates = working or list(ranks)
    return min(candidates, key=lambda r: (ranks[r].num_reports, r))


def format_frames(frames: list[Frame]) -> str:
    """A stack in the order of a Python traceback (outermost first)."""
    if not frames:
        return ""
    lines = ["Stack (most recent call last):"]
    lines += [f'  File "{f.filename}", line {f.lineno}, in {f.function}' for f in reversed(frames)]
    return "\n".join(lines)


def stacks_text(summary: str, ranks: Mapping[int, RankState]) -> str:
    """The error file of a hang: what happened, then every rank's stacks."""
    parts = [summary, ""]
    for rank, state in sorted(ranks.items()):
        parts.append(f"=== rank {rank} (pid {state.pid}), {state.num_reports} reports")
        parts.append(state.stacks.rstrip() or "(no stack: the rank did not answer)")
        parts.append("")
    return "\n".join(parts)


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def describe_hang(
    hang: Hang,
    stacks: Mapping[int, tuple[int, str]],
    steps: StepAggregator,
    running: list[int],
) -> tuple[WorkerFailure, str]:
    """The failure naming the stuck rank and the text of every rank's stacks (for
    ``errors/attempt_N.txt``), from the stacks the group collected (``{rank: (pid,
    text)}``) and the steps each rank reported."""
    counts = steps.counts()
    waiting = set(steps.waiting())
    ranks = {
        rank: RankState(
            pid=stacks[rank][0] if rank in stacks else None,
            num_reports=counts.get(rank, 0),
            stacks=stacks[rank][1] if rank in stacks else "",
            in_report=rank in waiting,
        )
        for rank in running
    }
    failure = hang_failure(ranks, idle_s=hang.idle_s, waiting_step=steps.next_step + 1)
    return failure, stacks_text(failure.summary, ranks)
