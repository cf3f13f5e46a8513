"""The trial runner: admits trials into the resource pool, carries out the decisions of
stoppers and schedulers, tells the search algorithm and the callbacks, saves the state.

Each trial is a lockstep run in a thread of its own. The runner's link is one listener of
the run's events: every recorded step goes through :meth:`TrialRunner._on_report` in the
runner's thread, whose decision goes back to the run as a directive (stop, pause), which
its controller carries out (a function trial's ``report()`` ends the function there).
The runner never writes into a trial's directory: the run's record is the one writer
there.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import queue
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

from lockstep._core import storage
from lockstep._core.callback import Callback, Trial
from lockstep._core.checkpoint import Checkpoint
from lockstep._core.result import user_metrics
from lockstep._core.run_events import (
    AttemptFailed,
    Directive,
    RunEvent,
    StepRecorded,
    tune_result,
)
from lockstep._core.trial import TrialOutcome, TrialRun
from lockstep.tune._progress import TrialTable
from lockstep.tune._resources import ResourcePool
from lockstep.tune._state import STUDY_FILE, Journal, SaveThrottle, write_state
from lockstep.tune._stopper import Stopper
from lockstep.tune._threads import TrialThreads
from lockstep.tune._trainable import (
    FunctionParts,
    function_parts,
    run_trial,
    trial_run_config,
)
from lockstep.tune._trial import (
    ERROR,
    PAUSED,
    PENDING,
    RUNNING,
    TERMINATED,
    TuneTrial,
)
from lockstep.tune._waiting import WaitingTrials
from lockstep.tune.schedulers._base import Exploit, TrialScheduler
from lockstep.tune.search._process import SearchProcess, SearchProcessError, runs_apart
from lockstep.tune.search._searcher import Searcher, innermost


@dataclasses.dataclass
class _Report:
    trial: TuneTrial
    result: dict[str, Any]
    checkpoint: Checkpoint | None
    reply: queue.SimpleQueue[Directive]


@dataclasses.dataclass
class _Recovering:
    """The trial's run failed and restarts from its latest checkpoint."""

    trial: TuneTrial


@dataclasses.dataclass
class _Ended:
    trial: TuneTrial
    outcome: str  # "done" | "paused" | "error"
    error: BaseException | None = None
    traceback: str | None = None


@dataclasses.dataclass
class _Suggested:
    """The search process's answer to a request for the trial of ``key``."""

    key: str
    config: Any


@dataclasses.dataclass
class _SearchFailed:
    """A call to the search process failed: a suggestion (its ``key``), or another."""

    key: str | None
    error: BaseException


_Event = _Report | _Recovering | _Ended | _Suggested | _SearchFailed
_ASKED = object()  # the next trial was asked of the search process


class TrialLink:
    """The runner's listener of one trial's run, in the trial's thread: each recorded
    step becomes a result for the runner, whose decision comes back as a directive."""

    events = (StepRecorded, AttemptFailed)

    def __init__(self, trial: TuneTrial, events: queue.SimpleQueue[_Event]) -> None:
        self._trial = trial
        self._events = events

    def on_event(self, event: RunEvent) -> Directive | None:
        if isinstance(event, AttemptFailed):
            if event.restarting:
                self._events.put(_Recovering(self._trial))
            return None
        assert isinstance(event, StepRecorded)
        trial = self._trial
        result = tune_result(
            event.row, event.clock, trial_id=trial.trial_id, config=trial.config, time=event.time
        )
        reply: queue.SimpleQueue[Directive] = queue.SimpleQueue()
        self._events.put(_Report(trial, result, event.checkpoint, reply))
        return reply.get()


@dataclasses.dataclass
class RunnerSetup:
    """Everything the runner is given by the Tuner."""

    trainable: Any
    experiment_dir: storage.StorageDir
    searcher: Searcher
    scheduler: TrialScheduler
    stopper: Stopper | None
    callbacks: Sequence[Callback]
    pool: ResourcePool
    max_concurrent: int
    num_samples: int
    time_budget_s: float | None
    run_config: Any
    new_trial: Callable[[dict[str, Any]], TuneTrial]
    table: TrialTable


