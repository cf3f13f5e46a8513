"""The Session protocol: what ``lockstep.train``'s session functions call, wherever the
training function runs.

A training function runs in a worker process (forked or spawned), in a Ray actor, inline
in the driver (``num_workers=0``), or as a Tune function trial (in the trial's thread). In
each place one object implementing this protocol is installed for the function's thread
or process; ``lockstep.train.report`` and the rest call it, and a contract suite
(``tests/contracts/session.py``) runs every session function in every place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lockstep._core.checkpoint import Checkpoint
    from lockstep._core.context import TrainContext
    from lockstep._core.preemption import PreemptionInfo
    from lockstep._core.reported import CheckpointUploadMode, ReportedCheckpoint


class Session(Protocol):
    """One training function's link to its run."""

    context: TrainContext

    @property
    def num_reports(self) -> int:
        """How many times this worker reported."""
        ...

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Checkpoint | None = None,
        *,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = ...,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    ) -> None:
        """``lockstep.train.report``: a barrier across the workers."""
        ...

    def heartbeat(self) -> None:
        """``lockstep.train.heartbeat``: this rank makes progress."""
        ...

    def get_checkpoint(self) -> Checkpoint | None: ...

    def get_all_reported_checkpoints(self) -> list[ReportedCheckpoint]: ...

    def get_preemption_info(self) -> PreemptionInfo | None: ...

    def get_dataset_shard(self, name: str | None) -> Any: ...

    def barrier(self) -> None: ...

    def broadcast_from_rank_zero(self, data: Any) -> Any: ...

    def all_gather(self, data: Any) -> list[Any]: ...

    def next_loader_key(self) -> str:
        """The key under which the next ``prepare_data_loader`` keeps its position."""
        ...

    def track_loader(self, key: str, position: Callable[[], dict[str, Any] | None]) -> None:
        """Keep a data loader's position with every checkpoint, under ``key``."""
        ...

    def resume_positions(self) -> dict[str, Any]:
        """The data positions kept in the checkpoint this attempt started from."""
        ...
