"""CheckpointManager: commits checkpoints, keeps the best ones, saves the run-state snapshot.

It is the checkpoint half of the run record (``run_record.RunRecord``), which owns the
snapshot and is the only caller of these methods outside tests.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from lockstep._core import flags, storage
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig
from lockstep._core.run_state import CheckpointRecord, RunState

logger = logging.getLogger(__name__)


class CheckpointManager:
    """Turns staged checkpoints into committed ones and decides which to keep.

    Commit = one rename of the staging directory (every worker's part is in it by then),
    then the snapshot, then deletion of evicted checkpoints. ``state.checkpoints`` is kept
    in result order: by score from worst to best, or oldest first without a score.
    """

    def __init__(
        self,
        run_dir: storage.StorageDir,
        config: CheckpointConfig,
        state: RunState,
        metadata: dict[str, Any] | None = None,
    ):
        self._run_dir = run_dir
        self._config = config
        self.state = state
        self._metadata = metadata or {}
        self._own_metadata: dict[str, Any] = {}  # lockstep's: wins over a copied file's

    @classmethod
    def open(
        cls,
        run_dir: storage.StorageDir,
        config: CheckpointConfig,
        metadata: dict[str, Any] | None = None,
    ) -> CheckpointManager:
        """The manager of ``run_dir``, continuing from its snapshot when there is one.

        ``metadata`` is added to every checkpoint's metadata (the fitted preprocessor, say).
        """
        state = RunState()
        if run_dir.exists(storage.STATE_FILE):
            state = RunState.from_json(run_dir.read_bytes(storage.STATE_FILE))
            state.status, state.error = "running", None
        return cls(run_dir, config, state, metadata)

    @property
    def num_to_keep(self) -> int | None:
        return self._config.num_to_keep

    @property
    def run_dir(self) -> storage.StorageDir:
        return self._run_dir

    @property
    def latest_checkpoint(self) -> Checkpoint | None:
        if self.state.latest is None:
            return None
        return self.checkpoint(self.state.latest)

    def add_metadata(self, metadata: Mapping[str, Any], *, own: bool = False) -> None:
        """Add ``metadata`` to every checkpoint committed from now on. ``own`` keys are
        lockstep's record of the step (replacing what the checkpoint's files say: a user
        may copy an older checkpoint's metadata file), and are written for checkpoints the
        workers put in storage themselves too."""
        if own:
            self._own_metadata = {**self._own_metadata, **metadata}
        else:
            self._metadata = {**self._metadata, **metadata}

    def is_committed(self, dir_name: str, training_iteration: int) -> bool:
        """Whether the checkpoint called ``dir_name`` that step ``training_iteration``
        reported was committed (retained or evicted since), by the saved snapshot.

        A checkpoint still pending (ASYNC) was not. One retained under that name was if it
        is this step's or a later step's (a name reported again replaces the older). One
        not retained was evicted if the snapshot had recorded its step: a commit saves
        the snapshot with its step, and a driver killed before that saved nothing of it.
        """
        if dir_name in self.state.pending:
            return False
        record = self.state.record(dir_name)
        if record is not None:
            return record.training_iteration >= training_iteration
        return training_iteration <= self.state.training_iteration

    def persisted_name(self, checkpoint: Checkpoint) -> str | None:
        """The name a checkpoint the workers put in storage is committed under: its own
        when it sits in the run directory, else None (the next free name)."""
        return self._inside_run_dir(checkpoint)

    def checkpoint(self, dir_name: str) -> Checkpoint:
        return Checkpoint(self._run_dir.join(dir_name), self._run_dir.fs)

    def reserve(self, dir_name: str | None = None) -> tuple[str, int]:
        """The name and index of the next checkpoint, taken now and committed later (an
        ASYNC upload is committed after later steps are logged)."""
        index = self.state.next_checkpoint_index
        self.state.next_checkpoint_index += 1
        return dir_name or storage.checkpoint_dir_name(index), index

    def commit(
        self,
        staged: str,
        metrics: dict[str, Any],
        training_iteration: int,
        reserved: tuple[str, int] | None = None,
    ) -> Checkpoint:
        """Make the staged step directory ``staged`` the next checkpoint; return it.

        ``staged`` holds one directory per rank that attached files. They are merged inside
        the staging area, rank 0's files winning over same-named files of other ranks, and
        the result becomes visible with one rename. ``reserved`` is a name and index from
        :meth:`reserve` (the user's ``checkpoint_dir_name``, say).
        """
        name, index = reserved or self.reserve()
        merged = self._merge_ranks(staged)
        if self._metadata or self._own_metadata:
            # Before the rename: a checkpoint is never visible without its metadata.
            staged_checkpoint = self.checkpoint(merged)
            given = staged_checkpoint.get_metadata()
            staged_checkpoint.set_metadata({**self._metadata, **given, **self._own_metadata})
        self._replace_same_name(name)
        self.run_dir.move(merged, name)
        flags.fault_point("checkpoint_moved")
        self._register(name, index, metrics, training_iteration)
        self._remove_after_commit(staged)
        return self.checkpoint(name)

    def adopt(
        self,
        checkpoint: Checkpoint,
        metrics: dict[str, Any],
        training_iteration: int,
        reserved: tuple[str, int] | None = None,
    ) -> Checkpoint:
        """Commit a checkpoint the workers already put in the run directory (NO_UPLOAD, or
        a ``checkpoint_upload_fn``); one found elsewhere is copied in first."""
        inside = self._inside_run_dir(checkpoint)
        name, index = reserved or self.reserve()
        if inside is not None:
            name = inside  # where the worker put it: committed in place, never copied
        if inside != name:
            with checkpoint.as_directory() as local:
                self.run_dir.upload_dir(local, name)
        if self._own_metadata:
            self.checkpoint(name).update_metadata(self._own_metadata)
        self._register(name, index, metrics, training_iteration)
        return self.checkpoint(name)

    def reported(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """``(dir_name, metrics)`` of every retained checkpoint, in result order."""
        return tuple((r.dir_name, dict(r.metrics)) for r in self.state.checkpoints)

    def _inside_run_dir(self, checkpoint: Checkpoint) -> str | None:
        """The checkpoint's directory name when it sits directly in the run directory."""
        import posixpath

        root = self.run_dir.join("").rstrip("/")
        parent, name = posixpath.split(checkpoint.path.rstrip("/"))
        same_fs = checkpoint.is_local == self.run_dir.is_local
        return name if same_fs and parent.rstrip("/") == root else None

    def _replace_same_name(self, name: str) -> None:
        """A checkpoint_dir_name reported again replaces the checkpoint of that name."""
        old = self.state.record(name)
        if old is not None:
            self.state.checkpoints.remove(old)
            self.save(commit=True)
        if self.run_dir.exists(name):
            self.run_dir.remove(name)

    def _register(
        self, name: str, index: int, metrics: dict[str, Any], training_iteration: int
    ) -> None:
        record = CheckpointRecord(
            dir_name=name,
            metrics=dict(metrics),
            index=index,
            training_iteration=training_iteration,
        )
        if name in self.state.pending:
            self.state.pending.remove(name)  # committed by the save below
        current = self.state.record(self.state.latest) if self.state.latest else None
        if current is not None and current.index > index:
            latest = current  # an ASYNC upload committed after a newer SYNC checkpoint
        else:
            latest, self.state.latest = record, name
        self.state.checkpoints = self._ordered([*self.state.checkpoints, record])
        kept, evicted = self._retain(self.state.checkpoints, latest=latest)
        self.state.checkpoints = kept
        # Save the snapshot before deleting old checkpoints: if deletion happens first and
        # the process crashes, the snapshot may point to checkpoints that are gone.
        self.save(commit=True)
        for old in evicted:
            self._remove_after_commit(old.dir_name)

    def _remove_after_commit(self, name: str) -> None:
        """Delete what the saved snapshot no longer lists. The commit is done: a failure
        here leaves a directory the next ``open()`` sweeps, and is no failure of the run."""
        try:
            self.run_dir.remove(name)
        except Exception as exc:
            logger.warning("lockstep: could not remove %s: %s", self.run_dir.join(name), exc)

    def _merge_ranks(self, staged: str) -> str:
        ranks = self._run_dir.child(staged).listdir()
        assert ranks, f"nothing staged in {staged}: a worker reported a checkpoint it never wrote"
        base = f"{staged}/{ranks[-1]}"
        for rank_dir in reversed(ranks[:-1]):  # highest rank first, so rank 0 wins
            self._run_dir.merge_into(f"{staged}/{rank_dir}", base)
        return base

    def save(self, *, commit: bool = False) -> None:
        """Write the snapshot atomically; on the disk before this returns when it commits
        a checkpoint (or an eviction), else as the run directory's writes are."""
        self._run_dir.write_atomic(storage.STATE_FILE, self.state.to_json(), fsync=commit or None)

    def remove_uncommitted(self) -> list[str]:
        """Delete staging leftovers and checkpoint directories the snapshot does not list;
        return the names of what was there.

        Such directories come from a crash between a rename and the snapshot, or between the
        snapshot and an eviction; neither was ever a committed, visible checkpoint. The
        temporary copy of a file that a killed driver was replacing goes too.
        """
        listed = {r.dir_name for r in self.state.checkpoints}
        local = isinstance(self._run_dir, storage.LocalDir)
        removed = []
        for name in self._run_dir.listdir():
            uncommitted = name.startswith(storage.CHECKPOINT_PREFIX) and name not in listed
            if uncommitted or name == storage.STAGING_DIR or (local and _orphaned_copy(name)):
                self._run_dir.remove(name)
                removed.append(name)
        return removed

    def _ordered(self, records: list[CheckpointRecord]) -> list[CheckpointRecord]:
        attribute = self._config.checkpoint_score_attribute
        if attribute is None:
            return sorted(records, key=lambda r: r.index)
        sign = 1 if self._config.checkpoint_score_order == "max" else -1

        def rank(record: CheckpointRecord) -> tuple[bool, float, int]:
            # Best last, as Ray orders them: a NaN score below every number, and among
            # equal scores the newer higher.
            score = record.metrics[attribute]
            if math.isnan(score):
                return (False, 0.0, record.index)
            return (True, sign * score, record.index)

        return sorted(records, key=rank)

    def _retain(
        self, ordered: list[CheckpointRecord], *, latest: CheckpointRecord
    ) -> tuple[list[CheckpointRecord], list[CheckpointRecord]]:
        keep = self._config.num_to_keep
        if keep is None or len(ordered) <= keep:
            return ordered, []
        best = ordered[-keep:]  # ordered best last; without a score, newest last
        # The latest stays until a newer one is committed: a restart resumes from it.
        kept = [r for r in ordered if r in best or r is latest]
        return kept, [r for r in ordered if r not in kept]


def _orphaned_copy(name: str) -> bool:
    """Whether ``name`` is the temporary copy (``FILE.tmp-PID``) of a file that a process
    no longer alive was replacing (``StorageDir.write_atomic``)."""
    _, sep, pid = name.rpartition(".tmp-")
    if not sep or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False
