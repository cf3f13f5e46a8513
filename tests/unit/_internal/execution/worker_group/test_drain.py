"""What a worker sent before another one ended is handed over before that end."""

from __future__ import annotations

import time
from multiprocessing import Pipe

from lockstep._core.config import ScalingConfig
from lockstep._core.errors import WorkerFailure
from lockstep._internal.execution.messages import Failed, Report
from lockstep._internal.execution.plan import ExecutionPlan, Launcher, Transport
from lockstep._internal.execution.worker_group.base import ConnectedWorkerGroup


class PipeGroup(ConnectedWorkerGroup):
    """Two 'workers' that are the far ends of pipes this test writes into."""

    def __init__(self):
        super().__init__(
            ExecutionPlan(
                executor="process",
                scaling=ScalingConfig(num_workers=2),
                launcher=Launcher.SPAWN,
                transport=Transport.SOCKET_PAIR,
            )
        )
        self.far = {}

    def _launch(self, spec, starts):
        conns = {}
        for rank in (0, 1):
            ours, theirs = Pipe()
            conns[rank], self.far[rank] = ours, theirs
        return conns

    def _lost(self, rank):
        return WorkerFailure(
            rank=rank, pid=None, kind="lost", summary=f"rank {rank} lost", time=time.time()
        )

    def _stop_workers(self, finished):
        for conn in self.far.values():
            conn.close()


def report(rank, step):
    return Report(rank, step, {"step": step}, False, 0.0)


def start(group):
    group._relay = group._relay.__class__(2)
    group._conns = group._launch(None, {})


def test_reports_of_other_workers_come_before_a_death_is_acted_on():
    group = PipeGroup()
    start(group)
    # rank 1 reported and died; rank 0's report of the same step is on its way too
    group.far[1].send(report(1, 0))
    group.far[1].close()
    group.far[0].send(report(0, 0))
    events: list = []
    # a poll that sees only rank 1's end must still hand over rank 0's report
    group._drain(1, events)
    assert [type(e).__name__ for e in events] == ["Report", "Failed"]
    group._take_everything_sent(events)
    assert [(type(e).__name__, getattr(e, "rank", None)) for e in events] == [
        ("Report", 1),
        ("Failed", None),
        ("Report", 0),
    ]
    group.shutdown()


def test_poll_takes_everything_sent_when_a_worker_ends():
    group = PipeGroup()
    start(group)
    group.far[0].send(report(0, 0))
    group.far[1].send(report(1, 0))
    group.far[1].close()
    events = []
    while not any(isinstance(e, Failed) for e in events):
        events += group.poll(1.0)
    reports = sorted(e.rank for e in events if isinstance(e, Report))
    assert reports == [0, 1]
    group.shutdown()
