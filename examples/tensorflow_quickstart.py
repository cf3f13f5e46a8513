"""The Ray Train material's TensorFlow quickstart: Keras on 2 workers under
MultiWorkerMirroredStrategy, reporting each epoch with ReportCheckpointCallback.

Kept as the material writes it, with ``ray`` changed to ``lockstep`` (and a storage path
option); then the last checkpoint is loaded into a model that predicts.

Install and run, from the repository's root:

    pip install -e ".[tensorflow]"
    python examples/tensorflow_quickstart.py [--storage-path DIR]

Runs go to ~/lockstep_results (or $LOCKSTEP_STORAGE_PATH) unless --storage-path says otherwise.
"""

import argparse

import tensorflow as tf

import lockstep
from lockstep import train
from lockstep.train import ScalingConfig
from lockstep.train.tensorflow import TensorflowTrainer
from lockstep.train.tensorflow.keras import ReportCheckpointCallback

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--storage-path", default=None, help="default: ~/lockstep_results")
args = parser.parse_args()

# If using GPUs, set this to True.
use_gpu = False

a = 5
b = 10
size = 100


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=()),
            # Add feature dimension, expanding (batch_size,) to (batch_size, 1).
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(10),
            tf.keras.layers.Dense(1),
        ]
    )
    return model


def train_func(config: dict):
    batch_size = config.get("batch_size", 64)
    epochs = config.get("epochs", 3)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        multi_worker_model = build_model()
        multi_worker_model.compile(
            optimizer=tf.keras.optimizers.SGD(learning_rate=config.get("lr", 1e-3)),
            loss=tf.keras.losses.mean_squared_error,
            metrics=[tf.keras.metrics.mean_squared_error],
        )

    dataset = train.get_dataset_shard("train")

    results = []
    for _ in range(epochs):
        tf_dataset = dataset.to_tf(feature_columns="x", label_columns="y", batch_size=batch_size)
        history = multi_worker_model.fit(tf_dataset, callbacks=[ReportCheckpointCallback()])
        results.append(history.history)
    return results


config = {"lr": 1e-3, "batch_size": 32, "epochs": 4}

train_dataset = lockstep.data.from_items([{"x": x / 200, "y": 2 * x / 200} for x in range(200)])
scaling_config = ScalingConfig(num_workers=2, use_gpu=use_gpu)
trainer = TensorflowTrainer(
    train_loop_per_worker=train_func,
    train_loop_config=config,
    scaling_config=scaling_config,
    datasets={"train": train_dataset},
    run_config=train.RunConfig(storage_path=args.storage_path),
)
result = trainer.fit()
print(result.metrics)

# Not in the material: the last checkpoint, loaded into a model that predicts.
from lockstep.train.tensorflow import TensorflowCheckpoint  # noqa: E402

model = TensorflowCheckpoint(result.checkpoint.path).get_model()
print("prediction for x=0.5:", float(model.predict(tf.constant([0.5]), verbose=0)[0, 0]))
