"""Copies workers' stdout and stderr to the driver's, one line at a time, tagged by rank."""

from __future__ import annotations

import collections
import fcntl
import os
import selectors
import sys
import termios
import threading
import time
from typing import IO

TAIL_LINES = 20  # a failed worker's last lines of output, kept for its error


class OutputPump:
    """One thread that forwards every worker's output lines as ``(rank N) line``.

    Lines go to whatever ``sys.stdout``/``sys.stderr`` is at the time of writing, so a live
    progress display that redirects them keeps its line at the bottom. Each rank's last
    :data:`TAIL_LINES` lines (both streams) are kept for the error of a worker that fails.
    """

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._partial: dict[tuple[int, str], bytes] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._tails: dict[int, collections.deque[str]] = {}
        self._fds: dict[int, list[int]] = {}  # each rank's streams not at their end yet
        # Held while a chunk is read and its lines kept, so that tail() sees either
        # the bytes in the pipe or the lines, never neither.
        self._changed = threading.Condition()

    def add(self, rank: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self._tails[rank] = collections.deque(maxlen=TAIL_LINES)
        self._fds[rank] = [stdout.fileno(), stderr.fileno()]
        for stream, name in ((stdout, "stdout"), (stderr, "stderr")):
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream, selectors.EVENT_READ, (rank, name))

    def tail(self, rank: int, wait: float = 0.0) -> tuple[str, ...]:
        """Rank ``rank``'s last lines of output, once everything it has written so far
        is read (its pipes are empty), waiting up to ``wait`` seconds for that."""
        deadline = time.monotonic() + wait
        with self._changed:
            while self._thread is not None and _unread(self._fds.get(rank, [])):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            lines = list(self._tails.get(rank, ()))
            for name in ("stdout", "stderr"):  # a last line without its newline
                if rest := self._partial.get((rank, name)):
                    lines.append(rest.decode("utf-8", "replace"))
            return tuple(lines[-TAIL_LINES:])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lockstep-output", daemon=True)
        self._thread.start()

    def join(self, timeout: float = 5.0) -> None:
        """Wait until every stream reached end of file (the workers have exited).

        A stream some stray process still holds open is abandoned after ``timeout``.
        """
        if self._thread is not None:
            self._thread.join(timeout)
            self._stop.set()
            self._thread.join()
            self._thread = None
        for key in list(self._selector.get_map().values()):
            self._selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _run(self) -> None:
        while self._selector.get_map() and not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.5):
                rank, name = key.data
                with self._changed:
                    lines = self._take(key.fileobj, rank, name)  # type: ignore[arg-type]
                    self._tails[rank].extend(lines)
                    self._changed.notify_all()
                target = sys.stdout if name == "stdout" else sys.stderr
                for line in lines:
                    _write(target, f"(rank {rank}) {line}\n")

    def _take(self, stream: IO[bytes], rank: int, name: str) -> list[str]:
        """Read what ``stream`` has; return the complete lines (all of it at its end)."""
        chunk = os.read(stream.fileno(), 65536)
        buffered = self._partial.pop((rank, name), b"") + chunk
        if not chunk:
            self._selector.unregister(stream)
            self._fds[rank].remove(stream.fileno())
            stream.close()
            return [buffered.decode("utf-8", "replace")] if buffered else []
        *lines, rest = buffered.split(b"\n")
        if rest:
            self._partial[(rank, name)] = rest
        return [line.decode("utf-8", "replace") for line in lines]


def _unread(fds: list[int]) -> bool:
    """Whether any of these pipes holds bytes not read yet."""
    for fd in fds:
        try:
            pending = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        except OSError:
            continue
        if int.from_bytes(pending, sys.byteorder):
            return True
    return False


def _write(target: IO[str], text: str) -> None:
    try:
        target.write(text)
        target.flush()
    except (OSError, ValueError):
        pass  # the driver's stream is closed: dropping worker output is all we can do
