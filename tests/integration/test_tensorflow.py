"""TensorFlow on real MultiWorkerMirroredStrategy clusters: TF_CONFIG, Keras callbacks,
checkpoints, restarts, the older Trainer, and what listens during a run."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from lockstep import train
from lockstep.testing import Fault
from lockstep.train import (
    Checkpoint,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    Trainer,
    TrainingFailedError,
    UserCallback,
)
from lockstep.train.tensorflow import (
    TensorflowCheckpoint,
    TensorflowConfig,
    TensorflowTrainer,
    prepare_dataset_shard,
)
from lockstep.train.tensorflow.keras import ReportCheckpointCallback
from tests.contracts.backend import BackendContract
from tests.helpers import EveryRank, fit_on, hang_of, listening_addresses


class Listening(UserCallback):
    """Records, at every report, the addresses the run's processes listen on."""

    def __init__(self):
        self.addresses: set[str] = set()

    def after_report(self, run_context, metrics, checkpoint):
        self.addresses |= listening_addresses()


def config_with(run_config, *callbacks, **kwargs):
    return dataclasses.replace(run_config, callbacks=list(callbacks), **kwargs)


fit = functools.partial(fit_on, TensorflowTrainer)


def keras_model():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    return model


def mirrored_keras_model():
    """keras_model(), its variables mirrored across the workers (MultiWorkerMirroredStrategy)."""
    with tf.distribute.MultiWorkerMirroredStrategy().scope():
        return keras_model()


def rank_data(rank, n=32):
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def weights_digest(model):
    return [w.tolist() for w in model.get_weights()]


class TestTensorflowBackend(BackendContract):
    @pytest.fixture
    def backend_config(self):
        return TensorflowConfig()

    @staticmethod
    def probe():
        config = json.loads(os.environ["TF_CONFIG"])
        return [config["task"]["index"], len(config["cluster"]["worker"])]

    def check_probe(self, results, world_size):
        assert results == [[r, world_size] for r in range(world_size)]


def test_tf_config_names_every_worker_on_loopback_with_its_own_index(run_config):
    ranks = EveryRank()

    def train_func():
        train.report({"tf_config": os.environ["TF_CONFIG"]})

    fit(train_func, config_with(run_config, ranks))
    configs = [json.loads(m["tf_config"]) for m in ranks.steps[0]]
    assert [c["task"] for c in configs] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    workers = configs[0]["cluster"]["worker"]
    assert all(c["cluster"]["worker"] == workers for c in configs)
    assert [w.rsplit(":", 1)[0] for w in workers] == ["127.0.0.1", "127.0.0.1"]
    assert len({w.rsplit(":", 1)[1] for w in workers}) == 2


def test_two_workers_end_model_fit_with_identical_weights(run_config):
    ranks = EveryRank()

    def train_func():
        rank = train.get_context().get_world_rank()
        model = mirrored_keras_model()
        x, y = rank_data(rank)
        dataset = prepare_dataset_shard(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
        model.fit(dataset, epochs=2, verbose=0)
        train.report({"weights": weights_digest(model), "keras": type(model).__module__})

    fit(train_func, config_with(run_config, ranks))
    first, second = ranks.steps[0]
    assert first["weights"] == second["weights"]  # bit-identical: the same floats
    assert first["keras"].startswith("tf_keras.")  # the material's Keras 2 code, as written


def test_the_materials_dataset_shard_helper_trains_on_each_workers_rows(run_config):
    """The guide's to_tf_dataset: iter_tf_batches, from_generator, prepare_dataset_shard."""
    import lockstep.data

    ranks = EveryRank()

    def train_func(config):
        dataset_shard = train.get_context().get_dataset_shard("train")

        def to_tf_dataset(dataset, batch_size):
            def to_tensor_iterator():
                for batch in dataset.iter_tf_batches(batch_size=batch_size, dtypes=tf.float32):
                    yield batch["image"], batch["label"]

            output_signature = (
                tf.TensorSpec(shape=(None, 4), dtype=tf.float32),
                tf.TensorSpec(shape=(None, 4), dtype=tf.float32),
            )
            tf_dataset = tf.data.Dataset.from_generator(
                to_tensor_iterator, output_signature=output_signature
            )
            return prepare_dataset_shard(tf_dataset)

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(4)])
            model.compile(optimizer="sgd", loss="mse")
        rows = sum(int(x.shape[0]) for x, _ in to_tf_dataset(dataset_shard, 8))
        history = model.fit(to_tf_dataset(dataset_shard, 8), verbose=0)
        train.report({"rows": rows, "loss": history.history["loss"][0]})

    items = [{"image": [float(i)] * 4, "label": [2.0 * i] * 4} for i in range(32)]
    fit(
        train_func,
        config_with(run_config, ranks),
        datasets={"train": lockstep.data.from_items(items)},
        train_loop_config={},
    )
    assert [m["rows"] for m in ranks.steps[0]] == [16, 16]  # each its half, not re-sharded


