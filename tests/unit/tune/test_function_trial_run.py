"""A function trial's run: the function in the trial's thread with a session that records
its reports (no controller, no inline worker), and what it leaves on disk, read back by
the readers a user has."""

from __future__ import annotations

import csv
import json
import os
import tempfile
import threading

from lockstep import train, tune
from lockstep._core.errors import TrainingFailedError
from lockstep.cli import main
from lockstep.train import Checkpoint, CheckpointConfig, FailureConfig, Result, UserCallback


def _tuner(fn, tmp_path, **run):
    run.setdefault("verbose", 0)
    return tune.Tuner(
        fn,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="exp", **run),
    )


def test_the_function_runs_in_the_trials_thread_with_no_worker_beside_it(tmp_path):
    seen = []

    def objective(config):
        seen.append(
            (threading.current_thread().name, sorted(t.name for t in threading.enumerate()))
        )
        tune.report({"loss": config["x"]})

    grid = _tuner(objective, tmp_path).fit()
    assert sorted(r.metrics["loss"] for r in grid) == [1, 2]
    for name, others in seen:
        assert name.startswith("lockstep-trial")
        assert not [t for t in others if t.startswith(("lockstep-inline", "lockstep-session"))]


def test_a_hang_watchdog_keeps_the_train_run_and_its_inline_worker(tmp_path):
    names = []

    def objective(config):
        names.append(threading.current_thread().name)
        tune.report({"loss": config["x"]})

    watched = FailureConfig(hang_timeout_s=600)
    grid = _tuner(objective, tmp_path, failure_config=watched).fit()
    assert grid.num_errors == 0
    assert names == ["lockstep-inline-rank0"] * 2


def steps_with_checkpoints(config):
    start, first = tune.get_checkpoint(), 0
    if start is not None:
        with open(os.path.join(start.path, "step")) as f:
            first = int(f.read()) + 1
    for step in range(first, 3):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            tune.report(
                {"step": step, "score": config["x"] * 10 + step},
                checkpoint=Checkpoint.from_directory(d),
            )


def test_a_trials_files_are_read_back_by_their_readers(tmp_path, capsys):
    kept = CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="score")
    grid = _tuner(steps_with_checkpoints, tmp_path, checkpoint_config=kept).fit()
    assert grid.num_errors == 0
    for result in grid:
        x = result.config["x"]
        path = result.path
        with open(os.path.join(path, "params.json")) as f:
            assert json.load(f) == {"x": x}
        with open(os.path.join(path, "progress.csv")) as f:
            table = list(csv.DictReader(f))
        assert [int(r["step"]) for r in table] == [0, 1, 2]
        with open(os.path.join(path, "run_state.json")) as f:
            state = json.load(f)
        assert state["status"] == "finished" and state["training_iteration"] == 3
        assert [a["ended"] for a in state["history"]] == ["finished"]
        # one checkpoint kept, the best by score, committed whole
        assert [c["dir_name"] for c in state["checkpoints"]] == ["checkpoint_000002"]
        assert sorted(n for n in os.listdir(path) if n.startswith("checkpoint_")) == [
            "checkpoint_000002"
        ]
        assert not {"time.json", "time.bin", ".staging"} & set(os.listdir(path))
        again = Result.from_path(path)
        assert again.metrics["score"] == x * 10 + 2
        assert list(again.metrics_dataframe["step"]) == [0, 1, 2]
        with open(os.path.join(again.checkpoint.path, "step")) as f:
            assert f.read() == "2"
        # Tune's result carries the time ledger's figures as metrics of their own
        assert 0.0 <= result.metrics["goodput"] <= 1.0 and "time_training_s" in result.metrics
    trial = os.path.relpath(grid[0].path, tmp_path)
    assert main(["runs", "show", trial, "--storage-path", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "iterations: 3" in out and "score=" in out


def test_a_failed_attempt_restarts_from_the_latest_checkpoint(tmp_path):
    marker = tmp_path / "failed_once"
    recovered = []

    def fails_once(config):
        start = tune.get_checkpoint()
        if start is None:
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "step"), "w") as f:
                    f.write("0")
                tune.report({"step": 0}, checkpoint=Checkpoint.from_directory(d))
            if not marker.exists():
                marker.write_text("")
                raise RuntimeError("boom")
        tune.report({"step": 1, "resumed": start is not None})

    class Recovers(tune.Callback):
        def on_trial_recover(self, iteration, trials, trial, **info):
            recovered.append(trial.trial_id)

    tuner = tune.Tuner(
        fails_once,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            name="exp",
            verbose=0,
            failure_config=FailureConfig(max_failures=1),
            callbacks=[Recovers()],
        ),
    )
    (result,) = tuner.fit()
    assert result.error is None
    assert result.metrics["resumed"] is True and result.metrics["step"] == 1
    assert len(recovered) == 1
    with open(os.path.join(result.path, "run_state.json")) as f:
        state = json.load(f)
    assert state["num_failures"] == 1 and state["training_iteration"] == 2
    assert [a["ended"] for a in state["history"]] == ["failed", "finished"]
    assert "RuntimeError: boom" in state["history"][0]["cause"]


