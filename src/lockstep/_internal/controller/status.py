"""``lockstep status`` on a live run: what every rank is doing, and who holds the run up.

The driver answers on a unix socket in its run directory (``.driver.sock``, readable and
writable by the run's own user only; nothing listens on the network), from a thread of
its own, so that it answers while its control loop is busy. An answer is built from what
the driver knows (attempts, reports, steps, its time ledger) and what each worker keeps
in its phase page (``execution/worker/phases.py``); with ``stacks``, or when a rank has
been in its own code for a while, from every rank's Python stack too (the signal the hang
watchdog uses; the run goes on).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep._core import storage
from lockstep._internal.controller import hang
from lockstep._internal.controller.ledger import Ledger
from lockstep._internal.controller.states import Attempt
from lockstep._internal.controller.steps import StepAggregator

SOCKET_FILE = ".driver.sock"
# A rank in its own code for longer than this is looked at in its stack (a collective?).
LOOK_AFTER_S = 1.0
# The driver's loop takes a step at least every poll (a quarter second): this much longer
# without one is worth saying.
STALE_S = 10.0
_REQUEST_LIMIT = 4096


@dataclass
class RankRow:
    """One rank, as ``lockstep status`` shows it (``--json``'s ``ranks``).

    ``phase`` is one of ``starting``, ``training``, ``data_wait``, ``report``,
    ``checkpoint``, ``collective``, ``dead``, ``restarting``; ``detail`` says more (the
    collective and where, the dataset and its slowest stage, the checkpoint's progress).
    """

    rank: int
    pid: int | None
    node: str
    phase: str
    seconds_in_phase: float | None
    steps: int
    since_last_report_s: float | None
    detail: str = ""
    stack: str | None = None
    # for the summary sentence, not shown: the step it waits in, the collective's name,
    # where in the user's code, the dataset, the checkpoint's figures
    facts: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, *, stacks: bool) -> dict[str, Any]:
        row = {
            "rank": self.rank,
            "pid": self.pid,
            "node": self.node,
            "phase": self.phase,
            "seconds_in_phase": _rounded(self.seconds_in_phase),
            "steps": self.steps,
            "since_last_report_s": _rounded(self.since_last_report_s),
            "detail": self.detail,
        }
        if stacks:
            row["stack"] = self.stack or ""
        return row


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class RankFacts:
    """What the driver knows of one rank, to make its row from."""

    rank: int
    pid: int | None
    node: str
    started: bool
    steps: int
    waiting_for_step: int | None  # reported a step the others have not reached (1-based)
    last_report: float | None  # time.monotonic() of its last report
    dead: str | None = None  # why, when it failed
    returned: bool = False


def rank_row(
    facts: RankFacts,
    page: Any,
    frames: list[hang.Frame] | None,
    *,
    now: float,
    run_dir: storage.StorageDir,
) -> RankRow:
    """One rank's row, from the driver's facts, its phase page (or None: on another node,
    the driver's facts alone say whether it waits in ``report()``) and its main thread's
    frames (or None)."""
    since_report = None if facts.last_report is None else now - facts.last_report
    row = RankRow(facts.rank, facts.pid, facts.node, "training", None, facts.steps, since_report)
    if facts.dead is not None:
        row.phase, row.detail = "dead", facts.dead
    elif not facts.started:
        row.phase = "starting"
    elif page is not None:
        _from_page(row, page, now, run_dir)
    elif facts.waiting_for_step is not None or facts.returned:
        row.phase = "report"
    else:  # no page to read (a rank on another node): in its code since its last report
        row.seconds_in_phase = since_report
    if facts.returned:
        row.detail = "its function returned; waits for the others to end"
    elif row.phase == "report":
        step = facts.waiting_for_step or facts.steps
        row.facts["step"] = step
        row.detail = row.detail or f"waits for the others in report() for step {step}"
        if row.seconds_in_phase is None and facts.last_report is not None:
            row.seconds_in_phase = now - facts.last_report
    if frames is not None and row.phase == "training":
        _from_stack(row, frames)
    return row


def _from_page(row: RankRow, page: Any, now: float, run_dir: storage.StorageDir) -> None:
    row.phase = page.phase
    row.seconds_in_phase = max(0.0, now - page.since)
    if page.phase == "data_wait":
        row.facts.update(dataset=page.what, stage=page.detail)
        stage = f": its slowest stage is {page.detail}" if page.detail else ""
        row.detail = f"waits for {page.what or 'data'}{stage}"
    elif page.phase == "checkpoint":
        written = _written(run_dir, page.what)
        row.facts.update(size=page.size, written=written, seconds=row.seconds_in_phase)
        row.detail = f"persists a checkpoint: {_progress(written, page.size, row.seconds_in_phase)}"


def _from_stack(row: RankRow, frames: list[hang.Frame]) -> None:
    """A rank in its own code: in a collective (waiting for the others) or computing."""
    where = hang.innermost_user_frame(frames)
    if where is not None:
        row.facts["where"] = where.describe()
    collective = hang.collective_call(frames)
    if collective is not None:
        row.phase = "collective"
        row.facts["collective"] = collective
        row.detail = f"in {collective}" + (f", from {where.describe()}" if where else "")
    elif where is not None:
        row.detail = f"in {where.describe()}"


def attempt_rows(
    run: Attempt,
    steps: StepAggregator,
    ledger: Ledger,
    run_dir: storage.StorageDir,
    *,
    stacks: bool,
    now: float,
    recovering: bool = False,
) -> list[RankRow]:
    """A row for every rank of the running attempt ``run`` (``recovering``: after a
    failure, its ranks not yet started are restarting)."""
    places = run.group.worker_places()
    counts, waiting = steps.counts(), set(steps.waiting())
    rows = []
    for rank in range(run.num_workers):
        place = places.get(rank)
        failure = run.failures.get(rank)
        facts = RankFacts(
            rank=rank,
            pid=place.pid if place is not None else None,
            node=place.node if place is not None else "",
            started=rank in run.running,
            steps=counts.get(rank, 0),
            waiting_for_step=steps.next_step + 1 if rank in waiting else None,
            last_report=ledger.last_report(rank),
            dead=failure.summary if failure is not None else None,
            returned=rank in run.return_values,
        )
        row = rank_row(facts, place.phase if place else None, None, now=now, run_dir=run_dir)
        if recovering and row.phase == "starting":
            row.phase = "restarting"
        rows.append(row)
    _add_stacks(run, rows, stacks=stacks)
    return rows


def _add_stacks(run: Attempt, rows: list[RankRow], *, stacks: bool) -> None:
    """Every rank's stack (when asked), or those of the ranks a while in their own code:
    a collective shows there, and where they are."""
    looked = [
        r
        for r in rows
        if stacks or (r.phase == "training" and (r.seconds_in_phase or 0) > LOOK_AFTER_S)
    ]
    if not looked:
        return
    collected = run.group.collect_stacks()
    for row in looked:
        if row.rank not in collected:
            continue
        frames = hang.main_frames(collected[row.rank][1])
        row.stack = hang.format_frames(_in_function(frames))
        if row.phase == "training":
            _from_stack(row, frames)


def _in_function(frames: list[hang.Frame]) -> list[hang.Frame]:
    """The frames from the training function inward (a forked worker's stack begins in
    the driver's code, where it was forked)."""
    for index, frame in enumerate(frames):
        if frame.function == "_run_function" and frame.filename.endswith("worker/main.py"):
            return frames[:index]
    return frames


def _written(run_dir: storage.StorageDir, rel: str) -> float | None:
    """Bytes under ``rel`` of the run directory so far (a local one), or None."""
    if not rel or not isinstance(run_dir, storage.LocalDir):
        return None
    total = 0
    for root, _, files in os.walk(run_dir.join(rel)):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return float(total)


def _progress(written: float | None, size: float, seconds: float | None) -> str:
    """``3.1 GB written of about 4.0 GB, 210 MB/s``."""
    if written is None:
        return f"about {_bytes(size)}" if size else "size unknown"
    text = f"{_bytes(written)} written" + (f" of about {_bytes(size)}" if size else "")
    if seconds:
        text += f", {_bytes(written / seconds)}/s"
    return text


def _bytes(value: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _who(row: RankRow) -> str:
    place = ", ".join(
        part
        for part in (f"pid {row.pid}" if row.pid else "", f"node {row.node}" if row.node else "")
        if part
    )
    return f"rank {row.rank}" + (f" ({place})" if place else "")


def _for(seconds: float | None) -> str:
    return "" if seconds is None else f" for {_secs(seconds)}"


def _secs(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


# Who holds a run up first: a rank in a collective the others never join, then one
# waiting for its data, one persisting a checkpoint, one in its own code.
_CULPRIT_ORDER = ("dead", "collective", "data_wait", "checkpoint", "training", "starting")


def summary(rows: Sequence[RankRow], *, state: str, note: str | None = None) -> str:
    """The one sentence ``lockstep status`` starts with: the culprit, named as a colleague
    would, and where the others wait.

    Example:
        >>> rows = [RankRow(0, 7, "n1", "report", 41.0, 16, 41.0, facts={"step": 17}),
        ...         RankRow(1, 8, "n2", "collective", 41.0, 16, 41.0,
        ...                 facts={"collective": "all_reduce", "where": "step() at train.py:88"})]
        >>> for part in summary(rows, state="running").split("; "):
        ...     print(part)
        rank 1 (pid 8, node n2) has been in all_reduce for 41 s in step() at train.py:88
        rank 0 waits in report() for step 17
    """
    if note is not None:
        return note
    if not rows:
        return f"the run is {state}"
    waiting = [r for r in rows if r.phase == "report"]
    others = [r for r in rows if r.phase != "report"]
    if not others:
        step = waiting[0].facts.get("step")
        return f"all ranks wait in report() for step {step}: the driver is recording it"
    phases = {r.phase for r in others}
    if len(others) == len(rows) > 1 and len(phases) == 1:
        text = _all_ranks(others)
    else:
        culprit = min(
            others, key=lambda r: (_CULPRIT_ORDER.index(r.phase), -(r.seconds_in_phase or 0))
        )
        text = _one_rank(culprit)
    if waiting:
        steps = sorted({r.facts.get("step") for r in waiting}, key=str)
        text += f"; {_ranks([r.rank for r in waiting])} wait{'' if len(waiting) > 1 else 's'}"
        text += f" in report() for step {', '.join(map(str, steps))}"
    return text


def _one_rank(row: RankRow) -> str:
    who, facts = _who(row), row.facts
    where = f" in {facts['where']}" if facts.get("where") else ""
    if row.phase == "collective":
        return f"{who} has been in {facts['collective']}{_for(row.seconds_in_phase)}{where}"
    if row.phase == "data_wait":
        return f"{who} has been waiting for data{_for(row.seconds_in_phase)}{_stage(facts)}"
    if row.phase == "checkpoint":
        return f"{who} is persisting a checkpoint: {_checkpoint(facts)}"
    if row.phase == "dead":
        return f"{who} is dead: {row.detail}"
    if row.phase == "starting":
        return f"{who} has not started its training function yet"
    return f"{who} has been in its own code{_for(row.seconds_in_phase)}{where}"


def _all_ranks(rows: Sequence[RankRow]) -> str:
    first, longest = rows[0], max((r.seconds_in_phase or 0) for r in rows)
    if first.phase == "data_wait":
        return f"all ranks waiting for data for {_secs(longest)}{_stage(first.facts)}"
    if first.phase == "checkpoint":
        merged = {
            "size": sum(r.facts.get("size") or 0 for r in rows),
            "written": sum(r.facts.get("written") or 0 for r in rows),
            "seconds": longest,
        }
        return f"committing a checkpoint: {_checkpoint(merged)}"
    if first.phase == "collective":
        return f"all ranks in {first.facts['collective']} for {_secs(longest)}"
    if first.phase == "starting":
        return "starting: no rank runs its training function yet"
    since = [r.since_last_report_s for r in rows if r.since_last_report_s is not None]
    steps = max(r.steps for r in rows)
    if not since:
        return "all ranks in their training function; none has reported yet"
    where = {r.facts.get("where") for r in rows} - {None}
    inside = f", in {where.pop()}" if len(where) == 1 else ""
    return (
        f"all ranks in their training function after step {steps}{inside}, the last report "
        f"{_secs(min(since))} ago"
    )


def _stage(facts: Mapping[str, Any]) -> str:
    if facts.get("stage"):
        return f": {facts.get('dataset') or 'the dataset'}'s {facts['stage']} is the slowest stage"
    return f" ({facts['dataset']})" if facts.get("dataset") else ""


def _checkpoint(facts: Mapping[str, Any]) -> str:
    return _progress(facts.get("written"), facts.get("size") or 0.0, facts.get("seconds"))


def driver_note(pid: int, idle_s: float, main_thread: int | None) -> str | None:
    """ "the driver (pid 99) has not updated the run for 40 s", when its loop is stuck,
    with where it is (its main thread's innermost frame of the user's)."""
    if idle_s < STALE_S:
        return None
    where = ""
    frame = sys._current_frames().get(main_thread) if main_thread is not None else None
    if frame is not None:
        frames = []
        while frame is not None:
            frames.append(
                hang.Frame(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
            )
            frame = frame.f_back
        found = hang.innermost_user_frame(frames)
        if frames:
            where = f", in {frames[0].describe()}"
            if found is not None and found is not frames[0]:
                where += f" (from {found.describe()})"
    return f"the driver (pid {pid}) has not updated the run for {_secs(idle_s)}{where}"


class StatusServer:
    """Answers ``lockstep status`` for one run, on ``{run}/.driver.sock``, from a thread.

    Args:
        run_dir: The run directory (local; elsewhere there is no socket to offer).
        answer: Builds the answer to a request (``{"stacks": bool}``).
    """

    def __init__(
        self, run_dir: storage.StorageDir, answer: Callable[[Mapping[str, Any]], dict[str, Any]]
    ) -> None:
        self._answer = answer
        self._dir_fd: int | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._path = ""
        if isinstance(run_dir, storage.LocalDir):
            with contextlib.suppress(OSError):
                self._listen(run_dir)

    def _listen(self, run_dir: storage.StorageDir) -> None:
        # Through the directory's descriptor: a socket's path may not be longer than 107
        # bytes, and a run directory's may well be.
        self._dir_fd = os.open(run_dir.join(""), os.O_RDONLY | os.O_DIRECTORY)
        self._path = f"/proc/self/fd/{self._dir_fd}/{SOCKET_FILE}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)  # an earlier driver's, killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self._path)
            os.chmod(self._path, 0o600)  # before listen(): nobody else ever connects
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="lockstep-status", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        sock = self._sock  # close() lets go of it while this thread may still loop
        assert sock is not None
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed
            with conn, contextlib.suppress(OSError, ValueError):
                self._reply(conn)

    def _reply(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        request = json.loads(_read_line(conn) or "{}")
        try:
            answer = self._answer(request if isinstance(request, dict) else {})
        except Exception as exc:  # a status must never end the run
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        conn.sendall(json.dumps(answer, default=str).encode() + b"\n")

    def close(self) -> None:
        """Stop answering; the socket goes."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept()
            sock.close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._dir_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
            os.close(self._dir_fd)
            self._dir_fd = None


def _read_line(conn: socket.socket) -> str:
    data = b""
    while b"\n" not in data and len(data) < _REQUEST_LIMIT:
        chunk = conn.recv(1024)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode()


def ask(run_path: str, *, stacks: bool = False, timeout: float = 10.0) -> dict[str, Any] | None:
    """The live status of the run in the local directory ``run_path``; None when no driver
    answers there (none runs, or it is stuck)."""
    dir_fd = os.open(run_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(f"/proc/self/fd/{dir_fd}/{SOCKET_FILE}")
                sock.sendall(json.dumps({"stacks": stacks}).encode() + b"\n")
                data = b"".join(_chunks(sock))
            except OSError:
                return None
    finally:
        os.close(dir_fd)
    try:
        answer = json.loads(data)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _chunks(sock: socket.socket) -> Iterator[bytes]:
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return
        yield chunk
