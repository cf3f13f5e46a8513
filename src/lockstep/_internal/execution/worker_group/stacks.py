"""Reading the workers' Python stacks for the hang watchdog: the files they write on a
signal, or, for a worker that does not answer, py-spy when it is installed.

Both come out in faulthandler's text format (``main thread 0x...`` first), which the
controller's ``hang`` module reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from lockstep._internal.execution.messages import STACK_SIGNAL

PY_SPY_TIMEOUT_S = 10.0


def collect(
    pids: dict[int, int], fds: Mapping[int, int | None], timeout: float
) -> dict[int, tuple[int, str]]:
    """The stacks of the workers of ``pids`` (by rank) on this machine, with their pids:
    each worker with a stack file (``fds``, its descriptor) is signalled and writes its own
    (a thread of its own, under the GIL: one stuck in C code that released it answers too);
    one without, or that does not answer, is read with py-spy when it is installed. Each
    is the latest dump (a worker asked again, by ``lockstep status``, adds a dump to its
    file)."""
    signalled, before = {}, {}
    for rank, pid in pids.items():
        if fds.get(rank) is not None:
            path = f"/proc/{pid}/fd/{fds[rank]}"
            try:
                before[rank] = os.path.getsize(path)  # the earlier dumps come first
                os.kill(pid, STACK_SIGNAL)
                signalled[rank] = path
            except OSError:
                continue
    texts = {
        rank: latest_dump(text, before[rank])
        for rank, text in read_when_written(signalled, timeout, before).items()
    }
    for rank, pid in pids.items():
        if not has_stack(texts.get(rank, "")):
            texts[rank] = py_spy_dump(pid)
    return {rank: (pid, texts[rank]) for rank, pid in pids.items()}


def read_when_written(
    paths: dict[int, str], timeout: float, sizes: dict[int, int] | None = None
) -> dict[int, str]:
    """The text of each file (a worker's ``/proc/PID/fd/N``) once a stack dump follows
    its first line (or, given its size before the signal, the earlier dumps) and the file
    stopped growing (the handler writes it in a burst), or what is there at ``timeout``."""
    deadline = time.monotonic() + timeout
    texts: dict[int, str] = dict.fromkeys(paths, "")
    settled: set[int] = set()
    sizes = sizes or {}
    while len(settled) < len(paths) and time.monotonic() < deadline:
        time.sleep(0.05)  # the workers write the files; there is nothing else to wait on
        for rank, path in paths.items():
            if rank in settled:
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:  # the worker is gone
                settled.add(rank)
                continue
            if text == texts[rank] and has_stack(latest_dump(text, sizes.get(rank, 0))):
                settled.add(rank)
            texts[rank] = text
    return texts


def latest_dump(text: str, size: int) -> str:
    """The file's first line (which thread runs the function) and the dump written after
    its first ``size`` bytes (the earlier dumps, of earlier asks)."""
    first, _, _ = text.partition("\n")
    if size <= len(first) + 1:
        return text
    return first + "\n" + text.encode("utf-8")[size:].decode("utf-8", "replace")


def has_stack(text: str) -> bool:
    """Whether a dump holds a stack beyond its first line."""
    return text.count("\n") > 1


def py_spy_dump(pid: int) -> str:
    """Process ``pid``'s stacks from ``py-spy dump``, or "" without py-spy or on failure.

    py-spy reads the process's memory from outside (ptrace: a descendant of this
    process needs no root), so it answers even for a worker that never set up its
    signal handler.
    """
    exe = shutil.which("py-spy")
    if exe is None:
        return ""
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid), "--json", "--full-filenames"],
            capture_output=True,
            text=True,
            timeout=PY_SPY_TIMEOUT_S,
            check=False,
        )
        threads = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return ""
    return faulthandler_text(threads)


def faulthandler_text(threads: list[dict[str, Any]]) -> str:
    """py-spy's JSON threads, as faulthandler's text with the main thread named first.

    Example:
        >>> print(faulthandler_text([{"thread_id": 10, "thread_name": "MainThread",
        ...     "frames": [{"name": "Session.report", "filename": "/s.py", "line": 3}]}]))
        main thread 0x000000000000000a
        Thread 0x000000000000000a (most recent call first):
          File "/s.py", line 3 in report
        <BLANKLINE>
    """
    if not threads:
        return ""
    # On Linux the main thread's id is the process id; py-spy does not always find names.
    main = next(
        (
            t
            for t in threads
            if t.get("os_thread_id") is not None and t["os_thread_id"] == t.get("pid")
        ),
        next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0]),
    )
    lines = [f"main thread 0x{int(main['thread_id']):016x}"]
    for thread in threads:
        lines.append(f"Thread 0x{int(thread['thread_id']):016x} (most recent call first):")
        for frame in thread.get("frames", []):
            # py-spy qualifies methods ("Session.report"); faulthandler names the function
            name = str(frame["name"]).rsplit(".", 1)[-1]
            lines.append(f'  File "{frame["filename"]}", line {frame["line"]} in {name}')
        lines.append("")
    return "\n".join(lines)