def test_a_trial_failing_beyond_its_retries_ends_with_the_error_and_its_file(tmp_path):
    def always_fails(config):
        tune.report({"step": 0})
        raise ValueError("bad value")

    tuner = tune.Tuner(
        always_fails,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            verbose=0,
            failure_config=FailureConfig(max_failures=2),
        ),
    )
    (result,) = tuner.fit()
    assert isinstance(result.error, TrainingFailedError)
    assert "ValueError: bad value" in str(result.error) and "after 2 restarts" in str(result.error)
    with open(os.path.join(result.path, "error.txt")) as f:
        assert "bad value" in f.read()
    with open(os.path.join(result.path, "run_state.json")) as f:
        state = json.load(f)
    assert state["status"] == "errored" and state["num_failures"] == 3
    assert state["training_iteration"] == 3  # each attempt's report was recorded


def test_a_stop_ends_the_function_at_its_report(tmp_path):
    reached = []

    def counts(config):
        for step in range(10):
            reached.append(step)
            tune.report({"step": step})

    (result,) = tune.Tuner(
        counts,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), verbose=0, stop={"training_iteration": 3}
        ),
    ).fit()
    assert result.error is None and result.metrics["training_iteration"] == 3
    assert reached == [0, 1, 2]  # the third report did not return
    with open(os.path.join(result.path, "run_state.json")) as f:
        assert json.load(f)["status"] == "finished"


def test_train_callbacks_hear_a_function_trials_run(tmp_path):
    heard = []

    class Hears(UserCallback):
        def before_run(self, run):
            heard.append("before")

        def after_report(self, run, metrics, checkpoint):
            heard.append(("report", metrics[0]["loss"]))

        def after_run(self, run, result):
            heard.append(("after", result.metrics["loss"]))

    def objective(config):
        train.report({"loss": 0.5})
        return {"loss": 0.25}

    (result,) = tune.Tuner(
        objective,
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, callbacks=[Hears()]),
    ).fit()
    assert result.metrics["loss"] == 0.25
    assert heard == ["before", ("report", 0.5), ("report", 0.25), ("after", 0.25)]


def test_a_callbacks_exception_ends_the_trial_unretried_through_the_users_except(tmp_path):
    calls = []

    class Raises(UserCallback):
        def after_report(self, run, metrics, checkpoint):
            raise RuntimeError("callback broke")

    def swallows(config):
        calls.append(1)
        try:
            tune.report({"loss": 1.0})
        except Exception:
            tune.report({"loss": 2.0})  # never reached: the run's error is not the user's

    (result,) = tune.Tuner(
        swallows,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            verbose=0,
            callbacks=[Raises()],
            failure_config=FailureConfig(max_failures=2),
        ),
    ).fit()
    assert isinstance(result.error, RuntimeError) and "callback broke" in str(result.error)
    assert calls == [1]
    with open(os.path.join(result.path, "result.json")) as f:
        assert [json.loads(line)["loss"] for line in f] == [1.0]
