from __future__ import annotations

import json
import os
from collections import deque

import pytest

from lockstep._core import run_events
from lockstep._core.callback import UserCallback
from lockstep._core.config import CheckpointConfig, FailureConfig
from lockstep._core.errors import TrainingFailedError, TrainingInterrupted, WorkerFailure
from lockstep._core.time_ledger import TIME_HOT_FILE, unpack_hot
from lockstep._internal.controller import reports
from lockstep._internal.controller.controller import (
    Errored,
    Finished,
    Restarting,
    Running,
    Starting,
)
from lockstep._internal.execution.messages import Failed, Report, Returned

from .fake_group import FakeWorkerGroup, fake_controller


def report(rank, step, checkpointed=False, **metrics):
    return Report(
        rank=rank,
        step=step,
        metrics={"step": step, **metrics},
        checkpointed=checkpointed,
        time=1000.0 + step,
    )


def returned(rank, num_reports, value=None):
    import cloudpickle

    return Returned(rank=rank, return_value=cloudpickle.dumps(value), num_reports=num_reports)


def failed(rank, time, retryable=True):
    return Failed(
        WorkerFailure(
            rank=rank,
            pid=10 + rank,
            kind="exception",
            summary=f"rank {rank} raised",
            time=time,
            retryable=retryable,
        )
    )


class Recorder(UserCallback):
    def __init__(self):
        self.reports, self.exceptions = [], []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((metrics, checkpoint and os.path.basename(checkpoint.path)))

    def after_exception(self, run_context, worker_exceptions):
        self.exceptions.append(sorted(worker_exceptions))


def make_controller(
    tmp_path,
    scripts,
    *,
    num_workers=2,
    max_failures=0,
    keep=None,
    score=None,
    callbacks=(),
    fail_start=False,
    hang_timeout_s=None,
    group_class=FakeWorkerGroup,
):
    log: list[str] = []
    scripts = deque(scripts)
    groups: list[FakeWorkerGroup] = []

    def make_group():
        group = group_class(scripts, log, fail_start=fail_start and not groups)
        groups.append(group)
        return group

    controller, run_dir = fake_controller(
        tmp_path,
        make_group,
        num_workers=num_workers,
        checkpoint_config=CheckpointConfig(
            num_to_keep=keep, checkpoint_score_attribute=score, checkpoint_score_order="min"
        ),
        failure_config=FailureConfig(max_failures=max_failures, hang_timeout_s=hang_timeout_s),
        callbacks=callbacks,
    )
    return controller, log, run_dir


def test_steps_one_transition_at_a_time(tmp_path):
    script = [[report(0, 0), report(1, 0)], [returned(0, 1, "done"), returned(1, 1)]]
    controller, _log, _ = make_controller(tmp_path, [script])
    assert controller.state == Starting(0)
    controller.step()
    assert isinstance(controller.state, Running) and controller.state.attempt == 0
    controller.step()
    assert isinstance(controller.state, Running) and controller.state.attempt == 0
    controller.step()
    assert isinstance(controller.state, Finished)


def test_happy_path_commits_checkpoints_and_returns_rank0(tmp_path):
    recorder = Recorder()
    script = [
        [report(0, 0, True, loss=3.0), report(1, 0, loss=9.0)],
        [report(1, 1, loss=8.0)],  # rank 1 runs ahead: step 1 is not complete yet
        [report(0, 1, True, loss=2.0), returned(1, 2)],
        [returned(0, 2, {"ok": 1})],
    ]
    controller, log, run_dir = make_controller(tmp_path, [script], callbacks=[recorder])
    result = controller.run()
    assert result.metrics == {"step": 1, "loss": 2.0}
    assert result.return_value == {"ok": 1}
    assert os.path.basename(result.checkpoint.path) == "checkpoint_000001"
    assert log == [
        "start attempt_000000 ckpt=None",
        "notify step=0 checkpoint_000000",
        "notify step=1 checkpoint_000001",
        "shutdown",
    ]
    assert recorder.reports == [
        ([{"step": 0, "loss": 3.0}, {"step": 0, "loss": 9.0}], "checkpoint_000000"),
        ([{"step": 1, "loss": 2.0}, {"step": 1, "loss": 8.0}], "checkpoint_000001"),
    ]
    assert sorted(run_dir.child("checkpoint_000000").listdir()) == ["rank0.txt"]
    assert [r["training_iteration"] for r in result.metrics_dataframe.to_dict("records")] == [1, 2]
    assert not run_dir.exists(".staging")


