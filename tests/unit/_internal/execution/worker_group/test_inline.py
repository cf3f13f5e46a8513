"""An inline worker (a Tune function trial's under a hang watchdog, which runs as a Train
run) reads its pipe in the thread that waits for an answer: no reader thread of its own
outlives the trial, and its end of the pipe is closed once nothing holds it."""

from __future__ import annotations

import gc
import threading
import weakref

from lockstep import tune
from lockstep._internal.execution.worker import session as session_module


def test_a_function_trial_reads_its_pipe_without_a_thread_and_lets_it_go(tmp_path):
    # A reader thread left reading a closed pipe would read whatever pipe gets its
    # descriptor number next (the next trial's), taking that trial's messages.
    seen = {}

    def objective(config):  # a Tune function trial: run inline, never pickled
        seen["conn"] = session_module.current()._link._conn
        seen["threads"] = {t.name for t in threading.enumerate()}
        tune.report({"step": 1})

    # the watchdog needs the Train run's controller, so the trial runs an inline worker
    watched = tune.FailureConfig(hang_timeout_s=600)
    (result,) = tune.Tuner(
        objective,
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, failure_config=watched),
    ).fit()
    assert result.error is None
    assert result.metrics["step"] == 1
    assert not {name for name in seen["threads"] if name.startswith("lockstep-session")}
    conn = weakref.ref(seen.pop("conn"))
    seen.clear()
    gc.collect()
    assert conn() is None  # not kept once the trial ended (collected: closed)
