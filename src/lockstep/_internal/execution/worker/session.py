"""The session installed in each worker: report, checkpoints, context, collectives, data."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from lockstep._core import data_wait
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.context import TrainContext
from lockstep._core.errors import UsageError, UsageKeyError
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.reported import CheckpointUploadMode, ReportedCheckpoint
from lockstep._core.session import Session
from lockstep._core.storage import STAGING_DIR, StorageDir, staging_dir_name, write_failed
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    CollectiveReply,
    CollectiveRequest,
    Heartbeat,
    Preempted,
    Report,
    StepDone,
    Stop,
    WorkerStart,
)
from lockstep._internal.execution.worker import phases
from lockstep._internal.execution.worker.link import DriverLink, DriverLostError, Reply
from lockstep._internal.execution.worker.phases import PhasePage
from lockstep._internal.execution.worker.positions import position_of, saved_positions
from lockstep._internal.execution.worker.report_checks import (
    check_reserved,
    check_score,
    clean_metrics,
)

HEARTBEAT_INTERVAL_S = 1.0  # the least time between two heartbeats a worker sends


class WorkerSession:
    """One worker's link to the driver: the :class:`~lockstep._core.session.Session` of
    every place a training function runs (a process, a Ray actor, a thread of the driver
    for an inline run or a Tune function trial). ``report`` is a barrier across the
    workers.

    A report sends one message and waits for the driver's answer (a message, or for a
    local worker the signal of the driver's release line), which comes once every worker
    has reported the same step (a round trip, no disk). A report with a checkpoint
    first copies the files into the run's staging area; the answer then comes once the
    checkpoint is committed, so that when ``report`` returns the checkpoint is durable and
    ``get_checkpoint`` returns it.
    """

    def __init__(
        self,
        conn: Connection,
        start: WorkerStart,
        *,
        on_driver_lost: Callable[[], None] | None = None,
        phases: PhasePage | None = None,
        read_inline: bool = True,
        line: list[int] | None = None,
    ) -> None:
        self.context: TrainContext = dataclasses.replace(
            start.context, dataset_shards=self.get_dataset_shard
        )
        self._start = start
        self.score_attribute = start.score_attribute  # what checkpoints are ranked by
        # The driver sent Stop (a worker that ignores a scheduler's SIGTERM takes its own)
        self.stop_requested = False
        self._latest = start.checkpoint
        self._reported = start.reported
        self._pending_commits: list[Reply] = []
        self._num_reports = 0
        self._num_collectives = 0
        self._on_driver_lost = on_driver_lost
        self._iterators: dict[str, Any] = {}
        self._preemption: PreemptionInfo | None = None
        self._preemption_next: Preempted | None = None
        self._loaders: dict[str, Callable[[], dict[str, Any] | None]] = {}
        self._last_heartbeat = float("-inf")
        # For the run's time ledger and `lockstep status`: where this rank's time goes.
        self._phases = phases
        self._released_at = time.monotonic()  # when the last report() returned
        self._data_s = 0.0  # waiting for data since then
        self._data_by: dict[str, float] = {}
        self._source_names: dict[int, str] = {}
        self._stages: dict[str, str] = {}  # each source's slowest stage, seen in a pass
        self._link = DriverLink(
            conn,
            self._dispatch,
            on_lost=on_driver_lost,
            threaded=not read_inline,
            name=f"lockstep-session-rank{start.context.world_rank}",
            line=line,
            world_size=start.context.world_size,
        )

    @property
    def num_reports(self) -> int:
        return self._num_reports

    def start(self) -> None:
        """Start reading the driver's messages, where a thread of its own reads them."""
        self._link.start()

    def watch_hangup(self) -> None:
        """Wait until the driver hangs up (see :meth:`DriverLink.watch_hangup`)."""
        self._link.watch_hangup()

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Checkpoint | None = None,
        *,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    ) -> None:
        entered = time.monotonic()
        clean = clean_metrics(metrics)
        check_reserved(clean)
        step = self._num_reports
        if checkpoint is None:
            if self._phases is not None:
                self._phases.set(phases.REPORT, step)
            # positions go with every report: another rank may attach the step's checkpoint
            report = Report(
                self.context.world_rank,
                step,
                clean,
                False,
                time.time(),
                data_positions=self.data_positions(),
                timings=self._timings(entered, 0.0),
            )
            self._exchange(report, commit=False)
            return
        if not isinstance(checkpoint, Checkpoint):
            raise UsageError(
                f"report(checkpoint=...) takes a Checkpoint, got {type(checkpoint).__name__}."
                " HINT: checkpoint=Checkpoint.from_directory(dir)"
            )
        check_score(clean, self._start.score_attribute)
        mode = CheckpointUploadMode(checkpoint_upload_mode)
        delete = delete_local_checkpoint_after_upload
        if delete is None:  # Ray's default: ASYNC owns the local copy, SYNC leaves it
            delete = mode is CheckpointUploadMode.ASYNC
        self._show_persisting(checkpoint, step, mode, checkpoint_upload_fn)
        with self._beating():  # writing a big checkpoint is progress, not a hang
            fields = self._persist(
                checkpoint, step, mode, delete, checkpoint_upload_fn, checkpoint_dir_name
            )
        if self._phases is not None:
            self._phases.set(phases.REPORT, step)
        report = Report(
            self.context.world_rank,
            step,
            clean,
            True,
            time.time(),
            dir_name=checkpoint_dir_name,
            data_positions=self.data_positions(),
            timings=self._timings(entered, time.monotonic() - entered),
            **fields,
        )
        self._exchange(report, commit=report.upload != "async")

    def function_started(self) -> None:
        """The training function starts now: its time counts from here."""
        self._released_at = time.monotonic()
        if self._phases is not None:
            self._phases.set(phases.TRAINING)

    def _timings(self, entered: float, persist_s: float) -> tuple[float, float, float, str]:
        """This report's :attr:`Report.timings`; the data waits start again from zero."""
        data_s, by = self._data_s, self._data_by
        source = max(by.items(), key=lambda item: item[1])[0] if by else ""
        if by:
            self._data_s, self._data_by = 0.0, {}
            if self._phases is not None:
                self._phases.waited_for_data(0.0)
        return (entered - self._released_at, data_s, persist_s, source)

    def _show_persisting(
        self,
        checkpoint: Checkpoint,
        step: int,
        mode: CheckpointUploadMode,
        upload_fn: Callable[[Checkpoint, str], Checkpoint] | None,
    ) -> None:
        """Say in the phase page that this rank persists a checkpoint of that size, to
        where in the run directory (its staging directory), for ``lockstep status``."""
        if self._phases is None:
            return
        local = checkpoint.is_local and os.path.isdir(checkpoint.path)
        size = float(_tree_size(checkpoint.path)) if local else 0.0
        target = ""
        if upload_fn is None and mode is not CheckpointUploadMode.NO_UPLOAD:
            target = staging_dir_name(step, self.context.world_rank, root=self._start.staging_dir)
        self._phases.set_with(phases.CHECKPOINT, target, step=step, size=size)

    def data_wait_begin(self, source: object, stage: str | None) -> None:
        """A data iterator of this function waits for a batch (see ``_core.data_wait``)."""
        if self._phases is not None:
            name = self._source_name(source)
            if stage:
                self._stages[name] = stage
            self._phases.set_with(phases.DATA_WAIT, name, self._stages.get(name, ""))

    def data_wait_end(self, source: object, seconds: float) -> None:
        self._data_s += seconds
        name = self._source_name(source)
        self._data_by[name] = self._data_by.get(name, 0.0) + seconds
        if self._phases is not None:
            self._phases.waited_for_data(self._data_s)
            self._phases.set(phases.TRAINING)

    def _source_name(self, source: object) -> str:
        """How the findings name a data source: its dataset's name, else its kind."""
        name = self._source_names.get(id(source))
        if name is not None:
            return name
        return "the data loader" if "Loader" in type(source).__name__ else "a dataset"

    def _persist(
        self,
        checkpoint: Checkpoint,
        step: int,
        mode: CheckpointUploadMode,
        delete: bool,
        upload_fn: Callable[[Checkpoint, str], Checkpoint] | None,
        dir_name: str | None,
    ) -> dict[str, Any]:
        """Get the files on their way to storage; the Report fields that say how."""
        if upload_fn is not None:
            name = dir_name or default_dir_name(
                staging_dir_name(step, root=self._start.staging_dir)
            )
            persisted = upload_fn(checkpoint, name)
            if not isinstance(persisted, Checkpoint):
                raise UsageError(
                    "checkpoint_upload_fn must return the uploaded Checkpoint, got "
                    f"{type(persisted).__name__}. HINT: return Checkpoint(path, filesystem)"
                )
            upload = "async" if mode is CheckpointUploadMode.ASYNC else "none"
            return {"upload": upload, "persisted": persisted}
        if mode is CheckpointUploadMode.NO_UPLOAD:
            return {"upload": "none", "persisted": checkpoint}
        if mode is CheckpointUploadMode.ASYNC and self._can_hand_off(checkpoint):
            return {"upload": "async", "handoff": hand_off(checkpoint.path, move=delete)}
        staged = self._stage(checkpoint, step)
        if delete and checkpoint.is_local:
            empty_directory(checkpoint.path)
        upload = "async" if mode is CheckpointUploadMode.ASYNC else "sync"
        return {"upload": upload, "staged": staged}

    def _can_hand_off(self, checkpoint: Checkpoint) -> bool:
        """The driver uploads for us when it can read our files: same host, local files."""
        return (
            checkpoint.is_local
            and os.path.isdir(checkpoint.path)
            and self._start.driver_host == socket.gethostname()
        )

    def _exchange(self, report: Report, *, commit: bool) -> None:
        """Send ``report`` and wait at the barrier: for the step, or for its commit."""
        reply = self._link.expect("step", report.step)
        if report.checkpointed and not commit:
            self._pending_commits.append(self._link.expect("commit", report.step))
        ring = self._link.arrive(report)  # first: so it is decided once the driver has all
        self._link.send(report)
        if ring:
            self._link.ring()
        self._num_reports += 1
        self._link.wait(reply)
        self._released_at = time.monotonic()
        if self._phases is not None:
            self._phases.set(phases.TRAINING)

    def heartbeat(self) -> None:
        """Tell the driver this rank is making progress; at most one message a second, so
        that calling it in every iteration of a tight loop costs next to nothing."""
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_INTERVAL_S:
            self._last_heartbeat = now
            self._link.send(Heartbeat(self.context.world_rank))

    @contextlib.contextmanager
    def _beating(self) -> Iterator[None]:
        """Send a heartbeat every second while the block runs."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(HEARTBEAT_INTERVAL_S):
                try:
                    self._link.send(Heartbeat(self.context.world_rank))
                except DriverLostError:
                    return

        beater = threading.Thread(target=beat, name="lockstep-heartbeat", daemon=True)
        beater.start()
        try:
            yield
        finally:
            done.set()
            beater.join()

    def get_all_reported_checkpoints(self) -> list[ReportedCheckpoint]:
        """Every retained checkpoint, once this worker's ASYNC ones are committed."""
        while self._pending_commits:
            self._link.wait(self._pending_commits.pop(0))
        run_dir = self._start.run_dir
        return [
            ReportedCheckpoint(Checkpoint(run_dir.join(name), run_dir.fs), dict(metrics))
            for name, metrics in self._reported
        ]

    def get_checkpoint(self) -> Checkpoint | None:
        self._link.take_arrived()  # an ASYNC checkpoint committed since
        return self._latest

    def get_preemption_info(self) -> PreemptionInfo | None:
        return self._preemption

    def get_dataset_shard(self, name: str | None) -> Any:
        datasets = self._start.datasets
        if name is None and len(datasets) == 1:
            name = next(iter(datasets))
        if name not in datasets:
            given = sorted(datasets) or "none"
            raise UsageKeyError(
                f"get_dataset_shard({name!r}): no dataset by that name. Datasets given to the "
                f"trainer: {given}. HINT: pass datasets={{{name!r}: ds}} to the trainer"
            )
        if name not in self._iterators:
            shard = datasets[name]
            iterator = shard.iterator() if hasattr(shard, "iterator") else shard
            self._iterators[name] = iterator
            self._source_names[id(iterator)] = f"the {name} dataset"
        return self._iterators[name]

    def data_positions(self) -> dict[str, Any] | None:
        """Where this worker's dataset shards and data loaders are, for a checkpoint."""
        if not self._start.datasets and not self._loaders:
            return None  # nothing to keep: the checkpoint's metadata stays the user's
        datasets = {
            name: position_of(self._iterators.get(name, shard))
            for name, shard in self._start.datasets.items()
        }
        loaders = {key: position() for key, position in self._loaders.items()}
        # a shard with no pass yet is kept as none, so no older step's position lingers
        return {
            "datasets": {k: v for k, v in datasets.items() if v is not None},
            "loaders": loaders,
        }

    def next_loader_key(self) -> str:
        """The key the next data loader's position is kept under: its number in order."""
        return f"loader_{len(self._loaders)}"

    def track_loader(self, key: str, position: Callable[[], dict[str, Any] | None]) -> None:
        """Keep a data loader's position with every checkpoint, under ``key``."""
        self._loaders[key] = position

    def resume_positions(self) -> dict[str, Any]:
        """The data positions kept in the checkpoint this attempt started from."""
        return saved_positions(self._start.checkpoint)

    def barrier(self) -> None:
        self._collective("barrier", None)

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        return self._collective("broadcast", data if self.context.world_rank == 0 else None)

    def all_gather(self, data: Any) -> list[Any]:
        gathered: list[Any] = self._collective("gather", data)
        return gathered

    def send(self, message: object) -> None:
        self._link.send(message)

    def close(self) -> None:
        """Stop expecting messages; the driver's end may now close without alarm."""
        self._link.close()

    def end(self) -> None:
        """The last message to the driver is sent."""
        self._link.end()

    def _stage(self, checkpoint: Checkpoint, step: int) -> str:
        """Upload the files into this rank's part of the step; return the step's directory."""
        start = self._start
        return stage_files(
            checkpoint, start.run_dir, step, self.context.world_rank, start.staging_dir
        )

    def _collective(self, op: str, payload: Any) -> Any:
        seq = self._num_collectives
        self._num_collectives += 1
        reply = self._link.expect("collective", seq)
        self._link.send(CollectiveRequest(self.context.world_rank, seq, op, payload))
        outcome: CollectiveReply = self._link.wait(reply)
        if outcome.error is not None:
            raise UsageError(outcome.error)
        return outcome.value

    def _release(self, step: int) -> None:
        """End ``report()`` of ``step``. A preemption notice shows from the release of its
        step on: set before that report returns, at the same step on every worker (an
        ASYNC checkpoint's later commit, which ends no report, does not count)."""
        notice = self._preemption_next
        if notice is not None and step >= notice.from_step and self._link.expecting("step", step):
            self._preemption = notice.info
        self._link.resolve("step", step)

    def _dispatch(self, message: object) -> None:
        """One message from the driver, in the thread that read it."""
        if isinstance(message, StepDone):
            self._release(message.step)
        elif isinstance(message, CheckpointCommitted):
            # every worker learns of every commit, so get_checkpoint is current everywhere
            self._latest = message.checkpoint
            self._reported = message.reported
            if not self._link.on_line:  # else the line's signal, which follows, ends it
                self._release(message.step)
            self._link.resolve("commit", message.step)
        elif isinstance(message, Preempted):
            self._preemption_next = message
        elif isinstance(message, CollectiveReply):
            self._link.resolve("collective", message.seq, message)
        elif isinstance(message, Stop) and self._on_driver_lost is not None:
            # Raise in the main thread through the process's own SIGTERM handler.
            self.stop_requested = True
            os.kill(os.getpid(), signal.SIGTERM)


