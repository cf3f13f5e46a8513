"""A worker group that replays scripted events, for testing the controller without processes."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lockstep._core.config import CheckpointConfig, FailureConfig
from lockstep._core.preemption import PreemptionInfo
from lockstep._core.storage import StorageDir, staging_dir_name
from lockstep._internal.backends.base import BackendConfig
from lockstep._internal.controller.controller import TrainController
from lockstep._internal.controller.failure_policy import FailurePolicy
from lockstep._internal.controller.progress import Progress
from lockstep._internal.controller.run_record import RunRecord
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
    Preempted,
    Report,
    StepDone,
    WorkerEvent,
)
from lockstep._internal.execution.worker_group.base import WorkerGroupSpec


class FakeWorkerGroup:
    """Each attempt pops the next script: a list of polls, each a list of events."""

    def __init__(
        self, scripts: deque[list[list[WorkerEvent]]], log: list[str], fail_start: bool = False
    ) -> None:
        self._polls = deque(scripts.popleft())
        self.log = log
        self.fail_start = fail_start
        self.spec: WorkerGroupSpec | None = None
        self.notified: list[CheckpointCommitted] = []
        self.released: list[int] = []  # steps released (StepDone)
        self.told: list[str] = []  # commits and releases, in the order told

    def start(self, spec: WorkerGroupSpec) -> None:
        if self.fail_start:
            raise OSError("no processes today")
        self.spec = spec
        name = spec.checkpoint.path.rsplit("/", 1)[-1] if spec.checkpoint else None
        staging = spec.staging_dir.rsplit("/", 1)[-1]
        self.log.append(f"start {staging} ckpt={name}")

    def poll(self, timeout: float) -> list[WorkerEvent]:
        events = self._polls.popleft() if self._polls else []
        return [self._stage(e) if isinstance(e, Report) and e.checkpointed else e for e in events]

    def _stage(self, report: Report) -> Report:
        """What a worker does before it reports a checkpoint: stage its files where the
        driver said, and say where in the report."""
        assert self.spec is not None
        root = self.spec.staging_dir
        staged = staging_dir_name(report.step, report.rank, root=root)
        self.spec.run_dir.makedirs(staged)
        with open(self.spec.run_dir.join(staged, f"rank{report.rank}.txt"), "w") as f:
            f.write(str(report.metrics))
        return dataclasses.replace(report, staged=staging_dir_name(report.step, root=root))

    def notify(self, message: StepDone | CheckpointCommitted | Preempted) -> None:
        if isinstance(message, Preempted):
            self.log.append(f"preempted {message.info.reason}")
            return
        if isinstance(message, StepDone):
            self.released.append(message.step)
            self.told.append(f"released step={message.step}")
            return
        self.notified.append(message)
        self.told.append(f"committed step={message.step}")
        self.log.append(f"notify step={message.step} {message.checkpoint.path.rsplit('/', 1)[-1]}")

    def preemption_notice(self) -> PreemptionInfo | None:
        return None

    @property
    def step_page(self) -> None:
        return None  # the driver ends every step

    def collect_stacks(self, timeout: float = 2.0) -> dict[int, tuple[int, str]]:
        return {}

    def worker_places(self) -> dict[int, Any]:
        return {}

    def shutdown(self) -> None:
        self.log.append("shutdown")


def fake_controller(
    tmp_path: Path,
    make_group: Callable[[], FakeWorkerGroup],
    *,
    num_workers: int = 2,
    checkpoint_config: CheckpointConfig | None = None,
    failure_config: FailureConfig | None = None,
    **options: Any,
) -> tuple[TrainController, StorageDir]:
    """A controller of run ``exp`` in ``tmp_path/run`` (returned too) whose worker groups
    come from ``make_group``; ``options`` go to TrainController."""
    run_dir = StorageDir.from_uri(tmp_path / "run")
    run_dir.makedirs()
    controller = TrainController(
        make_worker_group=make_group,
        spec=WorkerGroupSpec(
            num_workers=num_workers,
            experiment_name="exp",
            train_fn=b"",
            backend=BackendConfig().make_backend(),
            run_dir=run_dir,
        ),
        record=RunRecord.open(run_dir, checkpoint_config or CheckpointConfig()),
        failure_policy=FailurePolicy(failure_config or FailureConfig()),
        progress=Progress(name="exp", run_uri=run_dir.uri, num_workers=num_workers, verbose=0),
        **options,
    )
    return controller, run_dir
