"""Why a worker was killed: the kernel's OOM killer, seen in the cgroup's counters, and the
memory the worker was last seen using.

cgroup v2 counts OOM kills in ``memory.events`` (``oom_kill N``), v1 in
``memory.oom_control``; both under the directory that ``/proc/self/cgroup`` names. The
workers are this process's children, in its cgroup (or one below it: v2 counts those in
the parent's ``memory.events`` too).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

CGROUP_ROOT = "/sys/fs/cgroup"
SAMPLE_INTERVAL_S = 0.5  # how often the workers' memory is read: one small file each
_UNLIMITED = 1 << 60  # v1 writes "no limit" as a huge number


@dataclass(frozen=True)
class Cgroup:
    """Where this process's memory controller keeps its files, and in which format."""

    path: str
    version: int

    @property
    def events_file(self) -> str:
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return os.path.join(self.path, name)

    def oom_kills(self) -> int | None:
        """The OOM kill count so far, or None when it cannot be read."""
        try:
            with open(self.events_file, encoding="ascii") as f:
                return parse_oom_kills(f.read())
        except OSError:
            return None

    def limit(self) -> int | None:
        """The memory limit in bytes, or None when there is none."""
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        try:
            with open(os.path.join(self.path, name), encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            return None
        if text == "max" or not text.isdigit() or int(text) >= _UNLIMITED:
            return None
        return int(text)


def parse_oom_kills(text: str) -> int | None:
    """The ``oom_kill`` count in a ``memory.events`` or ``memory.oom_control`` file.

    Example:
        >>> parse_oom_kills("low 0\\nhigh 0\\nmax 12\\noom 1\\noom_kill 1\\n")
        1
        >>> parse_oom_kills("oom_kill_disable 0\\nunder_oom 0\\n") is None
        True
    """
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def find_cgroup(proc_cgroup: str = "/proc/self/cgroup", root: str = CGROUP_ROOT) -> Cgroup | None:
    """This process's memory cgroup, v2 or v1, or None when neither can be read.

    The path in ``/proc/self/cgroup`` is relative to the hierarchy's root; inside a
    container with its own cgroup namespace the mount is already the process's cgroup.
    """
    try:
        with open(proc_cgroup, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and os.path.exists(os.path.join(root, "cgroup.controllers")):
            found = _existing(root, path, "memory.events")
            if found is not None:
                return Cgroup(found, 2)
        if "memory" in controllers.split(","):
            found = _existing(os.path.join(root, "memory"), path, "memory.oom_control")
            if found is not None:
                return Cgroup(found, 1)
    return None


def _existing(mount: str, path: str, name: str) -> str | None:
    for candidate in (os.path.join(mount, path.lstrip("/")), mount):
        if os.path.exists(os.path.join(candidate, name)):
            return candidate
    return None


def rss_bytes(pid: int) -> int | None:
    """The resident memory of process ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def machine_memory() -> int | None:
    """The machine's memory in bytes (the bound when the cgroup sets none)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def gib(n: int) -> str:
    """``11.2 GiB``, or MiB below one GiB.

    Example:
        >>> gib(12 * 2**30), gib(300 * 2**20)
        ('12.0 GiB', '300 MiB')
    """
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB"


class MemoryWatch:
    """The cgroup's OOM kill count when the workers started, and each worker's memory as
    last seen (sampled at most every :data:`SAMPLE_INTERVAL_S`)."""

    def __init__(self, cgroup: Cgroup | None = None) -> None:
        self._cgroup = cgroup if cgroup is not None else find_cgroup()
        self._oom_kills = self._cgroup.oom_kills() if self._cgroup is not None else None
        self._rss: dict[int, int] = {}
        self._sampled = float("-inf")

    def due(self) -> bool:
        """Whether the workers' memory is to be read again (checked at every poll)."""
        return time.monotonic() - self._sampled >= SAMPLE_INTERVAL_S

    def sample(self, pids: dict[int, int], *, now: float | None = None) -> None:
        """Read the memory of each running worker (pid by rank), unless read lately."""
        now = time.monotonic() if now is None else now
        if now - self._sampled < SAMPLE_INTERVAL_S:
            return
        self._sampled = now
        for rank, pid in pids.items():
            rss = rss_bytes(pid)
            if rss is not None:
                self._rss[rank] = rss

    def explain_kill(self, rank: int, pid: int | None) -> tuple[str, str]:
        """``(kind, summary)`` for a worker killed by SIGKILL: ``"oom"`` when the
        cgroup's OOM kill count went up since the start, else ``"signal"``; with the
        memory the worker was last seen using, and the limit."""
        who = f"rank {rank} (pid {pid})"
        used = self._rss.get(rank)
        limit = self._cgroup.limit() if self._cgroup is not None else None
        memory = _memory_note(used, limit)
        now = self._cgroup.oom_kills() if self._cgroup is not None else None
        if now is not None and self._oom_kills is not None and now > self._oom_kills:
            assert self._cgroup is not None
            counter = f"{os.path.basename(self._cgroup.events_file)} oom_kill"
            before, self._oom_kills = self._oom_kills, now
            return "oom", (
                f"{who} was killed by the kernel's OOM killer ({counter} {before} -> {now}"
                f"{'; ' + memory if memory else ''})"
            )
        return "signal", f"{who} was killed by SIGKILL" + (f" ({memory})" if memory else "")


def _memory_note(used: int | None, limit: int | None) -> str:
    parts = []
    if used is not None:
        parts.append(f"it used {gib(used)} when last seen")
    if limit is not None:
        parts.append(f"the limit is {gib(limit)}")
    elif used is not None and (total := machine_memory()) is not None:
        parts.append(f"the machine has {gib(total)}")
    return ", ".join(parts)