def test_keras_callback_reports_every_epoch_and_its_checkpoint_predicts(run_config):
    ranks = EveryRank()

    def train_func():
        model = mirrored_keras_model()
        x, y = rank_data(train.get_context().get_world_rank())
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=3,
            verbose=0,
            callbacks=[ReportCheckpointCallback(metrics={"train_loss": "loss"})],
        )

    run = config_with(run_config, ranks)
    result = fit(train_func, run)
    assert [sorted(m) for step in ranks.steps for m in step] == [["train_loss"]] * 6
    losses = [step[0]["train_loss"] for step in ranks.steps]
    assert losses == sorted(losses, reverse=True)  # it learns
    assert len(result.best_checkpoints) == 3  # one per epoch, as configured
    model = TensorflowCheckpoint(result.checkpoint.path).get_model()
    x, y = rank_data(5, n=16)
    error = float(np.mean((model.predict(x, verbose=0) - y) ** 2))
    assert error < float(np.mean(y**2))  # better than predicting zero


def test_keras_callback_checkpoints_only_where_asked(run_config):
    ranks = EveryRank()

    def train_func():
        model = mirrored_keras_model()
        x, y = rank_data(train.get_context().get_world_rank(), n=16)
        callback = ReportCheckpointCallback(
            checkpoint_on="train_end", report_metrics_on="epoch_end", metrics="loss"
        )
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[callback])

    result = fit(train_func, config_with(run_config, ranks))
    assert len(ranks.steps) == 3  # two epochs' metrics, then the checkpoint at the end
    assert len(result.best_checkpoints) == 1


def test_keras_callback_refuses_unknown_hooks():
    with pytest.raises(ValueError, match="HINT"):
        ReportCheckpointCallback(checkpoint_on="epoch_ends")


def resumable_train_func(config):
    """The material's checkpoint pattern: every worker saves the model and reports it."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    start = 0
    with strategy.scope():
        checkpoint = train.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as checkpoint_dir:
                model = tf.keras.models.load_model(os.path.join(checkpoint_dir, "model.keras"))
                with open(os.path.join(checkpoint_dir, "checkpoint.json")) as f:
                    start = json.load(f)["epoch"] + 1
        else:
            model = keras_model()
    x, y = rank_data(train.get_context().get_world_rank(), n=16)
    for epoch in range(start, config["num_epochs"]):
        for fault in config.get("faults", []):
            fault.fire_if_due(epoch)
        history = model.fit(x, y, batch_size=8, verbose=0)
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            model.save(os.path.join(temp_checkpoint_dir, "model.keras"))
            with open(os.path.join(temp_checkpoint_dir, "checkpoint.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            train.report(
                {"epoch": epoch, "loss": history.history["loss"][0]},
                checkpoint=Checkpoint.from_directory(temp_checkpoint_dir),
            )


def test_resume_from_checkpoint_continues_the_epoch_count(tmp_path):
    first = fit(
        resumable_train_func,
        RunConfig(name="first", storage_path=str(tmp_path), verbose=0),
        train_loop_config={"num_epochs": 2},
    )
    second = fit(
        resumable_train_func,
        RunConfig(name="second", storage_path=str(tmp_path), verbose=0),
        train_loop_config={"num_epochs": 4},
        resume_from_checkpoint=first.checkpoint,
    )
    assert first.metrics_dataframe["epoch"].tolist() == [0, 1]
    assert second.metrics_dataframe["epoch"].tolist() == [2, 3]


@pytest.mark.slow
def test_a_worker_killed_mid_fit_is_restarted_from_the_last_checkpoint(run_config):
    fault = Fault(kind="signal", rank=1, at_epoch=2)
    result = fit(
        resumable_train_func,
        config_with(run_config, failure_config=FailureConfig(max_failures=1)),
        train_loop_config={"num_epochs": 4, "faults": [fault]},
    )
    # epochs 0 and 1 before the kill, then 2 and 3 from the checkpoint of epoch 1
    assert result.metrics_dataframe["epoch"].tolist() == [0, 1, 2, 3]
    assert result.metrics["epoch"] == 3


def test_a_failed_worker_stops_the_other_at_once(run_config):
    """Rank 1 dies while rank 0 waits in an all-reduce: the run fails with rank 1's exit
    as the cause, without waiting for TensorFlow to notice the missing heartbeats."""

    def train_func():
        model = mirrored_keras_model()
        x, y = rank_data(0, n=16)
        model.fit(x, y, batch_size=8, verbose=0)
        train.report({"epoch": 0})
        if train.get_context().get_world_rank() == 1:
            os._exit(3)
        model.fit(x, y, batch_size=8, verbose=0)  # rank 0 waits for rank 1 here

    with pytest.raises(TrainingFailedError, match=r"rank 1 .*exited with code 3") as info:
        fit(train_func, run_config)
    assert "heartbeat" not in str(info.value).lower()


def test_legacy_trainer_runs_tensorflow_and_returns_every_rank(tmp_path):
    def train_func_distributed():
        tf_config = json.loads(os.environ["TF_CONFIG"])
        num_workers = len(tf_config["cluster"]["worker"])
        model = mirrored_keras_model()
        x, y = rank_data(0, n=16)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        return [tf_config["task"]["index"], num_workers]

    trainer = Trainer(backend="tensorflow", num_workers=2, logdir=str(tmp_path))
    trainer.start()
    values = trainer.run(train_func_distributed)
    trainer.shutdown()
    assert values == [[0, 2], [1, 2]]


def test_during_fit_only_tensorflow_grpc_listens_beyond_loopback(run_config):
    """Every endpoint lockstep opens is on loopback. TensorFlow's own gRPC server binds
    every interface whatever TF_CONFIG says (grpc_server_lib.cc listens on "0.0.0.0:port"),
    which the README's security section explains."""
    listening = Listening()
    ports = EveryRank()

    def train_func():
        model = mirrored_keras_model()
        x, y = rank_data(0, n=16)
        model.fit(x, y, batch_size=8, verbose=0)
        port = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][
            train.get_context().get_world_rank()
        ].rsplit(":", 1)[1]
        train.report({"port": port})
        model.fit(x, y, batch_size=8, verbose=0)
        train.report({"port": port})

    fit(train_func, config_with(run_config, listening, ports))
    grpc_ports = {m["port"] for m in ports.steps[0]}
    assert listening.addresses  # the run's servers were seen
    others = {a for a in listening.addresses if a.rsplit(":", 1)[1] not in grpc_ports}
    assert all(a.rsplit(":", 1)[0] in ("127.0.0.1", "::1") for a in others), others