def test_failure_restarts_from_latest_checkpoint(tmp_path):
    recorder = Recorder()
    first = [[report(0, 0, True), report(1, 0)], [failed(1, time=5.0)]]
    second = [[report(0, 0, True), report(1, 0)], [returned(0, 1), returned(1, 1)]]
    controller, log, _run_dir = make_controller(
        tmp_path, [first, second], max_failures=1, callbacks=[recorder]
    )
    controller.step()
    controller.step()
    controller.step()
    assert isinstance(controller.state, Restarting)
    controller.step()
    assert controller.state == Starting(1)
    result = controller.run()
    assert log == [
        "start attempt_000000 ckpt=None",
        "notify step=0 checkpoint_000000",
        "shutdown",
        "start attempt_000001 ckpt=checkpoint_000000",
        "notify step=0 checkpoint_000001",
        "shutdown",
    ]
    assert recorder.exceptions == [[1]]
    assert result.metrics_dataframe["training_iteration"].tolist() == [1, 2]
    assert controller._run_record.state.num_failures == 1


def test_raises_first_failure_by_time_when_budget_is_spent(tmp_path):
    script = [[report(0, 0), report(1, 0)], [failed(0, time=9.0), failed(1, time=3.0)]]
    controller, _log, run_dir = make_controller(tmp_path, [script], max_failures=0)
    with pytest.raises(TrainingFailedError, match="rank 1 raised") as info:
        controller.run()
    assert info.value.root_cause.rank == 1 and sorted(info.value.worker_failures) == [0, 1]
    assert isinstance(controller.state, Errored)
    assert "rank 1 raised" in run_dir.read_text("error.txt")
    assert '"status": "errored"' in run_dir.read_text("run_state.json")


def test_misuse_is_not_retried(tmp_path):
    script = [[failed(0, time=1.0, retryable=False)]]
    controller, log, _ = make_controller(tmp_path, [script], max_failures=5)
    with pytest.raises(TrainingFailedError):
        controller.run()
    assert log.count("shutdown") == 1


def test_report_count_mismatch_is_an_error_not_a_hang(tmp_path):
    script = [[report(0, 0), report(1, 0)], [returned(1, 1)], [report(0, 1, True)]]
    controller, _, _ = make_controller(tmp_path, [script], max_failures=3)
    with pytest.raises(
        TrainingFailedError,
        match=r"different number of times: rank 1 returned after 1 report while rank 0 "
        r"waits in its report number 2 \(reports: rank 0: 2, rank 1: 1 \(returned\)\)",
    ):
        controller.run()


def test_report_is_released_once_every_rank_reported_the_step(tmp_path):
    script = [
        [report(0, 0)],
        [report(1, 0)],
        [report(0, 1, True), report(1, 1)],
        [returned(0, 2), returned(1, 2)],
    ]
    controller, _, _ = make_controller(tmp_path, [script])
    controller.step()  # start
    fake = controller.state.run.group
    controller.step()
    assert fake.released == []  # rank 0 waits in report() until rank 1 reports step 0
    controller.step()
    assert fake.released == [0]
    controller.step()
    # a checkpointed step is released once its commit is told: a worker on a release line
    # reads the commit first, then takes the line's signal
    assert fake.released == [0, 1] and [m.step for m in fake.notified] == [1]
    assert fake.told == ["released step=0", "committed step=1", "released step=1"]


