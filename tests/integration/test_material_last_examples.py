"""The material's last examples as it prints them: Ray 1.x's JsonLoggerCallback,
``TensorflowTrainer(tensorflow_backend=...)``, MLflow with a ``file://`` tracking URI on
MLflow 3; and the error types a Ray user's ``except`` relies on."""

from __future__ import annotations

import json
import threading
import warnings

import pytest

from lockstep import train
from lockstep.train import DataParallelTrainer, RunConfig, ScalingConfig, Trainer
from lockstep.train.callbacks import JsonLoggerCallback, MLflowLoggerCallback, setup_mlflow


def three_reports(config):
    for epoch in range(3):
        train.report(loss=1.0 / (epoch + 1), rank=train.world_rank())
    return train.world_rank()


def test_the_materials_json_logger_writes_results_json_in_the_run_directory(tmp_path):
    """The material's example 6-13: Trainer.run(callbacks=[JsonLoggerCallback(), ...])."""
    trainer = Trainer("torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    every_rank = JsonLoggerCallback(filename="all.json", workers_to_log=None)
    results = trainer.run(three_reports, {"lr": 0.1}, callbacks=[JsonLoggerCallback(), every_rank])
    trainer.shutdown()
    assert results == [0, 1]
    run_dir = trainer.latest_run_dir
    assert run_dir == tmp_path / "run_001"
    logged = json.loads((run_dir / "results.json").read_text())  # one JSON list
    assert [r["loss"] for r in logged] == [1.0, 0.5, 1 / 3]
    assert [r["rank"] for r in logged] == [0, 0, 0]  # rank 0's results, by default
    assert [r["_training_iteration"] for r in logged] == [1, 2, 3]
    logged = json.loads((run_dir / "all.json").read_text())
    assert [[r["rank"] for r in step] for step in logged] == [[0, 1]] * 3


def test_a_second_run_of_the_trainer_gets_its_own_directory(tmp_path):
    (tmp_path / "run_001").mkdir()  # an earlier trainer's run: never continued
    trainer = Trainer("torch", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    trainer.run(three_reports, callbacks=[JsonLoggerCallback()])
    trainer.run(three_reports, callbacks=[JsonLoggerCallback()])
    trainer.shutdown()
    assert trainer.latest_run_dir == tmp_path / "run_003"
    assert (tmp_path / "run_002" / "results.json").exists()


@pytest.mark.slow
def test_tensorflow_backend_is_another_name_of_tensorflow_config(run_config):
    from lockstep.train.tensorflow import TensorflowConfig, TensorflowTrainer

    def train_func():
        import tensorflow as tf

        cluster = json.loads(__import__("os").environ["TF_CONFIG"])["cluster"]["worker"]
        threads = tf.config.threading.get_intra_op_parallelism_threads()
        train.report({"workers": len(cluster), "threads": threads})

    result = TensorflowTrainer(
        train_func,
        tensorflow_backend=TensorflowConfig(num_threads=1),  # as the material spells it
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run_config,
    ).fit()
    assert result.metrics == {"workers": 2, "threads": 1}
    with pytest.raises(TypeError, match=r"another name of tensorflow_config.*HINT"):
        TensorflowTrainer(
            train_func, tensorflow_backend=TensorflowConfig(), tensorflow_config=TensorflowConfig()
        )


def log_with_setup_mlflow(config):
    mlflow = setup_mlflow(
        config,
        tracking_uri=config["uri"],
        experiment_name="inside",
        create_experiment_if_not_exists=True,
    )
    mlflow.log_metric("inner", 7.0, step=1)
    train.report({"loss": 0.5})


def test_mlflow_file_store_as_rays_examples_write_it(tmp_path, run_config, monkeypatch):
    """MLflow 3 refuses its file store; the run still logs to the URI it was given, with a
    warning that says what to use instead, and MLflow reads the runs back."""
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = f"file://{tmp_path / 'mlruns'}"
    callback = MLflowLoggerCallback(tracking_uri=uri, experiment_name="exp")
    with pytest.warns(FutureWarning, match="file store.*HINT: tracking_uri='sqlite:///mlflow.db'"):
        result = DataParallelTrainer(
            log_with_setup_mlflow,
            train_loop_config={"uri": uri},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(
                name=run_config.name,
                storage_path=run_config.storage_path,
                verbose=0,
                callbacks=[callback],
            ),
        ).fit()
    assert result.metrics == {"loss": 0.5}

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own reader needs it
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [0.5]
    (inner,) = client.search_runs([client.get_experiment_by_name("inside").experiment_id])
    assert client.get_run(inner.info.run_id).data.metrics == {"inner": 7.0}


def test_an_explicit_opt_out_leaves_mlflow_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    callback = MLflowLoggerCallback(tracking_uri=f"file://{tmp_path}", experiment_name="e")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        callback.setup()


def test_a_training_function_that_cannot_be_pickled_is_a_type_error(run_config):
    lock = threading.Lock()

    def train_func():
        with lock:
            pass

    with pytest.raises(TypeError, match=r"cannot be pickled.*HINT") as raised:
        DataParallelTrainer(train_func, run_config=run_config).fit()
    assert isinstance(raised.value, ValueError)  # lockstep's type, as before


def test_a_missing_train_dataset_is_a_key_error_and_a_value_error(run_config):
    import lockstep.data as ld
    from lockstep.data.preprocessors import StandardScaler

    with pytest.raises(KeyError, match=r"datasets\['train'\]") as raised:
        DataParallelTrainer(
            lambda: None,
            datasets={"valid": ld.from_items([{"x": 1.0}])},
            preprocessor=StandardScaler(["x"]),
            run_config=run_config,
        )
    assert isinstance(raised.value, ValueError)
