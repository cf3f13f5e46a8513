"""Copies workers' stdout and stderr to the driver's, one line at a time, tagged by rank."""

from __future__ import annotations

import collections
import os
import selectors
import sys
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
        self._partial: dict[int, bytes] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._tails: dict[int, collections.deque[str]] = {}
        self._open: dict[int, int] = {}  # streams not at their end yet, by rank
        self._changed = threading.Condition()

    def add(self, rank: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self._tails[rank] = collections.deque(maxlen=TAIL_LINES)
        self._open[rank] = 2
        for stream, name in ((stdout, "stdout"), (stderr, "stderr")):
            os.set_blocking(stream.fileno(), False)
            self._selector.register(stream, selectors.EVENT_READ, (rank, name))

    def tail(self, rank: int, wait: float = 0.0) -> tuple[str, ...]:
        """Rank ``rank``'s last lines of output; first waiting up to ``wait`` seconds
        for its streams to end (all it wrote before it exited is then here)."""
        deadline = time.monotonic() + wait
        with self._changed:
            while self._open.get(rank, 0) and self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return tuple(self._tails.get(rank, ()))

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
                stream = key.fileobj
                chunk = os.read(stream.fileno(), 65536)  # type: ignore[union-attr]
                if not chunk:
                    self._selector.unregister(stream)
                    self._emit(rank, name, self._partial.pop(id(stream), b""), final=True)
                    stream.close()  # type: ignore[union-attr]
                    with self._changed:
                        self._open[rank] -= 1
                        self._changed.notify_all()
                    continue
                buffered = self._partial.pop(id(stream), b"") + chunk
                *lines, rest = buffered.split(b"\n")
                if rest:
                    self._partial[id(stream)] = rest
                for line in lines:
                    self._emit(rank, name, line)

    def _emit(self, rank: int, name: str, line: bytes, *, final: bool = False) -> None:
        if final and not line:
            return
        text = line.decode("utf-8", "replace")
        with self._changed:
            self._tails[rank].append(text)
        target = sys.stdout if name == "stdout" else sys.stderr
        try:
            target.write(f"(rank {rank}) {text}\n")
            target.flush()
        except (OSError, ValueError):
            pass  # the driver's stream is closed: dropping worker output is all we can do
