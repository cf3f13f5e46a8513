"""A worker group that replays scripted events, for testing the controller without processes."""

from __future__ import annotations

import dataclasses
from collections import deque

from lockstep._core.storage import staging_dir_name
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
        self.released: list[int] = []  # steps released without a checkpoint (StepDone)

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
            return
        self.notified.append(message)
        self.log.append(f"notify step={message.step} {message.checkpoint.path.rsplit('/', 1)[-1]}")

    def shutdown(self) -> None:
        self.log.append("shutdown")
