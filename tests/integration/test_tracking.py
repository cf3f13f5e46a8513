"""The logger callbacks on real 2-worker runs, read back with each library's own reader."""

from __future__ import annotations

import csv
import glob
import json
import os
import tempfile

import pytest

# TensorBoard's reader imports TensorFlow, which sets process-wide variables once at import;
# imported here so that it happens before the leak check's snapshot.
import tensorflow  # noqa: F401

from lockstep import train
from lockstep.train import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig, Trainer
from lockstep.train.callbacks import (
    Callback,
    CSVLoggerCallback,
    JsonLoggerCallback,
    MLflowLoggerCallback,
    TBXLoggerCallback,
    TrainingCallback,
    WandbLoggerCallback,
    setup_mlflow,
    setup_wandb,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    """One SQLite store for the module: creating its tables takes MLflow several seconds.

    Its experiments keep their artifacts beside it: MLflow's default, ``./mlruns``, would
    write into the working directory.
    """
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    for name in ("tracking", "inside"):
        client.create_experiment(name, artifact_location=(root / name).as_uri())
    return uri


@pytest.fixture
def wandb_offline():
    import wandb

    yield
    # W&B keeps a service process for the driver's life; end it as a script's exit would.
    wandb.teardown()


def train_func(config):
    for i in range(config.get("steps", 3)):
        if config.get("fail_at") == i:
            raise RuntimeError("boom")
        checkpoint = None
        if i == 1:
            directory = tempfile.mkdtemp(prefix="ckpt-")
            with open(os.path.join(directory, "model.txt"), "w") as f:
                f.write(str(i))
            checkpoint = Checkpoint.from_directory(directory)
        rank = train.get_context().get_world_rank()
        train.report({"loss": 1.0 / (i + 1), "rank": rank, "nested": {"a": i}}, checkpoint)


def fit(tmp_path, callbacks, **config):
    trainer = DataParallelTrainer(
        train_func,
        train_loop_config={"lr": 0.1, **config},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="run", storage_path=str(tmp_path / "runs"), verbose=0, callbacks=callbacks
        ),
    )
    return trainer.fit()


def test_json_csv_and_tensorboard_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = fit(tmp_path, [JsonLoggerCallback(), CSVLoggerCallback(), TBXLoggerCallback()])
    with open(os.path.join(result.path, "result.json")) as f:
        rows = [json.loads(line) for line in f]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    assert [r["loss"] for r in rows] == [1.0, 0.5, 1 / 3]
    with open(os.path.join(result.path, "progress.csv")) as f:
        table = list(csv.DictReader(f))
    assert {"loss", "nested/a", "training_iteration"} <= set(table[0])
    assert [row["nested/a"] for row in table] == ["0", "1", "2"]
    events = EventAccumulator(result.path)
    events.Reload()
    loss = events.Scalars("ray/tune/loss")
    assert [(s.step, round(s.value, 4)) for s in loss] == [(1, 1.0), (2, 0.5), (3, 0.3333)]
    assert [s.value for s in events.Scalars("ray/tune/nested/a")] == [0, 1, 2]
    assert "ray/tune/rank" in events.Tags()["scalars"]  # rank 0's metrics, as Ray logs them


# MLflow's SQL store uses a loader strategy SQLAlchemy 2.1 deprecates: theirs to change
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")
def test_mlflow_metrics_params_artifacts_and_status(tmp_path, mlflow_uri):
    from mlflow.tracking import MlflowClient

    callback = MLflowLoggerCallback(
        tracking_uri=mlflow_uri,
        experiment_name="tracking",
        run_name="first",
        tags={"team": "ml"},
        save_artifact=True,
    )
    fit(tmp_path, [callback])
    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("tracking")
    (run,) = client.search_runs([experiment.experiment_id], "attributes.run_name = 'first'")
    assert run.info.status == "FINISHED"
    assert run.data.params["lr"] == "0.1"
    assert run.data.tags["team"] == "ml"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5), (3, 1 / 3)]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"checkpoint_000000", "result.json", "progress.csv"} <= artifacts
    files = client.list_artifacts(run.info.run_id, "checkpoint_000000")
    assert [os.path.basename(a.path) for a in files] == ["model.txt"]


def test_mlflow_run_is_marked_failed_when_training_fails(tmp_path, mlflow_uri):
    from mlflow.tracking import MlflowClient

    callback = MLflowLoggerCallback(
        tracking_uri=mlflow_uri, experiment_name="tracking", run_name="failing"
    )
    with pytest.raises(train.TrainingFailedError):
        fit(tmp_path, [callback], fail_at=2)
    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("tracking")
    (run,) = client.search_runs([experiment.experiment_id], "attributes.run_name = 'failing'")
    assert run.info.status == "FAILED"
    # The steps every rank reported before the failure (report is not yet a barrier, so
    # the last one may be cut short).
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert steps == [1, 2][: len(steps)]