def stage_files(
    checkpoint: Checkpoint, run_dir: StorageDir, step: int, rank: int, root: str
) -> str:
    """Upload the checkpoint's files into rank ``rank``'s part of step ``step`` under the
    staging directory ``root`` of ``run_dir``; return the step's directory."""
    if checkpoint.is_local and not os.path.isdir(checkpoint.path):
        raise UsageError(
            f"the checkpoint directory {checkpoint.path!r} no longer exists. HINT: call "
            "report() inside the `with tempfile.TemporaryDirectory()` block that holds it"
        )
    target = staging_dir_name(step, rank, root=root)
    with checkpoint.as_directory() as local_dir:
        try:
            run_dir.upload_dir(local_dir, target)
        except Exception as exc:  # a full disk, a failing endpoint: say which, and where
            raise write_failed(exc, "checkpoint files", run_dir.child(target).uri) from exc
    return staging_dir_name(step, root=root)


def hand_off(path: str, *, move: bool) -> str:
    """Put the checkpoint files at ``path`` where the driver will upload them from.

    Moving is one rename on the same filesystem (the empty directory stays, so that the
    user's ``TemporaryDirectory`` still cleans up); otherwise the files are copied, so that
    the user may change or delete them as soon as ``report`` returns.
    """
    parent = os.path.dirname(os.path.abspath(path)) if move else tempfile.gettempdir()
    target = os.path.join(parent, f".lockstep-upload-{uuid.uuid4().hex}")
    if move:
        try:
            os.rename(path, target)
            os.mkdir(path)
            return target
        except OSError:
            pass  # another filesystem, or a directory we may not replace: copy instead
    shutil.copytree(path, target)
    if move:
        empty_directory(path)
    return target


def empty_directory(path: str) -> None:
    """Delete what ``path`` holds, keeping the directory (its owner may still remove it)."""
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            os.remove(full)


_process_session: Session | None = None
_thread_session = threading.local()


def install(session: Session | None, *, process_wide: bool) -> None:
    """Make ``session`` the current one (and the sink of its data waits, where it takes
    them): for the process, or for this thread only."""
    global _process_session
    if process_wide:
        _process_session = session
    else:
        _thread_session.session = session
    sink = session if isinstance(session, WorkerSession) else None
    data_wait.install(sink, process_wide=process_wide)


def current() -> Session | None:
    """The session of this thread or process, or None outside a training function."""
    return getattr(_thread_session, "session", None) or _process_session


def _tree_size(path: str) -> int:
    """The bytes of every file under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
    return total


def default_dir_name(staged: str) -> str:
    """A name unique in the run for a checkpoint given none: its attempt's and step's."""
    return posixpath.relpath(staged, STAGING_DIR).replace("/", "_")
