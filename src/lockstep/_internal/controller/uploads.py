"""ASYNC checkpoint uploads, done by the driver so that a worker's death cannot lose them.

A worker that reports with ``CheckpointUploadMode.ASYNC`` leaves its files in a hand-off
directory and goes on training; one driver thread copies them into the run's staging area,
in report order, retrying a failed copy with exponential backoff. The controller collects
finished uploads between polls and commits them.
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockstep._core import storage

Upload = Callable[[str, str], None]
"""Copies a local directory into a run-relative path: ``StorageDir.upload_dir``."""


@dataclass(frozen=True)
class UploadJob:
    """The files of one step's checkpoint: each rank's hand-off directory."""

    step: Any  # the controller's Step, handed back untouched
    staged_step: int
    handoffs: dict[int, str]
    root: str = storage.STAGING_DIR  # the attempt's staging directory


@dataclass(frozen=True)
class UploadDone:
    """A finished job; ``error`` is set when every attempt failed."""

    job: UploadJob
    error: BaseException | None = None


class Uploads:
    """One thread that uploads jobs in order; :meth:`finished` hands back the outcomes.

    Args:
        upload: How to copy a local directory into the run directory.
        attempts: Tries per directory before the upload (and so the run) fails.
        backoff_s: Wait before the second try; doubled before each further one.
    """

    def __init__(self, upload: Upload, *, attempts: int = 5, backoff_s: float = 0.5) -> None:
        self._upload = upload
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._jobs: queue.SimpleQueue[UploadJob | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[UploadDone] = queue.SimpleQueue()
        self._in_flight = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, job: UploadJob) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lockstep-upload", daemon=True)
            self._thread.start()
        self._in_flight += 1
        self._jobs.put(job)

    def finished(self, *, wait: bool = False) -> list[UploadDone]:
        """Jobs finished since the last call; with ``wait``, every job submitted so far."""
        done = []
        while self._in_flight:
            try:
                item = self._done.get(block=wait)
            except queue.Empty:
                break
            self._in_flight -= 1
            done.append(item)
        return done

    def close(self) -> None:
        """Stop the thread; jobs not started yet are dropped with their hand-off files."""
        if self._thread is None:
            return
        self._stop.set()
        self._jobs.put(None)
        self._thread.join()
        self._thread = None
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                discard(job.handoffs.values())

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            error = None
            try:
                for rank, path in sorted(job.handoffs.items()):
                    self._with_retries(
                        path, storage.staging_dir_name(job.staged_step, rank, root=job.root)
                    )
            except Exception as exc:
                error = exc
            discard(job.handoffs.values())
            self._done.put(UploadDone(job, error))

    def _with_retries(self, local: str, target: str) -> None:
        delay = self._backoff_s
        for attempt in range(self._attempts):
            try:
                self._upload(local, target)
                return
            except Exception:
                if attempt == self._attempts - 1 or self._stop.is_set():
                    raise
            self._stop.wait(delay)  # backoff; close() cuts it short
            delay *= 2


def discard(paths: Any) -> None:
    """Delete hand-off directories whose files are uploaded or no longer wanted."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