def wandb_records(path):
    """The records of a W&B run file (a LevelDB-style log of W&B's own protobuf records)."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B"
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def wandb_history(run_dir):
    import wandb

    # The W&B service writes the run file behind the run; ending it (as a script's exit
    # does) flushes the file.
    wandb.teardown()
    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    records = list(wandb_records(path))
    history = [
        {
            "_step": r.history.step.num,
            **{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item},
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    exits = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
    return history, runs, exits


def test_wandb_offline_run_files_hold_every_report(tmp_path, wandb_offline):
    key_file = tmp_path / "key"
    key_file.write_text("x" * 40 + "\n")
    callback = WandbLoggerCallback(
        project="tracking", group="g1", api_key_file=str(key_file), mode="offline"
    )
    result = fit(tmp_path, [callback])
    history, runs, exits = wandb_history(result.path)
    assert [h["_step"] for h in history] == [1, 2, 3]
    assert [h["loss"] for h in history] == [1.0, 0.5, 1 / 3]
    assert [h["nested/a"] for h in history] == [0, 1, 2]
    assert runs[0].project == "tracking" and runs[0].run_group == "g1"
    assert runs[0].display_name == "run"
    assert exits == [0]


def test_wandb_run_exits_nonzero_when_training_fails(tmp_path, wandb_offline):
    with pytest.raises(train.TrainingFailedError):
        fit(tmp_path, [WandbLoggerCallback(project="tracking", mode="offline")], fail_at=1)
    _, runs, exits = wandb_history(str(tmp_path / "runs" / "run"))
    assert runs[0].display_name == "run"
    assert exits == [1]


class Collect(TrainingCallback):
    def __init__(self):
        self.events = []

    def start_training(self, logdir, config, **info):
        self.events.append(("start", config["lr"]))

    def handle_result(self, results, **info):
        self.events.append(
            ("result", [r["rank"] for r in results], results[0]["_training_iteration"])
        )

    def finish_training(self, error=False, **info):
        self.events.append(("finish", error))


def test_older_trainer_run_takes_loggers_and_training_callbacks(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    collect = Collect()
    trainer = Trainer("torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    trainer.run(
        train_func,
        {"lr": 0.5},
        callbacks=[JsonLoggerCallback(), TBXLoggerCallback(), collect],
    )
    trainer.shutdown()
    assert collect.events == [
        ("start", 0.5),
        ("result", [0, 1], 1),
        ("result", [0, 1], 2),
        ("result", [0, 1], 3),
        ("finish", False),
    ]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [s.step for s in events.Scalars("ray/tune/loss")] == [1, 2, 3]


def setup_mlflow_func(config):
    mlflow = setup_mlflow(
        config,
        tracking_uri=config["uri"],
        experiment_name="inside",
        create_experiment_if_not_exists=True,
    )
    for step in (1, 2):
        mlflow.log_metric("loss", 1.0 / step, step=step)
    mlflow.end_run()


def test_setup_mlflow_logs_from_rank_zero_only(tmp_path, mlflow_uri):
    from mlflow.tracking import MlflowClient

    DataParallelTrainer(
        setup_mlflow_func,
        train_loop_config={"uri": mlflow_uri, "lr": 0.1},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="inside-run", storage_path=str(tmp_path), verbose=0),
    ).fit()
    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("inside").experiment_id])
    assert run.data.params["lr"] == "0.1"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [1.0, 0.5]


def setup_wandb_func(config):
    run = setup_wandb(config, project="inside", mode="offline", dir=config["dir"])
    run.log({"loss": 0.5})
    run.finish()


def test_setup_wandb_logs_from_rank_zero_only(tmp_path):
    DataParallelTrainer(
        setup_wandb_func,
        train_loop_config={"dir": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="inside-run", storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert len(glob.glob(str(tmp_path / "wandb" / "offline-run-*"))) == 1


class Hooks(Callback):
    def __init__(self):
        self.calls = []

    def on_trial_start(self, iteration, trials, trial, **info):
        self.calls.append(("start", trial.trial_id, trial.config["lr"]))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.calls.append(("result", result["training_iteration"], len(info["worker_results"])))

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.calls.append(("checkpoint", iteration, sorted(os.listdir(checkpoint.path))))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.calls.append(("error", iteration, type(trial.error).__name__))

    def on_experiment_end(self, trials, **info):
        self.calls.append(("end", [t.status for t in trials]))


def test_a_train_run_calls_the_tune_hooks_with_itself_as_the_trial(tmp_path):
    hooks = Hooks()
    with pytest.raises(train.TrainingFailedError):
        fit(tmp_path, [hooks], fail_at=2)
    assert hooks.calls[0] == ("start", "run", 0.1)
    assert ("result", 1, 2) in hooks.calls
    assert ("checkpoint", 2, ["model.txt"]) in hooks.calls
    assert hooks.calls[-2:] == [("error", 2, "WorkerGroupError"), ("end", ["ERROR"])]


def test_tensorboard_files_reach_a_remote_storage_path():
    import fsspec

    result = DataParallelTrainer(
        train_func,
        train_loop_config={"steps": 2},
        scaling_config=ScalingConfig(num_workers=0),  # memory:// is this process's
        run_config=RunConfig(
            name="remote",
            storage_path="memory://tracking",
            verbose=0,
            callbacks=[TBXLoggerCallback()],
        ),
    ).fit()
    fs = fsspec.filesystem("memory")
    try:
        names = [os.path.basename(p) for p in fs.ls(result.path, detail=False)]
        assert any(n.startswith("events.out.tfevents.") for n in names)
    finally:
        fs.rm("/tracking", recursive=True)