class TrialRunner:
    """Runs the experiment's trials until the search is finished and every trial ended."""

    def __init__(self, setup: RunnerSetup, trials: list[TuneTrial], num_created: int) -> None:
        self._s = setup
        self.trials = trials
        self._num_created = num_created
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._running: set[str] = set()  # the trials whose runs are under way
        self._trial_threads = TrialThreads()
        self._iteration = 0
        self._started = time.monotonic()
        self._throttle = SaveThrottle()
        self._stop_all = False
        self._journal = Journal(setup.experiment_dir)
        self._synced_lines = self._journal.num_lines  # on the disk when the state was saved
        self._waiting = WaitingTrials(trials)
        self._self_limiting = _self_limiting(setup.searcher)
        self._function_parts: FunctionParts | None = None  # the first trial makes them
        # The search in a process of its own (see search/_process.py), asked without
        # waiting: _asking requests are out, each under a key of its own.
        self._apart: SearchProcess | None = None
        self._asking = 0
        self._num_asked = num_created
        self._hold_asks = False  # it answered "nothing now": ask again after another event
        self._told = 0  # calls the search process was sent that tell it something
        self._told_when_asked: dict[str, int] = {}
        self._last_resources: dict[str, float] = {"CPU": 1.0}  # of the last trial created
        # What the callbacks are given: the runner's own list, as Ray gives its own (a copy
        # per event would cost every trial once per event).
        self._shown = cast("list[Trial]", trials)
        self.search_finished = False

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        for callback in self._s.callbacks:
            callback.setup(stop=self._s.stopper, num_samples=self._s.num_samples)
        self._s.table.start(self.trials)
        completed = False
        try:
            self._start_search_process()
            self._loop()
            completed = True
        finally:
            try:
                self._shutdown()  # a second Ctrl-C here still leaves the state saved
            finally:
                self._trial_threads.close(wait=not self._running)
                self._journal.close()
                apart = self._close_search()
                try:
                    if apart is None or not apart.lost:
                        self.save(status="finished" if completed else "interrupted")
                    # else the last snapshot and the journal stand, as for a killed
                    # driver: the searcher here knows nothing the process learned
                finally:
                    if apart is not None:
                        apart.wait()  # it exited meanwhile
                self._s.table.stop(self.trials, "done" if completed else "interrupted")
            if completed:
                for callback in self._s.callbacks:
                    callback.on_experiment_end(trials=self._shown)

    def _loop(self) -> None:
        while True:
            # An exception in a callback's hook ends the experiment, restorable (Ray's).
            for callback in self._s.callbacks:
                callback.on_step_begin(self._iteration, self._shown)
            self._check_budget()
            self._start_trials()
            if not self._running and not self._asking and self._nothing_left():
                return
            self._handle(self._events.get())
            while True:  # whatever else arrived meanwhile, before starting new trials
                try:
                    self._handle(self._events.get_nowait())
                except queue.Empty:
                    break
            if self._throttle.due():
                self.save(status="running")
            for callback in self._s.callbacks:
                callback.on_step_end(self._iteration, self._shown)

    def _nothing_left(self) -> bool:
        if self._stop_all:
            return True
        waiting = self._waiting.ordered()
        if waiting:
            # paused trials nobody will resume (their scheduler is done with them) end here
            runnable = self._s.scheduler.choose_trial_to_run(self, waiting)
            if runnable is None and not self._searching():
                for trial in list(waiting):
                    self._finish(trial, TERMINATED)
                return True
            return False
        return not self._searching()

    def _searching(self) -> bool:
        if self.search_finished:
            return False
        limit = self._s.num_samples
        capped = limit > 0 and self._num_created >= limit
        finished = self._apart.is_finished() if self._apart else self._s.searcher.is_finished()
        if (capped and not self._self_limiting) or finished:
            self.search_finished = True
        return not self.search_finished

    def _check_budget(self) -> None:
        budget = self._s.time_budget_s
        over = budget is not None and time.monotonic() - self._started > budget
        if self._stop_all:
            return  # every trial was told once
        if over or (self._s.stopper is not None and self._s.stopper.stop_all()):
            self._stop_all = True
            self.search_finished = True
            for trial in self.trials:
                trial.stop_requested = True

    # -- starting trials --------------------------------------------------------------------

    def _start_trials(self) -> None:
        while not self._stop_all and len(self._running) + self._asking < self._s.max_concurrent:
            trial = self._next_trial()
            if trial is _ASKED:
                continue
            if trial is None or not self._s.pool.fits(trial.resources):
                return
            self._launch(trial)

    def _next_trial(self) -> Any:
        waiting = self._waiting.ordered()
        chosen = self._s.scheduler.choose_trial_to_run(self, waiting) if waiting else None
        if chosen is not None:
            return chosen
        if not self._searching():
            return None
        if self._apart is not None:
            return self._ask()
        trial_id = f"{self._s.experiment_dir.uri}:{self._num_created}"
        return self._suggested(trial_id, self._s.searcher.suggest(trial_id))

    def _ask(self) -> Any:
        """Ask the search process for a trial (it comes back as a _Suggested event)."""
        limit = self._s.num_samples
        full = limit > 0 and self._num_created + self._asking >= limit
        if self._hold_asks or (full and not self._self_limiting) or not self._room_to_ask():
            return None
        assert self._apart is not None
        key = f"{self._s.experiment_dir.uri}:{self._num_asked}"
        self._apart.suggest(key)
        self._told_when_asked[key] = self._told
        self._num_asked += 1
        self._asking += 1
        return _ASKED

    def _suggested(self, trial_id: str, config: Any) -> TuneTrial | None:
        """The trial of the search's answer ``config`` (None for none), created."""
        if config == Searcher.FINISHED:
            self.search_finished = True
            return None
        if not isinstance(config, dict):
            return None
        trial = self._s.new_trial(config)
        trial.search_key = trial_id  # type: ignore[attr-defined]
        self._last_resources = trial.resources
        self._num_created += 1
        self.trials.append(trial)
        self._waiting.add(trial)
        self._journal.created(trial)
        self._searching()  # the last trial's results are judged knowing it is the last
        self._s.scheduler.on_trial_add(self, trial)
        return trial

    def _launch(self, trial: TuneTrial) -> None:
        self._s.pool.acquire(trial.resources)
        self._waiting.set_status(trial, RUNNING)
        trial.stop_requested = False
        trial.run_dir.makedirs()
        run = TrialRun(
            trial_id=trial.trial_id,
            trial_name=str(trial),
            resources=dict(trial.resources),
            listener=TrialLink(trial, self._events),
            start_from=trial.restore_checkpoint,
            start_metrics=trial.restore_metrics,
        )
        restored = trial.restore_checkpoint is not None or trial.checkpoint is not None
        trial.restore_checkpoint, trial.restore_metrics = None, {}
        self._running.add(trial.trial_id)
        for callback in self._s.callbacks:
            callback.on_trial_start(self._iteration, self._shown, trial)
            if restored:
                callback.on_trial_restore(self._iteration, self._shown, trial)
        self._s.table.update(trial)
        self._trial_threads.run(functools.partial(self._run_trial, trial, run))

    # -- in the trial's thread ------------------------------------------------------------

    def _run_trial(self, trial: TuneTrial, run: TrialRun) -> None:
        try:
            outcome = self._execute(trial, run)
            self._events.put(_Ended(trial, outcome.status))
        except BaseException as exc:
            self._events.put(_Ended(trial, "error", exc, traceback.format_exc()))

    def _execute(self, trial: TuneTrial, run: TrialRun) -> TrialOutcome:
        run_config = trial_run_config(
            self._s.run_config,
            self._s.trainable,
            name=trial.dirname,
            storage_path=self._s.experiment_dir.uri,
        )
        if self._function_parts is None:  # in the trial: an error is the trial's, as it was
            self._function_parts = function_parts(self._s.trainable)
        return run_trial(
            self._s.trainable,
            dict(trial.config),
            run_config=run_config,
            trial=run,
            shared=self._function_parts,
        )

    # -- in the runner's thread -------------------------------------------------------------

    def _handle(self, event: _Event) -> None:
        self._iteration += 1
        if isinstance(event, _Suggested):
            self._asking -= 1
            told = self._told_when_asked.pop(event.key, self._told)
            trial = self._suggested(event.key, event.config)
            if trial is None and event.config != Searcher.FINISHED and told == self._told:
                # "nothing now", knowing all there is: ask again once something happens
                # (an answer given before results it was sent since is asked again at once)
                self._hold_asks = True
            elif trial is not None and self._can_launch(trial):
                self._launch(trial)
            return
        self._hold_asks = False
        if isinstance(event, _SearchFailed):
            self._search_failed(event)
        elif isinstance(event, _Report):
            try:
                decision = self._on_report(event)
            except BaseException:
                event.reply.put(Directive.PAUSE)  # the experiment ends: restorable
                raise
            event.reply.put(_directive(decision))
        elif isinstance(event, _Recovering):
            for callback in self._s.callbacks:
                callback.on_trial_recover(self._iteration, self._shown, event.trial)
        else:
            self._on_ended(event)

    def _on_report(self, event: _Report) -> Any:
        trial, result = event.trial, event.result
        trial.last_result = result
        trial.results.append(result)
        trials = self._shown
        if event.checkpoint is not None:
            trial.checkpoint = event.checkpoint
            for callback in self._s.callbacks:
                callback.on_trial_save(self._iteration, trials, trial)
            for callback in self._s.callbacks:
                callback.on_checkpoint(self._iteration, trials, trial, event.checkpoint)
        for callback in self._s.callbacks:
            callback.on_trial_result(self._iteration, trials, trial, result)
        self._search("on_trial_result", _key(trial), result)
        self._s.table.update(trial)
        if trial.stop_requested or self._should_stop(trial, result):
            return TrialScheduler.STOP
        decision = self._s.scheduler.on_trial_result(self, trial, result)
        if isinstance(decision, Exploit):
            trial.pending_exploit = decision
        return decision

    def _should_stop(self, trial: TuneTrial, result: dict[str, Any]) -> bool:
        stopper = self._s.stopper
        if stopper is None:
            return False
        if stopper(trial.trial_id, result):
            return True
        if stopper.stop_all():
            self._check_budget()
            return True
        return False

    def _on_ended(self, event: _Ended) -> None:
        trial = event.trial
        self._running.discard(trial.trial_id)
        self._s.pool.release(trial.resources)
        if event.outcome == "paused":
            self._paused(trial)
        elif event.outcome == "error":
            self._errored(trial, event)
        else:
            self._finish(trial, TERMINATED)

    def _paused(self, trial: TuneTrial) -> None:
        exploit, trial.pending_exploit = trial.pending_exploit, None
        if trial.stop_requested:  # stopped while it was pausing
            self._finish(trial, TERMINATED)
            return
        if exploit is not None:
            # The trial's next run starts from the donor's checkpoint, with its config:
            # the run's record copies the checkpoint in (the donor may delete its own).
            trial.config = dict(exploit.config)
            trial.restore_checkpoint = exploit.donor.checkpoint
            trial.restore_metrics = user_metrics(exploit.donor.last_result)
        self._waiting.set_status(trial, PAUSED if exploit is None else PENDING)
        self._s.table.update(trial)

    def _errored(self, trial: TuneTrial, event: _Ended) -> None:
        """The trial's run failed beyond its FailureConfig (the run restarted it as often
        as that allows, from its latest checkpoint): the trial ends with the error."""
        trial.num_failures += 1
        trial.error = event.error
        trial.error_text = event.traceback
        self._waiting.set_status(trial, ERROR)
        self._journal.ended(trial)
        self._s.scheduler.on_trial_error(self, trial)
        self._search("on_trial_complete", _key(trial), None, True)
        self._s.table.update(trial)
        for callback in self._s.callbacks:
            callback.on_trial_error(self._iteration, self._shown, trial)

    def _finish(self, trial: TuneTrial, status: str) -> None:
        self._waiting.set_status(trial, status)
        trial.error = None
        self._journal.ended(trial)
        # The search and the scheduler learn first: a callback that raises must not leave
        # the study with a trial it was never told about.
        self._s.scheduler.on_trial_complete(self, trial, trial.last_result)
        self._search("on_trial_complete", _key(trial), trial.last_result)
        self._s.table.update(trial)
        for callback in self._s.callbacks:
            callback.on_trial_complete(self._iteration, self._shown, trial)

    def stop_trial(self, trial: TuneTrial) -> None:
        """Stop ``trial``: at its next report if it runs, at once if it waits."""
        if trial.status == RUNNING:
            trial.stop_requested = True
        elif trial.status in (PENDING, PAUSED):
            self._finish(trial, TERMINATED)

    # -- the end ----------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Stop every running trial at its next report and wait for its run to end."""
        for trial in self.trials:
            trial.stop_requested = True
        while self._running or self._asking:
            event = self._events.get()
            if isinstance(event, _Suggested):  # asked: restore runs it
                self._asking -= 1
                self._suggested(event.key, event.config)
            elif isinstance(event, _SearchFailed):
                self._no_answer_coming(event)
            elif isinstance(event, _Report):
                event.reply.put(Directive.PAUSE)  # the run stops restorable: restore runs it on
                event.trial.last_result = event.result
                event.trial.results.append(event.result)
                if event.checkpoint is not None:
                    event.trial.checkpoint = event.checkpoint
            elif isinstance(event, _Ended):
                self._ended_in_shutdown(event)

    def _ended_in_shutdown(self, event: _Ended) -> None:
        self._running.discard(event.trial.trial_id)
        self._s.pool.release(event.trial.resources)
        if event.outcome == "error":
            self._waiting.set_status(event.trial, ERROR)
            event.trial.error = event.error
            event.trial.error_text = event.traceback
            self._journal.ended(event.trial)
        elif event.outcome == "done":  # it finished on its own meanwhile
            self._waiting.set_status(event.trial, TERMINATED)
            self._journal.ended(event.trial)
        # a trial paused here stays unfinished: restore runs it on

    # -- the search ------------------------------------------------------------------------

    def _search(self, method: str, *args: Any) -> None:
        """Tell the search: in its process without waiting, or here."""
        if self._apart is not None:
            self._apart.send(method, *args)
            self._told += 1
        else:
            getattr(self._s.searcher, method)(*args)

    def _on_search_reply(self, kind: str, key: Any, value: Any) -> None:
        """In the search process's reader thread: its answer becomes an event."""
        if kind == "suggested":
            self._events.put(_Suggested(key, value))
        else:
            self._events.put(_SearchFailed(key, value))

    def _search_failed(self, event: _SearchFailed) -> None:
        self._no_answer_coming(event)
        raise event.error

    def _no_answer_coming(self, event: _SearchFailed) -> None:
        if isinstance(event.error, SearchProcessError):
            self._asking = 0  # nothing more comes from a dead process
        elif event.key is not None and self._told_when_asked.pop(event.key, None) is not None:
            self._asking -= 1  # the suggestion failed

    def _room_to_ask(self) -> bool:
        """Whether to ask for one more trial: while one fits beside the running ones and
        those asked for (as big as the last trial created), and one beyond, as Ray Tune
        keeps one trial of a search algorithm pending (``TUNE_MAX_PENDING_TRIALS_PG``):
        the search suggests it while the others run."""
        ahead = self._asking + sum(1 for t in self._waiting.ordered() if t.status == PENDING)
        if not ahead:
            return True
        pool, need, count = self._s.pool, self._last_resources, ahead + 1
        return all(
            pool.used.get(k, 0) + v * count <= pool.total.get(k, 0) + v + 1e-9
            for k, v in need.items()
        )

    def _can_launch(self, trial: TuneTrial) -> bool:
        return (
            not self._stop_all
            and len(self._running) < self._s.max_concurrent
            and self._s.pool.fits(trial.resources)
        )

    def _start_search_process(self) -> None:
        if not runs_apart(self._s.searcher):
            return
        try:
            self._apart = SearchProcess(self._s.searcher, self._on_search_reply)
        except OSError as exc:  # no process to be had (a memory or process limit)
            warnings.warn(
                f"the search algorithm stays in the driver: no process of its own ({exc})",
                stacklevel=3,
            )

    def _close_search(self) -> SearchProcess | None:
        """End the search process: the searcher object holds its final state again."""
        apart, self._apart = self._apart, None
        if apart is not None:
            apart.close(wait=False)
        return apart

    def save(self, *, status: str) -> None:
        started = time.monotonic()
        searcher: Any = self._s.searcher
        if self._apart is not None:
            searcher = _Pickled(self._apart.state())
        inner = getattr(searcher, "searcher", searcher)
        if hasattr(inner, "save_to_sqlite") and status != "running":
            inner.save_to_sqlite(self._s.experiment_dir.join(STUDY_FILE))
        if self._journal.num_lines != self._synced_lines:
            # The journal lines this snapshot counts, and the files of the trials they
            # created and ended, reach the disk first, all at once (a function trial's run
            # writes its files without a flush of its own).
            self._s.experiment_dir.sync_all()
            self._synced_lines = self._journal.num_lines
        write_state(
            self._s.experiment_dir,
            {
                "status": status,
                "trials": self.trials,
                "num_created": self._num_created,
                "searcher": searcher,
                "scheduler": self._s.scheduler,
                "search_finished": self.search_finished,
                "num_events": self._journal.num_lines,
            },
        )
        self._throttle.done(time.monotonic() - started)


class _Pickled:
    """An object already pickled (the searcher, by its process): it unpickles as itself."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return pickle.loads, (self._data,)


def _key(trial: TuneTrial) -> str:
    return str(getattr(trial, "search_key", trial.trial_id))


def _self_limiting(searcher: Searcher) -> bool:
    """Whether the searcher knows its own number of trials (the variant generator)."""
    return hasattr(innermost(searcher), "total_trials")


def _directive(decision: Any) -> Directive:
    """A scheduler's (or stopper's) decision as a directive for the trial's run."""
    if decision == TrialScheduler.STOP:
        return Directive.STOP
    if decision == TrialScheduler.PAUSE or isinstance(decision, Exploit):
        return Directive.PAUSE
    return Directive.CONTINUE
