"""A search algorithm in a forked process of its own: the same answers in the same order as
in the driver, errors and a dead process named, its state back in the user's object, nothing
left behind."""

from __future__ import annotations

import json
import os
import pickle
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import optuna
import psutil
import pytest

from lockstep import tune
from lockstep.tune.search import ConcurrencyLimiter, Repeater
from lockstep.tune.search._process import SearchProcess, SearchProcessError, runs_apart
from lockstep.tune.search.optuna import OptunaSearch

SPACE = {"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)}


def search(**kwargs):
    searcher = OptunaSearch(metric="loss", mode="min", **kwargs)
    searcher.set_search_properties(None, None, SPACE)
    return searcher


def loss(config):
    return (config["x"] - 2) ** 2 + (config["y"] + 1) ** 2


class Apart:
    """A SearchProcess whose replies the test reads in order."""

    def __init__(self, searcher):
        self.replies = queue.SimpleQueue()
        self.process = SearchProcess(searcher, lambda *reply: self.replies.put(reply))

    def suggest(self, key):
        self.process.suggest(key)
        return self.reply()

    def reply(self):
        return self.replies.get(timeout=30)

    def close(self):
        return self.process.close()


def test_the_process_gives_the_same_configs_as_the_search_in_the_driver():
    here, apart = search(seed=3), Apart(search(seed=3))
    try:
        for n in range(25):  # past TPE's 10 random startup trials
            expected = here.suggest(f"t{n}")
            kind, key, config = apart.suggest(f"t{n}")
            assert (kind, key, config) == ("suggested", f"t{n}", expected)
            here.on_trial_complete(f"t{n}", {"loss": loss(expected)})
            apart.process.send("on_trial_complete", f"t{n}", {"loss": loss(config)})
    finally:
        apart.close()


def test_the_state_and_at_the_end_the_users_object_hold_every_call_made():
    searcher = search(seed=0)
    apart = Apart(searcher)
    for n in range(3):
        _, _, config = apart.suggest(f"t{n}")
        apart.process.send("on_trial_complete", f"t{n}", {"loss": loss(config)})
    saved = pickle.loads(apart.process.state())
    assert [t.state.name for t in saved.study.trials] == ["COMPLETE"] * 3
    assert searcher.study.trials == []  # the driver's copy learns nothing meanwhile
    assert apart.close() is searcher
    assert [t.value for t in searcher.study.trials] == [t.value for t in saved.study.trials]
    assert apart.process.pid not in {p.pid for p in psutil.Process().children()}


def test_wrapped_searches_get_their_state_back_into_the_objects_the_user_holds():
    inner = search(seed=0)
    repeater = Repeater(inner, repeat=2)
    limiter = ConcurrencyLimiter(repeater, max_concurrent=2)
    apart = Apart(limiter)
    for key in ("a", "b"):
        apart.suggest(key)
    for key in ("a", "b"):
        apart.process.send("on_trial_complete", key, {"loss": 1.0})
    apart.close()
    assert limiter.searcher is repeater and repeater.searcher is inner
    (trial,) = inner.study.trials
    assert trial.value == 1.0 and limiter._live == set()


class FailingSampler(optuna.samplers.RandomSampler):
    def sample_independent(self, study, trial, name, distribution):
        raise ValueError(f"no value for {name}")


def test_an_error_of_the_search_comes_back_with_where_it_was_raised():
    apart = Apart(search(sampler=FailingSampler()))
    try:
        apart.process.suggest("t0")
        kind, key, error = apart.reply()
        assert (kind, key) == ("failed", "t0")
        assert isinstance(error, ValueError) and "no value for" in str(error)
        assert any("search algorithm's process" in note for note in error.__notes__)
        assert any("sample_independent" in note for note in error.__notes__)
        kind, key, _ = apart.suggest("t1")  # the process goes on, failing again
        assert (kind, key) == ("failed", "t1")
    finally:
        apart.close()


def test_a_killed_process_is_named_and_the_search_stays_as_it_was():
    searcher = search(seed=0)
    apart = Apart(searcher)
    apart.suggest("t0")
    os.kill(apart.process.pid, signal.SIGKILL)
    kind, _, error = apart.reply()
    assert kind == "failed" and isinstance(error, SearchProcessError)
    assert f"pid {apart.process.pid}) was killed by signal 9" in str(error)
    assert "Tuner.restore" in str(error) and "LOCKSTEP_SEARCH_PROCESS=0" in str(error)
    with pytest.raises(SearchProcessError):
        apart.process.state()
    assert apart.close() is searcher and searcher.study.trials == []
    assert not psutil.pid_exists(apart.process.pid)  # reaped, not a zombie


def test_a_result_holding_what_does_not_pickle_reaches_the_search_as_text():
    apart = Apart(search(seed=0))
    try:
        apart.suggest("t0")
        with open(os.devnull) as unpicklable:
            result = {"loss": 0.5, "training_iteration": 1, "file": unpicklable}
            apart.process.send("on_trial_result", "t0", result)
        saved = pickle.loads(apart.process.state())
        assert saved.study.trials[0].intermediate_values == {1: 0.5}
    finally:
        apart.close()


def test_a_driver_that_cannot_fork_keeps_the_search_and_says_so(tmp_path, monkeypatch):
    # as in a driver of one thread (another test may have left one here): it forks
    monkeypatch.setattr(threading, "active_count", lambda: 1)

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    searcher = OptunaSearch(seed=0)
    with pytest.warns(UserWarning, match="stays in the driver"):
        grid = tune.Tuner(
            lambda config: tune.report({"loss": loss(config)}),
            param_space=SPACE,
            tune_config=tune.TuneConfig(
                metric="loss", mode="min", search_alg=searcher, num_samples=3
            ),
            run_config=tune.RunConfig(storage_path=str(tmp_path), name="e", verbose=0),
        ).fit()
    assert len(grid) == 3 and len(searcher.study.trials) == 3


def test_ctrl_c_and_sigterm_are_left_to_the_driver():
    apart = Apart(search(seed=0))
    try:
        os.kill(apart.process.pid, signal.SIGINT)
        os.kill(apart.process.pid, signal.SIGTERM)
        kind, _, config = apart.suggest("t0")
        assert kind == "suggested" and set(config) == {"x", "y"}
    finally:
        apart.close()


def test_the_process_keeps_none_of_the_drivers_other_files_open():
    read_end, write_end = os.pipe()
    apart = Apart(search(seed=0))
    try:
        os.close(write_end)  # the child's copy was closed: the reader sees the end
        assert os.read(read_end, 1) == b""
    finally:
        os.close(read_end)
        apart.close()


def test_the_process_ends_when_the_driver_dies():
    driver = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import os
                from lockstep import tune
                from lockstep.tune.search._process import SearchProcess
                from lockstep.tune.search.optuna import OptunaSearch
                search = OptunaSearch(metric="loss", mode="min", seed=0)
                search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
                print(SearchProcess(search, lambda *reply: None).pid, flush=True)
                os._exit(0)
                """
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(driver.stdout)
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the search process {pid} outlived its driver"
        time.sleep(0.01)


def test_only_a_driver_without_other_threads_forks_and_only_for_a_search_that_asks(
    monkeypatch,
):
    from lockstep.tune.search import BasicVariantGenerator

    if threading.active_count() > 1:  # left by another test: the rule is what it checks
        assert not runs_apart(search())
        return
    assert runs_apart(search()) and runs_apart(ConcurrencyLimiter(search(), 2))
    assert not runs_apart(BasicVariantGenerator())
    monkeypatch.setenv("LOCKSTEP_SEARCH_PROCESS", "0")
    assert not runs_apart(search())
    monkeypatch.delenv("LOCKSTEP_SEARCH_PROCESS")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not runs_apart(search())
    finally:
        stop.set()
        other.join()


# -- in a Tuner, in a driver of its own (a test process may hold other tests' threads) -------

TUNER_JOB = """
import json, os, sys
import optuna, psutil
from lockstep import tune
from lockstep.tune.search.optuna import OptunaSearch

storage, mode = sys.argv[1], sys.argv[2]
children = []

class FailingSampler(optuna.samplers.RandomSampler):
    def sample_independent(self, study, trial, name, distribution):
        raise ValueError(f"no value for {name}")

def objective(config):
    children.append(len(psutil.Process().children()))
    if mode == "kill" and len(children) == 6:
        for child in psutil.Process().children():
            child.kill()
    tune.report({"loss": (config["x"] - 2) ** 2 + (config["y"] + 1) ** 2})

def tuner(search, concurrent=None):
    return tune.Tuner(
        objective,
        param_space={"x": tune.uniform(-5, 5), "y": tune.uniform(-5, 5)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=search,
                                    num_samples=20, max_concurrent_trials=concurrent),
        run_config=tune.RunConfig(storage_path=storage, name=mode, verbose=0),
    )

search = OptunaSearch(seed=0, sampler=FailingSampler() if mode == "fail" else None)
out = {}
if mode == "fail":
    try:
        tuner(search).fit()
    except ValueError as exc:
        out["error"] = str(exc)
        out["notes"] = exc.__notes__
elif mode == "kill":
    try:
        tuner(search).fit()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    grid = tune.Tuner.restore(os.path.join(storage, mode), trainable=objective).fit()
    out["restored"] = sorted(r.metrics["loss"] for r in grid)
    db = "sqlite:///" + os.path.join(storage, mode, "optuna.db")
    study = optuna.load_study(study_name="lockstep", storage=db)
    out["study_states"] = [t.state.name for t in study.trials]
else:
    grid = tuner(search, concurrent=1).fit()
    out["configs"] = [r.config for r in grid]
    out["study"] = [t.params for t in search.study.trials]
    out["values"] = [t.value for t in search.study.trials]
out["children_seen"] = sorted(set(children))
out["children_after"] = len(psutil.Process().children())
print(json.dumps(out))
"""


def tuner_job(tmp_path, mode, env=None):
    done = subprocess.run(
        [sys.executable, "-c", TUNER_JOB, str(tmp_path), mode],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_tuner_searches_in_the_process_and_gets_the_same_trials_as_in_the_driver(tmp_path):
    apart = tuner_job(tmp_path / "apart", "same")
    here = tuner_job(tmp_path / "here", "same", env={"LOCKSTEP_SEARCH_PROCESS": "0"})
    assert apart["children_seen"] == [1] and here["children_seen"] == [0]
    assert apart["configs"] == here["configs"] and len(apart["configs"]) == 20
    # the user's OptunaSearch holds the study searched in the process
    assert apart["study"] == [dict(c) for c in apart["configs"]]
    assert apart["values"] == here["values"] and None not in apart["values"]
    assert apart["children_after"] == 0


def test_an_error_of_the_search_in_its_process_ends_the_experiment_with_it(tmp_path):
    out = tuner_job(tmp_path, "fail")
    assert out["error"] == "no value for x"
    assert "raised in the search algorithm's process" in out["notes"][0]
    assert out["children_after"] == 0


def test_a_killed_search_process_ends_the_experiment_restorably(tmp_path):
    out = tuner_job(tmp_path, "kill")
    assert out["error"].startswith("SearchProcessError: the search algorithm's process")
    assert "killed by signal 9" in out["error"]
    assert len(out["restored"]) == 20  # restore ran the rest, with a process of its own
    # the restored study knows the trials that ended after the last snapshot, too
    assert out["study_states"] == ["COMPLETE"] * 20
    assert out["children_after"] == 0
