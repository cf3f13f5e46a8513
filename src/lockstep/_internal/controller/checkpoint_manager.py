"""CheckpointManager: commits checkpoints, keeps the best ones, saves the run-state snapshot.

It is the checkpoint half of the run record (``run_record.RunRecord``), which owns the
snapshot and is the only caller of these methods outside tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep._core import flags, storage
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.config import CheckpointConfig
from lockstep._core.run_state import CheckpointRecord, RunState


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
        self.run_dir = run_dir
        self._config = config
        self.state = state
        self._metadata = metadata or {}

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
    def latest_checkpoint(self) -> Checkpoint | None:
        if self.state.latest is None:
            return None
        return self.checkpoint(self.state.latest)

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        self._metadata = {**self._metadata, **metadata}

    @property
    def next_dir_name(self) -> str:
        """The directory name the next committed checkpoint gets."""
        return storage.checkpoint_dir_name(self.state.next_checkpoint_index)

    def is_committed(self, dir_name: str) -> bool:
        """Whether the checkpoint called ``dir_name`` was committed (retained or not since)."""
        index = dir_name.removeprefix(storage.CHECKPOINT_PREFIX)
        return index.isdigit() and int(index) < self.state.next_checkpoint_index

    def checkpoint(self, dir_name: str) -> Checkpoint:
        return Checkpoint(self.run_dir.join(dir_name), self.run_dir.fs)

    def commit(self, staged: str, metrics: dict[str, Any], training_iteration: int) -> Checkpoint:
        """Make the staged step directory ``staged`` the next checkpoint; return it.

        ``staged`` holds one directory per rank that attached files. They are merged inside
        the staging area, rank 0's files winning over same-named files of other ranks, and
        the result becomes visible with one rename.
        """
        name = self.next_dir_name
        merged = self._merge_ranks(staged)
        if self._metadata:
            # Before the rename: a checkpoint is never visible without its metadata.
            staged_checkpoint = self.checkpoint(merged)
            staged_checkpoint.set_metadata({**self._metadata, **staged_checkpoint.get_metadata()})
        self.run_dir.move(merged, name)
        flags.fault_point("checkpoint_moved")
        record = CheckpointRecord(
            dir_name=name,
            metrics=dict(metrics),
            index=self.state.next_checkpoint_index,
            training_iteration=training_iteration,
        )
        self.state.next_checkpoint_index += 1
        self.state.latest = name
        self.state.checkpoints = self._ordered([*self.state.checkpoints, record])
        kept, evicted = self._retain(self.state.checkpoints, latest=record)
        self.state.checkpoints = kept
        # Save the snapshot before deleting old checkpoints: if deletion came first and the
        # process crashed, the snapshot could point to checkpoints that are gone.
        self.save()
        for old in evicted:
            self.run_dir.remove(old.dir_name)
        self.run_dir.remove(staged)
        return self.checkpoint(name)

    def _merge_ranks(self, staged: str) -> str:
        ranks = self.run_dir.child(staged).listdir()
        assert ranks, f"nothing staged in {staged}: a worker reported a checkpoint it never wrote"
        base = f"{staged}/{ranks[-1]}"
        for rank_dir in reversed(ranks[:-1]):  # highest rank first, so rank 0 wins
            self.run_dir.merge_into(f"{staged}/{rank_dir}", base)
        return base

    def save(self) -> None:
        """Write the snapshot atomically."""
        self.run_dir.write_atomic(storage.STATE_FILE, self.state.to_json())

    def remove_uncommitted(self) -> list[str]:
        """Delete staging leftovers and checkpoint directories the snapshot does not list;
        return the names of what was there.

        Such directories come from a crash between a rename and the snapshot, or between the
        snapshot and an eviction; neither was ever a committed, visible checkpoint.
        """
        listed = {r.dir_name for r in self.state.checkpoints}
        removed = []
        for name in self.run_dir.listdir():
            uncommitted = name.startswith(storage.CHECKPOINT_PREFIX) and name not in listed
            if uncommitted or name == storage.STAGING_DIR:
                self.run_dir.remove(name)
                removed.append(name)
        return removed

    def _ordered(self, records: list[CheckpointRecord]) -> list[CheckpointRecord]:
        attribute = self._config.checkpoint_score_attribute
        if attribute is None:
            return sorted(records, key=lambda r: r.index)
        sign = 1 if self._config.checkpoint_score_order == "max" else -1
        # Best last, as Ray orders them; among equal scores the newer ranks higher.
        return sorted(records, key=lambda r: (sign * r.metrics[attribute], r.index))

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
