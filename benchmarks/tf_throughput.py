"""Keras training throughput under MultiWorkerMirroredStrategy: TensorflowTrainer against
a plain launcher.

The job: a Keras MLP (64 features, two hidden layers of 256, 10 classes) trained with
``model.fit`` on 2 workers, per-worker batch 256, one warm-up epoch then ``--epochs``
timed epochs of ``--steps`` steps. The same function runs under TensorflowTrainer and under
a plain launcher, in the same run, that starts 2 Python processes and sets their
``TF_CONFIG`` itself. Target: lockstep >= 0.95x the launcher's samples/s.

    python benchmarks/tf_throughput.py [--steps 50] [--epochs 3] [--repeats 3]
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import bench

BATCH = 256


def train_job(steps: int, epochs: int) -> float:
    """Train on this worker's cluster; samples/s over the timed epochs, all workers."""
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH * steps, 64)).astype("float32")
    y = rng.integers(0, 10, size=(BATCH * steps,))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).with_options(options)
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input((64,)),
                tf.keras.layers.Dense(256, activation="relu"),
                tf.keras.layers.Dense(256, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer="adam",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    model.fit(data, epochs=1, verbose=0)  # warm-up: tracing, the collectives' first rounds
    start = time.perf_counter()
    model.fit(data, epochs=epochs, verbose=0)
    return workers * BATCH * steps * epochs / (time.perf_counter() - start)


def lockstep_run(steps: int, epochs: int) -> float:
    from lockstep import train
    from lockstep.train.tensorflow import TensorflowTrainer

    def job(config):
        train.report({"samples_per_s": train_job(config["steps"], config["epochs"])})

    with tempfile.TemporaryDirectory(prefix="bench-tf-") as storage:
        config = {"steps": steps, "epochs": epochs}
        result = bench.fit_two_workers(TensorflowTrainer, job, config, storage)
    return float(result.metrics["samples_per_s"])


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def plain_run(steps: int, epochs: int, one_thread: bool = False) -> float:
    """2 processes with TF_CONFIG set by hand, as the TensorFlow tutorial launches them."""
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_USE_LEGACY_KERAS": "1"}
        if one_thread:  # the thread pools lockstep gives a worker of 1 CPU
            env.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1")
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(steps), str(epochs)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    outputs = [p.communicate()[0] for p in procs]
    return float(outputs[0].split()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        print(train_job(int(sys.argv[2]), int(sys.argv[3])))
        return
    args = bench.options(__doc__, steps=50, epochs=3, repeats=3).parse_args()
    plains, singles, ours_all = [], [], []
    for _ in range(args.repeats):  # interleaved, so that all see the same machine
        plains.append(plain_run(args.steps, args.epochs))
        singles.append(plain_run(args.steps, args.epochs, one_thread=True))
        ours_all.append(lockstep_run(args.steps, args.epochs))
    plain, single, ours = (statistics.median(v) for v in (plains, singles, ours_all))
    print(f"medians of {args.repeats} interleaved runs:")
    print(f"plain launcher: {plain:.0f} samples/s (TensorFlow's default threads)")
    print(f"plain launcher, 1 intra- and 1 inter-op thread: {single:.0f} samples/s")
    print(f"TensorflowTrainer: {ours:.0f} samples/s")
    print(f"ratio: {ours / plain:.2f}x (target >= 0.95x)")
    print(f"ratio vs the launcher with one thread each: {ours / single:.2f}x")


if __name__ == "__main__":
    main()
