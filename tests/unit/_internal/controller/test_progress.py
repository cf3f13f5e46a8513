"""The progress lines' content, written to a stream that is not a terminal."""

import io
import re

import pytest

from lockstep._internal.controller.progress import (
    Progress,
    RunSummary,
    choose_metrics,
    fit_width,
)


def progress(verbose: int = 1, **kwargs) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(
        name="exp", run_uri="/runs/exp", num_workers=2, verbose=verbose, stream=out, **kwargs
    ), out


def workers_running(p: Progress) -> None:
    """Take ``p`` through a fresh run's start to its workers running."""
    p.start(resumed_from=None)
    p.starting(0)
    p.workers_started()


def test_the_score_attribute_and_losses_come_first():
    metrics = {"epoch": 3, "acc": 0.9, "val_loss": 0.1, "loss": 0.2, "lr": 0.01, "tag": "x"}
    assert choose_metrics(metrics, None, "acc") == ["acc", "val_loss", "loss"]
    assert choose_metrics(metrics, None, None) == ["val_loss", "loss", "epoch"]


def test_the_users_choice_wins_and_missing_names_are_left_out():
    assert choose_metrics({"a": 1, "b": 2}, ["b", "missing"], "a") == ["b"]


def test_a_line_is_cut_with_an_ellipsis():
    assert fit_width("abcdef", 6) == "abcdef"
    assert fit_width("abcdefg", 6) == "abcde…"


def test_summary_names_the_best_checkpoint_and_how_to_see_the_run():
    p, out = progress(score_attribute="acc")
    workers_running(p)
    p.step(1, {"acc": 0.5, "loss": 1.0}, "checkpoint_000000")
    p.restarting("rank 1 (pid 7) was killed by SIGKILL")
    p.step(2, {"acc": 0.75, "loss": 0.5}, "checkpoint_000001")
    p.stop(RunSummary("finished", "checkpoint_000001", {"acc": 0.75, "loss": 0.5}))
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "[lockstep] run 'exp' in /runs/exp",
        "[lockstep] starting 2 workers ...",
        lines[2],
    ]
    assert lines[2].startswith("[lockstep] 2 workers ready in ")
    assert "[lockstep] restart 1: rank 1 (pid 7) was killed by SIGKILL" in lines
    assert re.fullmatch(
        r"\[lockstep\] finished in \d+\.\ds \(the whole fit\(\): starting the workers, "
        r"training, stopping them\): 2 reports, 1 restart",
        lines[-4],
    )
    assert lines[-3:] == [
        "[lockstep] best checkpoint: checkpoint_000001 (acc=0.75)",
        "[lockstep] run directory: /runs/exp",
        "[lockstep] see it with: lockstep runs show /runs/exp",
    ]


def test_an_elastic_resize_is_said_and_the_next_start_shows_the_new_size():
    p, out = progress()
    p.start(resumed_from=None)
    p.resized(4)  # the first size: nothing to say yet
    p.starting(0)
    p.workers_started()
    p.resizing(4, 1)
    p.resized(1)
    p.starting(1)
    lines = out.getvalue().splitlines()
    assert lines[1:3] == ["[lockstep] starting 4 workers ...", lines[2]]
    assert lines[-2:] == [
        "[lockstep] resizing from 4 to 1 workers: the capacity changed",
        "[lockstep] starting 1 worker ...",
    ]


class Clock:
    """The progress module's clock, moved by the test."""

    def __init__(self, monkeypatch):
        from lockstep._internal.controller import progress as module

        self.now = 1000.0
        monkeypatch.setattr(module.time, "monotonic", lambda: self.now)


def test_total_gives_iterations_out_of_it_and_an_eta(monkeypatch):
    clock = Clock(monkeypatch)
    p, _ = progress(total=10)
    workers_running(p)
    p.step(3, {"loss": 0.6}, None)
    clock.now += 1
    p.step(4, {"loss": 0.5}, None)
    line = p._status_line()
    assert re.search(r"\| iter 4/10 \| \d+\.\ds elapsed, ETA 6\.0s \| loss=0\.5 \| ", line), line


def test_the_eta_leaves_out_the_first_report_of_each_attempt(monkeypatch):
    clock = Clock(monkeypatch)
    p, out = progress(total=12)
    p.start(resumed_from=None)
    p.starting(0)
    clock.now += 2  # the workers start
    p.workers_started()
    clock.now += 10  # the first epoch: imports, data, rendezvous, then training
    p.step(1, {"loss": 0.9}, None)
    assert "ETA" not in p._status_line()  # one report tells nothing of the pace
    clock.now += 2
    p.step(2, {"loss": 0.8}, None)
    assert ", ETA 20.0s |" in p._status_line()  # 10 more at 2 s each, not at 6 s
    p.restarting("rank 1 (pid 7) was killed by SIGKILL")
    p.starting(1)
    clock.now += 3
    p.workers_started()
    clock.now += 10  # the restarted attempt's first report holds its start-up too
    p.step(3, {"loss": 0.7}, None)
    clock.now += 4
    p.step(4, {"loss": 0.6}, None)
    assert ", ETA 24.0s |" in p._status_line()  # (2 + 4) / 2 s a report, 8 to come
    clock.now += 1
    p.stop(RunSummary("finished"))
    assert (
        "[lockstep] finished in 32.0s (the whole fit(): starting the workers, training, "
        "stopping them): 4 reports, 1 restart"
    ) in out.getvalue().splitlines()


@pytest.mark.parametrize(
    ("verbose", "expected"),
    [(2, "[lockstep] iter 1: loss=0.5 epoch=0"), (3, "[lockstep] iter 1: epoch=0 loss=0.5 tag=a")],
)
def test_verbose_two_and_three_print_every_report(verbose, expected):
    p, out = progress(verbose=verbose)
    p.start(resumed_from=None)
    p.step(1, {"epoch": 0, "loss": 0.5, "tag": "a"}, None)
    assert expected in out.getvalue().splitlines()


def test_verbose_zero_is_silent():
    p, out = progress(verbose=0)
    workers_running(p)
    p.step(1, {"loss": 0.5}, None)
    p.stop(RunSummary("finished"))
    assert out.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_line_is_rebuilt_at_most_every_interval_however_fast_the_reports():
    import time

    from lockstep._internal.controller.progress import LIVE_INTERVAL_S

    class Counting(Progress):
        built = 0

        def _status_line(self) -> str:
            self.built += 1
            return super()._status_line()

    p = Counting(name="exp", run_uri="/runs/exp", num_workers=2, verbose=1, stream=Terminal())
    began = time.monotonic()
    p.start(resumed_from=None)
    p.workers_started()
    for i in range(2000):
        p.step(i, {"loss": 1.0 / (i + 1)}, None)
        p.refresh()
    intervals = int((time.monotonic() - began) / LIVE_INTERVAL_S)
    p.stop(RunSummary("finished"))
    # the first line, one per interval that passed, the last one: not 4000
    assert p.built <= intervals + 3
    assert "iter 1999" in p._status_line()
