"""A worker group that replays scripted events, for testing the controller without processes."""

from __future__ import annotations

from collections import deque

from lockstep._core.storage import staging_dir_name
from lockstep._internal.execution.messages import (
    CheckpointCommitted,
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
        self.log.append(f"start offset={spec.step_offset} ckpt={name}")

    def poll(self, timeout: float) -> list[WorkerEvent]:
        events = self._polls.popleft() if self._polls else []
        assert self.spec is not None
        for event in events:
            if isinstance(event, Report) and event.checkpointed:
                # what a worker does before it reports a checkpoint: stage its files
                staged = staging_dir_name(self.spec.step_offset + event.step, event.rank)
                self.spec.run_dir.makedirs(staged)
                path = self.spec.run_dir.join(staged, f"rank{event.rank}.txt")
                with open(path, "w") as f:
                    f.write(str(event.metrics))
        return events

    def notify(self, message: StepDone | CheckpointCommitted) -> None:
        if isinstance(message, StepDone):
            self.released.append(message.step)
            return
        self.notified.append(message)
        self.log.append(f"notify step={message.step} {message.checkpoint.path.rsplit('/', 1)[-1]}")

    def shutdown(self) -> None:
        self.log.append("shutdown")
