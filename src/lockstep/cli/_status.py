"""``lockstep status [RUN]``: what a live run is doing, from another terminal.

A live run's driver answers on a socket in its run directory (see
``lockstep._internal.controller.status``); a run whose driver is gone (finished, failed,
stopped, killed) is read from its files: its final state and its time ledger. Without
RUN, every live run under the storage path is listed.

``--json`` prints, for one run, an object with:

- ``summary``: the sentence the text starts with;
- ``state``: ``running``, ``restarting``, ``finished``, ``failed`` or ``stopped``;
- ``ranks``: one object per rank of a live run, with ``rank``, ``pid``, ``node``,
  ``phase`` (``starting``, ``training``, ``data_wait``, ``report``, ``checkpoint``,
  ``collective``, ``dead``, ``restarting``), ``seconds_in_phase``, ``steps``,
  ``since_last_report_s``, ``detail`` and, with ``--stacks``, ``stack``; empty once
  the run ended;
- ``run``, ``path``, ``attempt``, ``iteration``, ``driver`` (``pid``, ``host``,
  ``seconds_since_update``), and ``time``: the time ledger so far (the keys of
  ``lockstep runs show --json``'s ``"time"``), null for a run without one.

Without RUN, ``--json`` prints ``{"runs": [...]}``, one such object per live run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

from lockstep._core import flags, storage
from lockstep._core.time_ledger import read_ledger
from lockstep._internal.controller import status as live

EXIT_NOT_FOUND = 1
_STATES = {"finished": "finished", "errored": "failed", "interrupted": "stopped"}


def add_parser(commands: Any, formatter: Any) -> None:
    """Register ``lockstep status``."""
    status = commands.add_parser(
        "status",
        help="what a live run is doing now: a sentence, then every rank's phase",
        description="Say what a run is doing: who holds it up, then each rank's phase, how "
        "long it has been in it, its steps and the time since its last report. Without RUN, "
        "list the live runs under the storage path. A run that ended shows its final state "
        "and where its time went.",
        formatter_class=formatter,
    )
    status.add_argument("run", nargs="?", help="a run directory, or a run's name")
    status.add_argument(
        "--storage-path",
        default=None,
        help=f"where the runs are; default: ${flags.DEFAULT_STORAGE_PATH.name}, else "
        f"{flags.DEFAULT_STORAGE_PATH.default}",
    )
    status.add_argument("--json", action="store_true", help="print JSON (schema: see docs)")
    status.add_argument("--stacks", action="store_true", help="add each rank's Python stack")
    status.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        default=None,
        type=float,
        metavar="SECONDS",
        help="refresh every SECONDS (2 when not given) until Ctrl-C",
    )


def main(args: argparse.Namespace) -> int:
    """Carry out ``lockstep status``; returns the exit code."""
    root = os.path.expanduser(args.storage_path or flags.DEFAULT_STORAGE_PATH.get())
    while True:
        code = _once(root, args)
        if args.watch is None or code != 0:
            return code
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
        if sys.stdout.isatty():
            print("\033[2J\033[H", end="")


def _once(root: str, args: argparse.Namespace) -> int:
    if args.run is None:
        answers = [a for a in (live.ask(p) for p in live_run_dirs(root)) if a is not None]
        if args.json:
            print(json.dumps({"runs": answers}, indent=1))
        elif not answers:
            print(f"no live run under {root}")
        for answer in answers if not args.json else []:
            print(f"{answer['run']}  {answer['state']}  {answer['path']}\n  {answer['summary']}")
        return 0
    path = locate(root, args.run)
    if path is None:
        print(f"lockstep status: no run {args.run!r} under {root}", file=sys.stderr)
        return EXIT_NOT_FOUND
    answer = live.ask(path, stacks=args.stacks) or ended(path)
    print(json.dumps(answer, indent=1) if args.json else text(answer, stacks=args.stacks))
    return 0


def live_run_dirs(root: str) -> list[str]:
    """The run directories under ``root`` (and its Tune experiments' trials) whose driver
    offers a socket: the candidates for live runs."""
    found = []
    for path in _subdirs(root):
        if os.path.exists(os.path.join(path, live.SOCKET_FILE)):
            found.append(path)
        elif not os.path.exists(os.path.join(path, storage.STATE_FILE)):  # an experiment
            trials = _subdirs(path)
            found += [t for t in trials if os.path.exists(os.path.join(t, live.SOCKET_FILE))]
    return sorted(found)


def _subdirs(path: str) -> list[str]:
    try:
        return [e.path for e in os.scandir(path) if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return []


def locate(root: str, name: str) -> str | None:
    """The run directory ``name`` names: a path, a run under ``root``, or a trial of an
    experiment under it."""
    for path in (name, os.path.join(root, name)):
        if os.path.isfile(os.path.join(path, storage.STATE_FILE)):
            return os.path.abspath(path)
    for experiment in _subdirs(root):
        path = os.path.join(experiment, name)
        if os.path.isfile(os.path.join(path, storage.STATE_FILE)):
            return path
    return None


def ended(path: str) -> dict[str, Any]:
    """The status of a run no driver answers for: its final state and time ledger."""
    run_dir = storage.StorageDir.from_uri(path)
    state = _read_json(os.path.join(path, storage.STATE_FILE))
    driver = _read_json(os.path.join(path, storage.DRIVER_FILE))
    ledger = read_ledger(run_dir)
    status = str(state.get("status", "running"))
    iteration = int(state.get("training_iteration", 0))
    name = _STATES.get(status, "stopped")
    if status == "running" and _alive_here(driver):
        name = "running"
    sentence = _ended_sentence(status, iteration, state, driver, ledger[0] if ledger else None)
    return {
        "run": os.path.basename(path.rstrip("/")),
        "path": path,
        "state": name,
        "summary": sentence,
        "attempt": int(state.get("attempts", 0)),
        "iteration": iteration,
        "driver": {
            "pid": driver.get("pid"),
            "host": driver.get("host"),
            "seconds_since_update": _since_update(path),
        },
        "ranks": [],
        "time": ledger[0].as_dict() if ledger else None,
        "time_per_rank": ledger[0].per_rank_dicts() if ledger else [],
    }


def _ended_sentence(
    status: str, iteration: int, state: dict[str, Any], driver: dict[str, Any], ledger: Any
) -> str:
    goodput = f", goodput {ledger.goodput * 100:.0f}%" if ledger is not None else ""
    if status == "finished":
        return f"finished after {iteration} iterations{goodput}"
    if status == "errored":
        message = str((state.get("error") or {}).get("message", "")).splitlines()
        return f"failed at iteration {iteration}: {message[0] if message else 'see error.txt'}"
    if status == "interrupted":
        return f"stopped at iteration {iteration}{goodput}; it can be continued (restore)"
    pid, host = driver.get("pid"), driver.get("host")
    if host and host != socket.gethostname():
        return f"the driver runs on {host} (pid {pid}): ask there; iteration {iteration} so far"
    if isinstance(pid, int) and _alive(pid):
        return (
            f"the driver (pid {pid}) does not answer: it is preparing the run (its datasets, "
            f"its workers) or stuck; iteration {iteration} so far"
        )
    return (
        f"the driver (pid {pid}) is gone without ending the run (killed?) at iteration "
        f"{iteration}; it can be continued (restore)"
    )


def _alive_here(driver: dict[str, Any]) -> bool:
    pid = driver.get("pid")
    here = driver.get("host") in (None, socket.gethostname())
    return here and isinstance(pid, int) and _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's: alive, and not ours to ask
    return True


def _since_update(path: str) -> float | None:
    """Seconds since the run's files last changed."""
    times = []
    for name in (storage.RESULTS_FILE, storage.STATE_FILE, "time.bin", "time.json"):
        try:
            times.append(os.path.getmtime(os.path.join(path, name)))
        except OSError:
            continue
    return round(time.time() - max(times), 3) if times else None


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def text(answer: dict[str, Any], *, stacks: bool = False) -> str:
    """The answer as people read it: the sentence, a row per rank, the ledger."""
    lines = [answer.get("summary") or answer.get("error", ""), ""]
    ranks = answer.get("ranks") or []
    if ranks:
        header = ("rank", "pid", "node", "phase", "in phase", "steps", "last report", "detail")
        table = [header] + [_cells(r) for r in ranks]
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        for row in table:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
        lines.append("")
    if stacks:
        for rank in ranks:
            lines += [f"--- rank {rank['rank']} ---", rank.get("stack") or "(no stack)", ""]
    figures = answer.get("time")
    if figures:
        from lockstep._core.time_ledger import TimeLedger

        ledger = TimeLedger(**{k: figures[k] for k in figures if k not in ("training", "goodput")})
        ended = answer.get("state") in ("finished", "failed", "stopped")
        lines.append(f"time{'' if ended else ' so far'}: {ledger.summary()}")
    lines.append(f"{answer.get('state')}, attempt {answer.get('attempt')}, {answer.get('path')}")
    return "\n".join(lines)


def _cells(rank: dict[str, Any]) -> tuple[str, ...]:
    def secs(value: Any) -> str:
        return "-" if value is None else f"{value:.1f} s"

    return (
        str(rank["rank"]),
        str(rank.get("pid") or "-"),
        rank.get("node") or "-",
        rank["phase"],
        secs(rank.get("seconds_in_phase")),
        str(rank.get("steps", 0)),
        secs(rank.get("since_last_report_s")),
        rank.get("detail") or "",
    )
