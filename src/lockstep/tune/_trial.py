"""A trial as the Tuner keeps it: the shared ``Trial`` plus what the runner needs."""

from __future__ import annotations

import re
from typing import Any

from lockstep._core import storage
from lockstep._core.callback import Trial
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.result import Result, read_results
from lockstep._core.run_state import RunState

PENDING, RUNNING, PAUSED, TERMINATED, ERROR = (
    "PENDING",
    "RUNNING",
    "PAUSED",
    "TERMINATED",
    "ERROR",
)


class TuneTrial(Trial):
    """One config's run; its directory is ``{experiment}/{dirname}``."""

    def __init__(
        self,
        *,
        trial_id: str,
        config: dict[str, Any],
        experiment_dir: storage.StorageDir,
        dirname: str,
        experiment_tag: str,
        resources: dict[str, float],
    ) -> None:
        super().__init__(
            trial_id=trial_id,
            config=config,
            path=experiment_dir.join(dirname),
            experiment_tag=experiment_tag,
        )
        self.dirname = dirname
        self.resources = resources
        self.checkpoint: Checkpoint | None = None
        # A PBT donor's checkpoint (and what its step reported) the next run starts from.
        self.restore_checkpoint: Checkpoint | None = None
        self.restore_metrics: dict[str, Any] = {}
        self.results: list[dict[str, Any]] = []
        self.error_text: str | None = None
        self.num_failures = 0
        self.stop_requested = False
        self.pending_exploit: Any = None
        self.custom_name: str | None = None
        self._experiment_dir = experiment_dir

    @property
    def run_dir(self) -> storage.StorageDir:
        return self._experiment_dir.child(self.dirname)

    @property
    def iteration(self) -> int:
        return int(self.last_result.get("training_iteration", 0))

    def __str__(self) -> str:
        return self.custom_name or self.trial_id

    def result(self) -> Result:
        """The trial's outcome as a Result (``metrics`` hold Tune's own keys too)."""
        return Result(
            metrics=dict(self.last_result) if self.last_result else {},
            checkpoint=self.checkpoint,
            best_checkpoints=[(self.checkpoint, dict(self.last_result))]
            if self.checkpoint is not None
            else [],
            path=self.path,
            error=self.error,  # type: ignore[arg-type]
            _run_dir=self.run_dir,
        )

    def reload_from_disk(self) -> None:
        """Catch up with what the trial wrote after the experiment state was saved."""
        rows = read_results(self.run_dir) if self.run_dir.exists() else []
        if rows:
            self.results = [{**row, "trial_id": self.trial_id} for row in rows]
            self.last_result = self.results[-1]
        latest = latest_checkpoint_name(self.run_dir)
        if latest is not None:
            self.checkpoint = Checkpoint(self.run_dir.join(latest), self.run_dir.fs)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["error"] = None  # the text is kept; exceptions may not unpickle elsewhere
        state["stop_requested"] = False
        state["pending_exploit"] = None
        return state


def latest_checkpoint_name(run_dir: storage.StorageDir) -> str | None:
    """The latest committed checkpoint of the trial's run, as its run state names it."""
    if not run_dir.exists(storage.STATE_FILE):
        return None
    return RunState.from_json(run_dir.read_bytes(storage.STATE_FILE)).latest


_UNSAFE = re.compile(r"[^A-Za-z0-9_.=,+@-]+")


def safe_dirname(text: str, limit: int = 90) -> str:
    """``text`` as a directory name: unsafe characters replaced, length limited."""
    cleaned = _UNSAFE.sub("_", text).strip("._") or "trial"
    return cleaned[:limit]
