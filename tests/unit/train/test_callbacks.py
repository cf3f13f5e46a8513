"""The callback protocol as Tune uses it (several trials) and as a Train run calls it."""

from __future__ import annotations

import csv
import json

import pytest

from lockstep._core.callback import RunContext, TrialCallbackListener
from lockstep._core.run_events import ResultClock, RunEnded, RunStarted, StepRecorded
from lockstep.train import RunConfig
from lockstep.train.callbacks import (
    Callback,
    CSVLoggerCallback,
    JsonLoggerCallback,
    LoggerCallback,
    TrainingCallback,
    Trial,
)


class Record(Callback):
    def __init__(self):
        self.calls = []

    def setup(self, **info):
        self.calls.append(("setup",))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.calls.append(("start", trial.status))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append(("result", iteration, result["loss"], len(info["worker_results"])))

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.calls.append(("checkpoint", iteration, checkpoint))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.calls.append(("complete", iteration, trial.status))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.calls.append(("error", iteration, trial.status, str(trial.error)))

    def on_experiment_end(self, trials, **info):
        self.calls.append(("end", len(trials)))


def row(iteration, loss, total):
    return {"loss": loss, "training_iteration": iteration, "time_total_s": total, "timestamp": 1.0}


RUN = RunContext(name="run", path="/x", attempt=0)


def step(iteration, loss, total, previous, worker_losses, checkpoint=None, restored=(0, 0.0)):
    clock = ResultClock(previous, *restored)
    return StepRecorded(
        RUN,
        iteration,
        [{"loss": x} for x in worker_losses],
        checkpoint,
        row(iteration, loss, total),
        clock,
    )


def test_a_run_calls_the_hooks_as_its_only_trial():
    record = Record()
    listener = TrialCallbackListener([record], Trial(trial_id="run", config={"lr": 1}, path="/x"))
    listener.on_event(RunStarted(RUN, None, 0))
    listener.on_event(step(1, 0.5, 2.0, 0.0, [0.5, 0.6]))
    listener.on_event(step(2, 0.25, 3.5, 2.0, [0.25, 0.3], checkpoint="ckpt"))
    listener.on_event(RunEnded(RUN, "finished", None, None))
    assert record.calls == [
        ("setup",),
        ("start", "RUNNING"),
        ("result", 1, 0.5, 2),
        ("result", 2, 0.25, 2),
        ("checkpoint", 2, "ckpt"),
        ("complete", 2, "TERMINATED"),
        ("end", 1),
    ]
    result = listener.trial.last_result
    assert result["time_this_iter_s"] == 1.5 and result["iterations_since_restore"] == 2
    assert result["trial_id"] == "run" and result["config"] == {"lr": 1}
    assert {"date", "pid", "hostname", "node_ip", "done"} <= set(result)


def test_a_failed_run_ends_with_on_trial_error_and_a_resumed_one_counts_from_its_offset():
    record = Record()
    listener = TrialCallbackListener([record], Trial(trial_id="run", config={}, path="/x"))
    listener.on_event(RunStarted(RUN, "checkpoint_000001", 4))
    listener.on_event(step(5, 0.5, 12.0, 10.0, [0.5], restored=(4, 10.0)))
    listener.on_event(RunEnded(RUN, "failed", None, RuntimeError("boom")))
    assert record.calls[-2:] == [("error", 5, "ERROR", "boom"), ("end", 1)]
    assert listener.trial.last_result["time_this_iter_s"] == 2.0
    assert listener.trial.last_result["time_since_restore"] == 2.0
    assert listener.trial.last_result["iterations_since_restore"] == 1


def test_json_and_csv_loggers_write_each_trial_in_its_own_directory(tmp_path):
    loggers = [JsonLoggerCallback(), CSVLoggerCallback()]
    trials = [
        Trial(trial_id=f"t{i}", config={"lr": i}, path=str(tmp_path / f"t{i}")) for i in (0, 1)
    ]
    for logger in loggers:
        for trial in trials:
            logger.on_trial_start(0, trials, trial)
        for step in (1, 2):
            for trial in trials:
                result = {
                    "loss": step + trial.config["lr"],
                    "training_iteration": step,
                    "config": trial.config,
                    "m": {"a": step},
                }
                logger.on_trial_result(step, trials, trial, result)
        for trial in trials:
            logger.on_trial_complete(2, trials, trial)
    for i in (0, 1):
        lines = (tmp_path / f"t{i}" / "result.json").read_text().splitlines()
        assert [json.loads(line)["loss"] for line in lines] == [1 + i, 2 + i]
        assert json.loads((tmp_path / f"t{i}" / "params.json").read_text()) == {"lr": i}
        with open(tmp_path / f"t{i}" / "progress.csv") as f:
            table = list(csv.DictReader(f))
        assert [r["m/a"] for r in table] == ["1", "2"] and "config" not in table[0]


def test_json_and_csv_loggers_leave_a_train_runs_own_record_alone(tmp_path):
    trial = Trial(trial_id="run", config={}, path=str(tmp_path), results_logged=True)
    for logger in (JsonLoggerCallback(), CSVLoggerCallback()):
        logger.on_trial_start(0, [trial], trial)
        logger.on_trial_result(1, [trial], trial, {"loss": 1.0, "training_iteration": 1})
        logger.on_trial_complete(1, [trial], trial)
    # the run writes result.json and progress.csv; the JSON logger writes Ray Train 1.x's
    # results.json beside them, a list with rank 0's results of each report
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    (logged,) = json.loads((tmp_path / "results.json").read_text())
    assert logged["loss"] == 1.0 and logged["_training_iteration"] == 1


def test_logger_callback_routes_hooks_to_log_methods():
    calls = []

    class Log(LoggerCallback):
        def log_trial_start(self, trial):
            calls.append("start")

        def log_trial_result(self, iteration, trial, result):
            calls.append(("result", iteration))

        def log_trial_save(self, trial):
            calls.append("save")

        def log_trial_end(self, trial, failed=False):
            calls.append(("end", failed))

    trial = Trial(trial_id="t", config={}, path="/x")
    log = Log()
    log.on_trial_start(0, [trial], trial)
    log.on_trial_result(1, [trial], trial, {"training_iteration": 1})
    log.on_checkpoint(1, [trial], trial, None)
    log.on_trial_error(1, [trial], trial)
    assert calls == ["start", ("result", 1), "save", ("end", True)]


def test_training_callback_gets_every_workers_results():
    seen = []

    class Old(TrainingCallback):
        def handle_result(self, results, **info):
            seen.append(results)

    trial = Trial(trial_id="t", config={}, path="/x")
    Old().on_trial_result(
        3,
        [trial],
        trial,
        {"training_iteration": 3, "timestamp": 5.0},
        worker_results=[{"loss": 1}, {"loss": 2}],
    )
    assert [r["loss"] for r in seen[0]] == [1, 2]
    assert seen[0][1]["_training_iteration"] == 3 and seen[0][1]["_timestamp"] == 5.0


def test_run_config_takes_callbacks_and_names_the_fix_for_anything_else():
    assert len(RunConfig(callbacks=[JsonLoggerCallback(), Record()]).callbacks) == 2
    with pytest.raises(ValueError, match=r"HINT: use a logger of lockstep\.train\.callbacks"):
        RunConfig(callbacks=[object()])