WARM_SCRIPT = textwrap.dedent(
    """
    import sys, tempfile
    from lockstep import train
    from lockstep.train import RunConfig, ScalingConfig
    from lockstep.train.tensorflow import TensorflowTrainer

    def train_func():
        # Before the function touches TensorFlow: was it imported already (warm)?
        train.report({"warm": "tensorflow" in sys.modules})

    with tempfile.TemporaryDirectory() as storage:
        for name in ("first", "second"):
            result = TensorflowTrainer(
                train_func, scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(name=name, storage_path=storage, verbose=0)).fit()
            print(name, result.metrics["warm"])
    """
)


def test_workers_start_with_tensorflow_imported():
    done = subprocess.run(
        [sys.executable, "-c", WARM_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["first", "True", "second", "True"]


KERAS3_SCRIPT = textwrap.dedent(
    """
    import tempfile
    import keras
    import tensorflow as tf
    from lockstep import train
    from lockstep.train import RunConfig, ScalingConfig
    from lockstep.train.tensorflow import TensorflowTrainer

    def train_func():
        assert tf.keras.__version__.startswith("3."), tf.keras.__version__
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
            model.build((None, 2))
            optimizer = keras.optimizers.SGD(0.1)
        rank = train.get_context().get_world_rank()
        x = tf.constant([[1.0 + rank, 2.0]] * 4)

        @tf.function
        def step(x):
            def replica_step(x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(model(x) ** 2)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            return strategy.run(replica_step, args=(x,))

        for _ in range(2):
            step(x)
        train.report({"weights": [w.tolist() for w in model.get_weights()]})

    class Ranks(train.UserCallback):
        steps = []
        def after_report(self, run_context, metrics, checkpoint):
            self.steps.append(metrics)

    with tempfile.TemporaryDirectory() as storage:
        TensorflowTrainer(
            train_func, scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=storage, verbose=0, callbacks=[Ranks()])).fit()
    first, second = Ranks.steps[0]
    print("identical", first["weights"] == second["weights"])
    """
)


def test_keras_3_custom_loop_with_strategy_run():
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "0"}
    done = subprocess.run(
        [sys.executable, "-c", KERAS3_SCRIPT], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["identical", "True"]


def tf_stuck_here():
    import threading

    threading.Event().wait()


def test_a_hang_names_the_rank_out_of_the_all_reduce(tmp_path):
    """Rank 0 waits in MultiWorkerMirroredStrategy's all-reduce (C++); rank 1 is stuck
    in Python: the watchdog tells them apart from their stacks."""

    def train_func():
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        train.report({"step": 0})
        if train.get_context().get_world_rank() == 1:
            tf_stuck_here()
        strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
        train.report({"step": 1})

    trainer = TensorflowTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name="hung",
            storage_path=str(tmp_path),
            verbose=0,
            failure_config=FailureConfig(hang_timeout_s=3.0),
        ),
    )
    failure = hang_of(trainer)
    assert ", in tf_stuck_here() at test_tensorflow.py:" in failure.summary
    assert failure.summary.endswith("; rank 0 waiting in a collective")
    assert (tmp_path / "hung" / "errors" / "attempt_0.txt").exists()