def test_the_table_and_the_time_figures_follow_a_step_when_the_driver_is_idle(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(reports, "CATCH_UP_S", 3600.0)  # only an idle poll catches up
    script = [
        [report(0, 0), report(1, 0)],
        [report(0, 1), report(1, 1)],
        [],  # nothing came: the driver is idle
        [returned(0, 2), returned(1, 2)],
    ]
    controller, _, run_dir = make_controller(tmp_path, [script])

    def lines(name):
        return len(run_dir.read_text(name).splitlines()) if run_dir.exists(name) else 0

    controller.step()  # start
    controller.step()
    controller.step()
    assert controller.state.run.group.released == [0, 1]
    # result.json's lines are written before the workers are released; progress.csv (a
    # header and the first line, written with result.json's first) and time.bin wait
    assert (lines("result.json"), lines("progress.csv")) == (2, 2)
    assert not run_dir.exists(TIME_HOT_FILE)
    controller.step()
    assert (lines("result.json"), lines("progress.csv")) == (2, 3)
    assert unpack_hot(run_dir.read_bytes(TIME_HOT_FILE)) is not None


def test_a_death_while_others_wait_in_report_names_every_count(tmp_path):
    died = Failed(
        WorkerFailure(
            rank=1, pid=11, kind="signal", summary="rank 1 (pid 11) was killed by SIGKILL", time=5.0
        )
    )
    script = [[report(0, 0), report(1, 0)], [report(0, 1), died]]
    controller, _, _ = make_controller(tmp_path, [script])
    with pytest.raises(TrainingFailedError) as info:
        controller.run()
    assert (
        "rank 1 (pid 11) was killed by SIGKILL; rank 0 waited in report() "
        "(reports: rank 0: 2, rank 1: 1)" in str(info.value)
    )


def test_start_failure_raises_controller_error(tmp_path):
    from lockstep._core.errors import ControllerError

    controller, _, _ = make_controller(tmp_path, [[]], fail_start=True)
    with pytest.raises(ControllerError, match="could not be started"):
        controller.run()


def test_start_failure_counts_as_a_failure(tmp_path):
    script = [[returned(0, 0), returned(1, 0)]]
    controller, log, _ = make_controller(tmp_path, [[], script], max_failures=1, fail_start=True)
    controller.run()
    assert log == ["shutdown", "start attempt_000001 ckpt=None", "shutdown"]


def test_retention_keeps_best_and_latest(tmp_path):
    losses = [5.0, 1.0, 4.0, 3.0]
    script = [[report(r, s, r == 0, loss=loss) for r in (0, 1)] for s, loss in enumerate(losses)]
    script.append([returned(0, 4), returned(1, 4)])
    controller, _, run_dir = make_controller(tmp_path, [script], keep=1, score="loss")
    result = controller.run()
    kept = sorted(n for n in run_dir.listdir() if n.startswith("checkpoint_"))
    assert kept == ["checkpoint_000001", "checkpoint_000003"]  # best (1.0) and latest
    # as Ray: the num_to_keep best only; the latest is result.checkpoint, not listed
    assert [os.path.basename(c.path) for c, _ in result.best_checkpoints] == ["checkpoint_000001"]
    assert os.path.basename(result.checkpoint.path) == "checkpoint_000003"


def test_a_requested_stop_keeps_the_committed_checkpoints_and_can_continue(tmp_path):
    import json

    from lockstep._core.errors import TrainingInterrupted
    from lockstep._internal.controller.controller import Stopped

    script = [
        [report(0, 0, True), report(1, 0)],
        [report(0, 1, True), report(1, 1)],  # staged, never committed: the stop comes first
    ]
    controller, log, run_dir = make_controller(tmp_path, [script])
    controller.step()
    controller.step()
    controller.request_stop("Ctrl-C")  # what the first Ctrl-C, or a preemption, does
    with pytest.raises(TrainingInterrupted) as raised:
        controller.run()
    assert controller.state == Stopped("Ctrl-C")
    assert raised.value.code == 130 and isinstance(raised.value, KeyboardInterrupt)
    assert (raised.value.training_iteration, raised.value.latest_checkpoint) == (
        1,
        "checkpoint_000000",
    )
    assert str(raised.value) == (
        f"stopped by Ctrl-C at iteration 1, latest checkpoint checkpoint_000000; "
        f"run in {run_dir.uri}"
    )
    assert log[-1] == "shutdown"
    state = json.loads(run_dir.read_text("run_state.json"))
    assert state["status"] == "interrupted"
    assert state["latest"] == "checkpoint_000000"
    assert sorted(n for n in run_dir.listdir() if n.startswith("checkpoint")) == [
        "checkpoint_000000"
    ]
    assert not run_dir.exists(".staging")


class LosesItsNode(FakeWorkerGroup):
    """A group whose failing workers' launched process is lost with them: the stop is
    asked for while the group is polled (as the cluster group's poll waits to hear how
    the workers ended)."""

    stop: list = []

    def poll(self, timeout):
        events = super().poll(timeout)
        if any(isinstance(e, Failed) for e in events):
            self.stop[0]("launched process 1 on n2 was lost")
        return events


def test_workers_failing_as_a_stop_is_asked_for_stop_the_run_counting_no_failure(tmp_path):
    """The stop, not the failures, is how the run ends (torchrun's elastic rendezvous
    starts it again without the node), and no failure counts against max_failures=0."""
    script = [[report(0, 0, True), report(1, 0)], [failed(1, time=1.0)]]
    controller, log, run_dir = make_controller(
        tmp_path, [script], max_failures=0, group_class=LosesItsNode
    )
    LosesItsNode.stop[:] = [controller.request_stop]
    with pytest.raises(TrainingInterrupted) as raised:
        controller.run()
    assert raised.value.reason == "launched process 1 on n2 was lost"
    assert log[-1] == "shutdown"  # the workers left on the other nodes are stopped
    state = json.loads(run_dir.read_text("run_state.json"))
    assert (state["status"], state["num_failures"], state["latest"]) == (
        "interrupted",
        0,
        "checkpoint_000000",
    )


def test_a_peer_error_waits_for_the_death_that_caused_it(tmp_path):
    closed = Failed(
        WorkerFailure(
            rank=0,
            pid=10,
            kind="exception",
            summary="rank 0 (pid 10) raised RuntimeError: Connection closed by peer",
            time=1.0,
        )
    )
    killed = Failed(
        WorkerFailure(
            rank=1, pid=11, kind="signal", summary="rank 1 (pid 11) was killed by SIGKILL", time=2.0
        )
    )
    # the peer's error arrives one poll before the watcher sees the death
    script = [[report(0, 0), report(1, 0)], [closed], [], [killed]]
    controller, _log, _run_dir = make_controller(tmp_path, [script], max_failures=0)
    with pytest.raises(TrainingFailedError, match=r"^Training failed: rank 1 \(pid 11\)") as info:
        controller.run()
    assert sorted(info.value.worker_failures) == [0, 1]


class Scheduler:
    """A listener answering each recorded step as a Tune scheduler would: ``answers`` in
    order, then CONTINUE."""

    events = (run_events.StepRecorded,)

    def __init__(self, *answers):
        self.answers = list(answers)
        self.seen = []

    def on_event(self, event):
        self.seen.append(event.iteration)
        return self.answers.pop(0) if self.answers else run_events.Directive.CONTINUE


def scheduled(tmp_path, scheduler):
    script = [[report(0, 0), report(1, 0)], [report(0, 1), report(1, 1)], [], []]
    log: list[str] = []
    groups = deque([script])
    return fake_controller(
        tmp_path, lambda: FakeWorkerGroup(groups, log), listeners=[scheduler]
    ), log


def test_a_stop_directive_ends_the_run_finished_at_that_step(tmp_path):
    scheduler = Scheduler(run_events.Directive.CONTINUE, run_events.Directive.STOP)
    (controller, run_dir), log = scheduled(tmp_path, scheduler)
    result = controller.run()
    assert scheduler.seen == [1, 2] and result.metrics == {"step": 1}
    assert isinstance(controller.state, Finished) and controller.stopped_early
    assert log[-1] == "shutdown"
    with open(run_dir.join("run_state.json")) as f:
        assert json.load(f)["status"] == "finished"


def test_a_pause_directive_stops_the_run_restorable(tmp_path):
    scheduler = Scheduler(run_events.Directive.PAUSE)
    (controller, run_dir), log = scheduled(tmp_path, scheduler)
    with pytest.raises(TrainingInterrupted) as stopped:
        controller.run()
    assert controller.paused and stopped.value.training_iteration == 1
    assert log[-1] == "shutdown"
    with open(run_dir.join("run_state.json")) as f:
        assert json.load(f)["status"] == "interrupted"
