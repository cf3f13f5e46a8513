"""The progress display as a listener of the run: events in, lines and a status line out."""

from __future__ import annotations

import posixpath

from lockstep._core import run_events as ev
from lockstep._internal.controller.progress import Progress, RunSummary


class ProgressListener:
    """Shows a run's events on its :class:`Progress` display; a silent one (``verbose=0``)
    takes none of the steps' events, so that nobody builds them for it. It only shows:
    it never stops or pauses the run."""

    decides = False

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.events: tuple[type[ev.RunEvent], ...] = (ev.RunEvent,)
        if not progress.shows_steps:
            self.events = (
                ev.RunStarted,
                ev.AttemptStarting,
                ev.WorkersStarted,
                ev.WorkerEnded,
                ev.AttemptFailed,
                ev.Resizing,
                ev.Notice,
                ev.RunEnded,
            )

    def on_event(self, event: ev.RunEvent) -> None:  # noqa: C901 - one branch per event
        progress = self.progress
        if isinstance(event, ev.StepRecorded):
            name = posixpath.basename(event.checkpoint.path) if event.checkpoint else None
            progress.step(event.iteration, dict(event.metrics), name)
        elif isinstance(event, ev.StepEnd):
            progress.refresh()
        elif isinstance(event, ev.WorkerEnded):
            progress.worker_stopped()
        elif isinstance(event, ev.RunStarted):
            progress.start(resumed_from=event.resumed_from, iteration=event.iteration)
        elif isinstance(event, ev.AttemptStarting):
            progress.resized(event.num_workers)
            progress.starting(event.run.attempt)
        elif isinstance(event, ev.WorkersStarted):
            progress.workers_started()
        elif isinstance(event, ev.AttemptFailed) and event.restarting:
            progress.restarting(event.summary)
        elif isinstance(event, ev.Resizing):
            progress.resizing(event.old, event.new)
        elif isinstance(event, ev.Notice):
            progress.notice(event.text)
        elif isinstance(event, ev.RunEnded):
            progress.stop(_summary(event))


def _summary(event: ev.RunEnded) -> RunSummary:
    best = (
        event.result.best_checkpoints[-1]
        if event.result and event.result.best_checkpoints
        else None
    )
    return RunSummary(
        outcome=event.outcome,
        best_checkpoint=posixpath.basename(best[0].path) if best else None,
        best_metrics=best[1] if best else None,
        stopped=event.stopped,
        time=event.result.time if event.result is not None else None,
    )
